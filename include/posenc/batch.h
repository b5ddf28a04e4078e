// A batch of views that share one geometry: activations [..., tokens, heads, head_dim]
// (Batched<Heads<T>>), position lists [..., tokens] (BatchedPositions) or M-RoPE position streams.
//
// Batch element b is `first` moved by b's offset over the leading (batch) dims, each with its own
// stride, so a C-contiguous batch, a transposed Hugging Face [batch, heads, seq, dim] tensor and
// one list of positions shared by every element (stride 0) are all batches, and nothing is copied.
// Every operation that takes a batch validates the whole call before writing anything (each
// element, and the memory the elements share), then runs it once when the layout allows (RoPE:
// over batch x tokens, or batch x heads when the positions are shared), else once per element
// (attention always: a query sees only its own element's keys).
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

// Merges the batch dims of `view` into one of its own dims (count, stride) when each non-unit
// batch dim steps exactly over the next inner one; returns whether it did (`view` is unchanged
// when it did not).
template <typename T>
bool FoldBatchInto(Batched<Heads<T>>& view, int64_t Heads<T>::* count, int64_t Heads<T>::* stride) {
  Heads<T>& e = view.first;
  int64_t step = e.*stride, extent = e.*count, folded_stride = e.*stride;
  bool have_inner = e.*count > 1;
  for (size_t i = view.batch_shape.size(); i-- > 0;) {
    if (view.batch_shape[i] == 1) continue;
    if (have_inner && view.batch_strides[i] != step * extent) return false;
    if (!have_inner) folded_stride = view.batch_strides[i];  // a unit dim has any stride
    step = view.batch_strides[i], extent = view.batch_shape[i], have_inner = true;
  }
  e.*stride = folded_stride;
  e.*count *= view.BatchCount();
  view.batch_shape.clear();
  view.batch_strides.clear();
  return true;
}

// The batch as more tokens: a C-contiguous [batch, tokens, heads, dim] batch.
template <typename T>
bool FoldIntoTokens(Batched<Heads<T>>& view) {
  return FoldBatchInto(view, &Heads<T>::tokens, &Heads<T>::token_stride);
}

// The batch as more heads: Hugging Face's [batch, heads, seq, dim], where every element shares
// the tokens' positions.
template <typename T>
bool FoldIntoHeads(Batched<Heads<T>>& view) {
  return FoldBatchInto(view, &Heads<T>::num_heads, &Heads<T>::head_stride);
}

// Whether every batch element reads the same positions (no batch dims, or strides 0).
template <typename View>
bool SharedByTheBatch(const Batched<View>& positions) {
  for (int64_t stride : positions.batch_strides) {
    if (stride != 0) return false;
  }
  return true;
}

}  // namespace posenc
