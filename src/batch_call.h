// Running one operation over a batch (posenc/batch.h): nothing is written unless every element's
// arguments are good, and the batch runs as one call over batch x tokens when its layout allows.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "posenc/batch.h"
#include "posenc/error.h"
#include "posenc/mrope.h"
#include "posenc/npy.h"
#include "rows.h"

namespace posenc::internal {

// One batched view as the aliasing check across a batch sees it.
struct BatchRows {
  std::string_view name;
  RowSet rows;
  bool written;
  std::vector<int64_t> byte_strides;  // batch dims, tokens, heads, head_dim: numpy's strides
};

template <typename T>
BatchRows RowsOf(const Batched<Heads<T>>& view, std::string_view default_name) {
  constexpr auto kItem = static_cast<int64_t>(sizeof(T));
  std::vector<RowSet::Dim> dims;
  std::vector<int64_t> strides;
  for (size_t i = 0; i < view.batch_shape.size(); ++i) {
    dims.push_back({view.batch_shape[i], view.batch_strides[i] * kItem});
    strides.push_back(view.batch_strides[i] * kItem);
  }
  const Heads<T>& e = view.first;
  dims.push_back({e.tokens, e.token_stride * kItem});
  dims.push_back({e.num_heads, e.head_stride * kItem});
  strides.insert(strides.end(), {e.token_stride * kItem, e.head_stride * kItem, kItem});
  return {view.name.empty() ? default_name : view.name,
          RowSet(reinterpret_cast<intptr_t>(e.data), std::move(dims), e.head_dim * kItem),
          !std::is_const_v<T>, std::move(strides)};
}

// Throws posenc::Error unless no element of a written view shares memory with another element of
// it or with any element of another view: the checks each element's call makes within itself,
// made across the batch. Every element must have passed its call's validation.
void RequireDisjointBatch(std::string_view function, std::span<const BatchRows> views);

// Throws posenc::Error unless `view` has the batch dims of `first`.
template <typename A, typename B>
void RequireSameBatch(std::string_view function, const Batched<A>& first, const Batched<B>& view,
                      std::string_view first_name, std::string_view name) {
  if (view.batch_shape == first.batch_shape) return;
  Require(false, function, std::string(name) + ".batch_shape",
          "equal " + std::string(first_name) + ".batch_shape " + NpyShapeString(first.batch_shape),
          NpyShapeString(view.batch_shape));
}

// Throws posenc::Error unless positions are shared by the batch (no batch dims) or have its dims.
template <typename P, typename V>
void RequirePositionsBatch(std::string_view function, const Batched<P>& positions,
                           const Batched<V>& first, std::string_view first_name) {
  if (positions.batch_shape.empty()) return;
  RequireSameBatch(function, first, positions, first_name, "positions");
}

// The positions of a batch folded as FoldIntoTokens folds its activations (`count` elements):
// one list for the whole batch, copied into `repeated` when one list is shared by every element.
std::optional<std::span<const int64_t>> FoldPositions(const BatchedPositions& positions,
                                                      int64_t count,
                                                      std::vector<int64_t>& repeated);
// M-RoPE's streams folded likewise, when one token stride reaches them all (nothing is copied):
// streams of their own whose batch dims step over each other as a C-contiguous batch does, or
// shared streams of one batch element or of one token (stride 0).
std::optional<PositionStreams> FoldPositions(const Batched<PositionStreams>& positions,
                                             int64_t count, std::vector<int64_t>& unused);

// A view with no tokens: what a batch without elements hands its validation, which still checks
// the shapes and finds nothing to write.
template <typename T>
Heads<T> NoTokens(Heads<T> view) {
  view.tokens = 0;
  return view;
}
inline std::span<const int64_t> NoTokens(std::span<const int64_t>) { return {}; }
inline PositionStreams NoTokens(PositionStreams streams) {
  streams.tokens = 0;
  return streams;
}

// Runs validate(b) for every batch element b, then the aliasing check across the batch, and only
// then run(b) for every element: nothing is written unless every element is good. An element
// after the first names itself in its error (element 0 fails first on what all share).
template <typename Validate, typename Run>
void RunEachElement(std::string_view function, int64_t count, const Validate& validate,
                    const Run& run, std::span<const BatchRows> views) {
  for (int64_t b = 0; b < count; ++b) {
    try {
      validate(b);
    } catch (const Error& e) {
      if (b == 0) throw;
      throw Error(std::string(e.what()) + " (in batch element " + std::to_string(b) + ")");
    }
  }
  RequireDisjointBatch(function, views);
  for (int64_t b = 0; b < count; ++b) run(b);
}

}  // namespace posenc::internal
