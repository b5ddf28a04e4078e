// Strided views of activations laid out as [tokens, heads, head_dim].
//
// The innermost dimension (head_dim) is contiguous; tokens and heads have explicit strides in
// elements, so [batch, seq, heads, dim], [seq, batch, heads, dim] and packed variable-length
// batches are all views of the same thing:
//
//   element (t, h, d) lives at data[t * token_stride + h * head_stride + d]
//
// A view does not own memory. `T` is the element type (float, BFloat16 or Float16 from
// posenc/storage.h); use `const T` for inputs.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "posenc/error.h"
#include "posenc/storage.h"

namespace posenc {

template <typename T>
struct Heads {
  T* data = nullptr;
  int64_t tokens = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t token_stride = 0;  // elements between token t and t + 1
  int64_t head_stride = 0;   // elements between head h and h + 1

  // A densely packed [tokens, num_heads, head_dim] array.
  static Heads Dense(T* data, int64_t tokens, int64_t num_heads, int64_t head_dim) {
    return {data, tokens, num_heads, head_dim, num_heads * head_dim, head_dim};
  }

  T* Row(int64_t t, int64_t h) const { return data + t * token_stride + h * head_stride; }

  // Read-only view of the same memory: implicit, as T* converts to const T*.
  operator Heads<const std::remove_const_t<T>>() const {  // NOLINT(google-explicit-constructor)
    return {data, tokens, num_heads, head_dim, token_stride, head_stride};
  }

  // Checks that the view is well formed: non-null data, a positive head_dim, and non-negative
  // strides under which no two (token, head) rows overlap (either axis may be the outer one).
  // Zero tokens or zero heads make an empty view (data may then be null): every operation on it
  // is a no-op that succeeds. `function` and `name` go into the error message.
  void Validate(std::string_view function, std::string_view name) const;

  // No rows: zero tokens or zero heads.
  bool Empty() const { return tokens == 0 || num_heads == 0; }

  // The half-open byte range [begin, end) the view touches; used to detect aliasing.
  const void* Begin() const { return data; }
  const void* End() const {
    return data + (tokens - 1) * token_stride + (num_heads - 1) * head_stride + head_dim;
  }
  // Number of elements from Begin() to End().
  int64_t Extent() const {
    return (tokens - 1) * token_stride + (num_heads - 1) * head_stride + head_dim;
  }
};

// True when two views share any byte of memory.
template <typename A, typename B>
bool Overlaps(const Heads<A>& a, const Heads<B>& b) {
  if (a.Empty() || b.Empty()) return false;  // no bytes; Begin and End would mislead
  auto lo_a = static_cast<const char*>(a.Begin()), hi_a = static_cast<const char*>(a.End());
  auto lo_b = static_cast<const char*>(b.Begin()), hi_b = static_cast<const char*>(b.End());
  return lo_a < hi_b && lo_b < hi_a;
}

extern template struct Heads<float>;
extern template struct Heads<const float>;
extern template struct Heads<BFloat16>;
extern template struct Heads<const BFloat16>;
extern template struct Heads<Float16>;
extern template struct Heads<const Float16>;
extern template struct Heads<double>;
extern template struct Heads<const double>;

}  // namespace posenc
