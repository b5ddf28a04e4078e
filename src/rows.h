// The one memory-aliasing check of posenc: whether two sets of rows (runs of head_dim elements)
// share a byte. A set is a view of any number of dims (batch dims, tokens, heads), so the same
// check serves one Heads view and a whole batch of them.
#pragma once

#include <cstdint>
#include <vector>

#include "posenc/heads.h"

namespace posenc::internal {

// The rows of a view in bytes.
struct RowSet {
  struct Dim {
    int64_t count, stride;
  };
  intptr_t base = 0;  // start of the lowest row
  intptr_t end = 0;   // one past the highest byte
  int64_t row_bytes = 0;
  std::vector<Dim> dims;  // count > 1 and stride >= 0 (negative ones flipped), largest first

  RowSet(intptr_t data, const std::vector<Dim>& all_dims, int64_t row_bytes);
  template <typename T>
  explicit RowSet(const Heads<T>& view)
      : RowSet(reinterpret_cast<intptr_t>(view.data),
               {{view.tokens, view.token_stride * Item<T>()},
                {view.num_heads, view.head_stride * Item<T>()}},
               view.head_dim * Item<T>()) {}

  int64_t Rows() const;
  // Whether each stride steps over the whole span of the dims inside it: then no two rows share
  // a byte and address order is index order (every slice or transpose of a contiguous array, and
  // every view Heads::Validate accepts). A set without rows is Nested and shares nothing.
  bool Nested() const;
  // Whether a row intersects the byte range [lo, hi); only for a Nested set.
  bool Intersects(intptr_t lo, intptr_t hi) const;

  template <typename T>
  static constexpr int64_t Item() {
    return static_cast<int64_t>(sizeof(T));
  }
};

// True when a row of a shares a byte with a row of b, where at least one of them is Nested.
// Exact, unlike a comparison of the byte ranges: q and k sliced out of one fused qkv buffer have
// interleaved ranges but disjoint rows. O(1) when the byte ranges are apart, else O(rows of one).
bool ShareRows(const RowSet& a, const RowSet& b);

// ShareRows of two validated views.
template <typename A, typename B>
bool RowsOverlap(const Heads<A>& a, const Heads<B>& b) {
  return Overlaps(a, b) && ShareRows(RowSet(a), RowSet(b));
}

}  // namespace posenc::internal
