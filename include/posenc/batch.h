// A batch of views that share one geometry: activations [..., tokens, heads, head_dim]
// (Batched<Heads<T>>), position lists [..., tokens] (BatchedPositions) or M-RoPE position streams.
//
// Batch element b is `first` moved by b's offset over the leading (batch) dims, each with its own
// stride, so a C-contiguous batch, a transposed Hugging Face [batch, heads, seq, dim] tensor and
// one list of positions shared by every element (stride 0) are all batches, and nothing is copied.
// Every operation that takes a batch validates the whole call before writing anything (each
// element, and the memory the elements share), then runs it once over batch x tokens when the
// layout allows, else once per element.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "posenc/heads.h"

namespace posenc {

// The same view `elements` further on: what Batched::At needs of a view type.
template <typename T>
Heads<T> MovedBy(Heads<T> view, int64_t elements) {
  view.data += elements;
  return view;
}
inline std::span<const int64_t> MovedBy(std::span<const int64_t> list, int64_t elements) {
  return {list.data() + elements, list.size()};
}

template <typename View>
struct Batched {
  View first;                          // batch element 0
  std::vector<int64_t> batch_shape;    // the batch dims, outermost first; none: a batch of one
  std::vector<int64_t> batch_strides;  // in elements of the view's data; 0 shares one element's
  std::string_view name;               // the argument's name in messages; empty: the library's

  Batched() = default;
  // One view: a batch of one.
  Batched(View view) : first(view) {}  // NOLINT(google-explicit-constructor): a view is a batch
  Batched(View view, std::vector<int64_t> shape, std::vector<int64_t> strides,
          std::string_view name = {})
      : first(view), batch_shape(std::move(shape)), batch_strides(std::move(strides)), name(name) {}
  // A mutable batch read as a const one.
  template <typename Other>
    requires(!std::is_same_v<Other, View> && std::is_convertible_v<Other, View>)
  Batched(const Batched<Other>& other)  // NOLINT(google-explicit-constructor)
      : first(other.first),
        batch_shape(other.batch_shape),
        batch_strides(other.batch_strides),
        name(other.name) {}

  int64_t BatchCount() const {
    int64_t count = 1;
    for (int64_t n : batch_shape) count *= n;
    return count;
  }
  // Elements from first's data to element b's (b row-major over batch_shape).
  int64_t Offset(int64_t b) const {
    int64_t offset = 0;
    for (size_t i = batch_shape.size(); i-- > 0;) {
      offset += (b % batch_shape[i]) * batch_strides[i];
      b /= batch_shape[i];
    }
    return offset;
  }
  View At(int64_t b) const { return MovedBy(first, Offset(b)); }
};

// The positions of a batch: [tokens] shared by every element (batch strides 0) or one list each.
using BatchedPositions = Batched<std::span<const int64_t>>;

// Merges the batch dims of `view` into its tokens when each non-unit dim steps exactly over the
// next inner one, as in a C-contiguous batch; returns whether it did.
template <typename T>
bool FoldIntoTokens(Batched<Heads<T>>& view) {
  Heads<T>& e = view.first;
  int64_t stride = e.token_stride, extent = e.tokens;
  bool have_inner = e.tokens > 1;
  for (size_t i = view.batch_shape.size(); i-- > 0;) {
    if (view.batch_shape[i] == 1) continue;
    if (have_inner && view.batch_strides[i] != stride * extent) return false;
    if (!have_inner) e.token_stride = view.batch_strides[i];  // a unit tokens dim has any stride
    stride = view.batch_strides[i], extent = view.batch_shape[i], have_inner = true;
  }
  e.tokens *= view.BatchCount();
  view.batch_shape.clear();
  view.batch_strides.clear();
  return true;
}

}  // namespace posenc
