// Running a posenc call over a batch of Heads views: once over the whole batch folded into
// tokens when every view allows it, else once per batch element.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "arrays.h"
#include "posenc/npy.h"

namespace posenc::python {

// The rows (runs of head_dim elements) of a whole batched view, in bytes: the library checks
// one element at a time, so aliasing across batch elements is checked here.
struct RowSet {
  struct Dim {
    int64_t count, stride;
  };
  intptr_t base = 0;  // start of the lowest row
  intptr_t end = 0;   // one past the highest byte
  int64_t row_bytes = 0;
  std::vector<Dim> dims;  // count > 1 and stride >= 0 (negative ones flipped), largest first

  RowSet(intptr_t data, std::vector<Dim> all_dims, int64_t row_bytes);
  int64_t Rows() const;
  // Whether each stride steps over the whole span of the dims inside it: then no two rows share
  // a byte and address order is index order (every slice or transpose of a contiguous array).
  // A set without rows (a dim of count 0) is Nested and shares nothing.
  bool Nested() const;
  // Whether a row intersects the byte range [lo, hi); only for a Nested set.
  bool Intersects(intptr_t lo, intptr_t hi) const;
};

// True when a row of a shares a byte with a row of b, where at least one of them is Nested.
// Exact, so q and k sliced out of one fused qkv buffer do not overlap; O(1) when the byte ranges
// are apart, else O(rows of one view).
bool ShareRows(const RowSet& a, const RowSet& b);

template <typename T>
RowSet RowsOf(const BatchedHeads<T>& view) {
  constexpr auto kItem = static_cast<int64_t>(sizeof(T));
  std::vector<RowSet::Dim> dims;
  for (size_t i = 0; i < view.batch_shape.size(); ++i) {
    dims.push_back({view.batch_shape[i], view.batch_strides[i] * kItem});
  }
  dims.push_back({view.first.tokens, view.first.token_stride * kItem});
  dims.push_back({view.first.num_heads, view.first.head_stride * kItem});
  return RowSet(reinterpret_cast<intptr_t>(view.first.data), std::move(dims),
                view.first.head_dim * kItem);
}

// The strides of a view in bytes, as numpy shows them, for messages.
template <typename T>
std::string ByteStrides(const BatchedHeads<T>& view) {
  std::vector<int64_t> strides = view.batch_strides;
  strides.insert(strides.end(), {view.first.token_stride, view.first.head_stride, 1});
  for (int64_t& s : strides) s *= static_cast<int64_t>(sizeof(T));
  return NpyShapeString(strides);
}

// Throws posenc::Error unless no batch element of a written (non-const) view shares memory with
// another element of it or with any element of another view: the checks the library makes within
// one element, made across the whole views. Every element must have passed the library's
// validator (so its geometry is well formed).
template <typename... T>
void RequireDisjointBatch(std::string_view function, const BatchedHeads<T>&... views) {
  constexpr size_t kCount = sizeof...(T);
  const std::array<RowSet, kCount> rows{RowsOf(views)...};
  const std::array<bool, kCount> written{!std::is_const_v<T>...};
  const std::array<std::string_view, kCount> names{views.name...};
  const std::array<std::string, kCount> strides{ByteStrides(views)...};
  for (size_t j = 0; j < kCount; ++j) {
    Require(!written[j] || rows[j].Nested(), function, names[j],
            "not have batch elements that share memory", "strides " + strides[j]);
    for (size_t i = 0; i < j; ++i) {
      Require(!(written[i] || written[j]) || !ShareRows(rows[i], rows[j]), function, names[j],
              "not share memory with " + std::string(names[i]), "overlapping views");
    }
  }
}

// One batch element's view with no tokens: what a batch without elements hands the library's
// validator, which still checks its shapes (head_dim and the rest) and finds nothing to write.
template <typename T>
Heads<T> NoTokens(const BatchedHeads<T>& view) {
  Heads<T> element = view.first;
  element.tokens = 0;
  return element;
}

// Runs call(validate_only, b) for every batch element b of `views` so that nothing is written
// when any element's arguments are bad: first call(true, b) for every element, which runs the
// library's validators (the call's own checks, so a new rule there is checked here too), then the
// aliasing across elements that the library cannot see, and only then, with the GIL released,
// call(false, b), the library calls themselves.
template <typename Call, typename... T>
void RunEachElement(std::string_view function, int64_t count, const Call& call,
                    const BatchedHeads<T>&... views) {
  for (int64_t b = 0; b < count; ++b) {
    try {
      call(true, b);
    } catch (const Error& e) {
      // The library sees one element. Element 0 fails first on anything all elements share
      // (shapes, strides), so a later element's error is its own: say which.
      if (b == 0) throw;
      throw Error(std::string(e.what()) + " (in batch element " + std::to_string(b) + ")");
    }
  }
  RequireDisjointBatch(function, views...);
  py::gil_scoped_release release;
  for (int64_t b = 0; b < count; ++b) call(false, b);
}

// Runs call(validate_only, positions, views...) over a batch whose views all have the same batch
// shape: once over the whole batch folded into tokens when every view and the positions allow it
// (the library validates that one call), else once per batch element (RunEachElement). A batch
// without elements is only validated; zero tokens or heads are the library's no-op. Positions is
// BatchPositions (1-D lists) or mrope_bindings.cc's BatchStreams: NoTokens(), At(b), and
// Folded(count), empty when the positions cannot follow the fold.
template <typename Positions, typename Call, typename... T>
void RunBatched(std::string_view function, Positions& positions, const Call& call,
                BatchedHeads<T>... views) {
  const int64_t count = std::get<0>(std::tie(views...)).BatchCount();
  if (count == 0) {
    call(true, positions.NoTokens(), NoTokens(views)...);
    return;
  }
  auto folded = std::make_tuple(views...);
  // `&`, not `&&`: every copy is folded or the per-element originals are used.
  if (std::apply([](auto&... v) { return (v.Fold() & ...); }, folded)) {
    if (const auto all = positions.Folded(count)) {
      py::gil_scoped_release release;
      std::apply([&](auto&... v) { call(false, *all, v.first...); }, folded);
      return;
    }
  }
  RunEachElement(
      function, count,
      [&](bool validate_only, int64_t b) { call(validate_only, positions.At(b), views.At(b)...); },
      views...);
}

// Throws posenc::Error unless `view` has the batch shape of `first` (names for the message).
template <typename A, typename B>
void RequireSameBatch(const BatchedHeads<A>& first, const BatchedHeads<B>& view,
                      std::string_view function, std::string_view first_name,
                      std::string_view name) {
  Require(view.batch_shape == first.batch_shape, function, std::string(name) + ".shape[:-3]",
          "equal " + std::string(first_name) + "'s batch dims " + NpyShapeString(first.batch_shape),
          NpyShapeString(view.batch_shape));
}

}  // namespace posenc::python
