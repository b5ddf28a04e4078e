#include "posenc/heads.h"

#include <algorithm>
#include <string>
#include <utility>

namespace posenc {

template <typename T>
void Heads<T>::Validate(std::string_view function, std::string_view name) const {
  // Either axis may be the outer one ([tokens, heads] or [heads, tokens], as in Hugging Face's
  // [batch, heads, seq, dim]): order the two axes by stride; the inner one must step at least a
  // row, the outer one at least its whole span.
  struct Axis {
    const char* name;
    int64_t count, stride;
  };
  Axis inner{".head_stride", num_heads, head_stride}, outer{".token_stride", tokens, token_stride};
  if (inner.count == 1 || (outer.count > 1 && outer.stride < inner.stride)) std::swap(inner, outer);
  const int64_t span = (inner.count - 1) * inner.stride + head_dim;
  // An empty view (zero tokens or heads) has no rows to overlap; only its sizes and strides are
  // checked, so that an empty batch is a no-op rather than an error.
  const bool empty = tokens == 0 || num_heads == 0;
  if (empty && tokens >= 0 && num_heads >= 0 && head_dim > 0 && head_stride >= 0 &&
      token_stride >= 0) {
    return;
  }
  // The common case costs no string: messages are built only when a check fails.
  if (data != nullptr && tokens > 0 && num_heads > 0 && head_dim > 0 && head_stride >= 0 &&
      token_stride >= 0 && (inner.count == 1 || inner.stride >= head_dim) &&
      (outer.count == 1 || outer.stride >= span)) {
    return;
  }
  const std::string n(name);
  Require(data != nullptr, function, n + ".data", "be non-null", "nullptr");
  Require(tokens >= 0, function, n + ".tokens", "be >= 0", tokens);
  Require(num_heads >= 0, function, n + ".num_heads", "be >= 0", num_heads);
  Require(head_dim > 0, function, n + ".head_dim", "be positive", head_dim);
  Require(head_stride >= 0, function, n + ".head_stride", "be >= 0", head_stride);
  Require(token_stride >= 0, function, n + ".token_stride", "be >= 0", token_stride);
  // Rows of head_dim elements must not overlap.
  Require(inner.count == 1 || inner.stride >= head_dim, function, n + inner.name,
          "be >= head_dim (" + std::to_string(head_dim) + ") so that rows do not overlap",
          inner.stride);
  Require(outer.count == 1 || outer.stride >= span, function, n + outer.name,
          "be >= " + std::to_string(span) + " so that rows do not overlap", outer.stride);
}

template struct Heads<float>;
template struct Heads<const float>;
template struct Heads<BFloat16>;
template struct Heads<const BFloat16>;
template struct Heads<Float16>;
template struct Heads<const Float16>;
template struct Heads<double>;
template struct Heads<const double>;

}  // namespace posenc
