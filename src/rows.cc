#include "rows.h"

#include <algorithm>
#include <utility>

namespace posenc::internal {

RowSet::RowSet(intptr_t data, const std::vector<Dim>& all_dims, int64_t row_bytes_)
    : base(data), row_bytes(row_bytes_) {
  for (Dim dim : all_dims) {
    if (dim.count == 1) continue;  // a unit dim may have any stride
    if (dim.stride < 0) {          // the same rows, walked from the other end
      base += (dim.count - 1) * dim.stride;
      dim.stride = -dim.stride;
    }
    dims.push_back(dim);
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  end = base + row_bytes;
  for (const Dim& dim : dims) end += (dim.count - 1) * dim.stride;
}

int64_t RowSet::Rows() const {
  int64_t rows = 1;
  for (const Dim& dim : dims) rows *= dim.count;
  return rows;
}

bool RowSet::Nested() const {
  if (Rows() == 0) return true;
  int64_t span = row_bytes;
  for (auto dim = dims.rbegin(); dim != dims.rend(); ++dim) {
    if (dim->stride < span) return false;
    span += (dim->count - 1) * dim->stride;
  }
  return true;
}

bool RowSet::Intersects(intptr_t lo, intptr_t hi) const {
  // The last row that starts before hi, found outermost dim first (address order is index
  // order); rows are disjoint and ordered, so it is the only candidate.
  int64_t rest = hi - 1 - base;
  if (rest < 0) return false;
  intptr_t start = base;
  for (const Dim& dim : dims) {
    const int64_t i = std::min(rest / dim.stride, dim.count - 1);
    rest -= i * dim.stride;
    start += i * dim.stride;
  }
  return start + row_bytes > lo;
}

bool ShareRows(const RowSet& a, const RowSet& b) {
  if (a.Rows() == 0 || b.Rows() == 0) return false;  // base and end mean nothing then
  if (a.base >= b.end || b.base >= a.end) return false;
  // Walk the rows of one set and look each up in the other, which must be Nested; when both are,
  // walk the smaller.
  const bool a_is_target = a.Nested() && (!b.Nested() || a.Rows() > b.Rows());
  const RowSet& walk = a_is_target ? b : a;
  const RowSet& target = a_is_target ? a : b;
  std::vector<int64_t> index(walk.dims.size(), 0);
  intptr_t row = walk.base;
  for (;;) {
    if (target.Intersects(row, row + walk.row_bytes)) return true;
    size_t d = walk.dims.size();
    for (; d > 0; --d) {  // the next row, innermost dim fastest
      const RowSet::Dim& dim = walk.dims[d - 1];
      if (++index[d - 1] < dim.count) {
        row += dim.stride;
        break;
      }
      index[d - 1] = 0;
      row -= (dim.count - 1) * dim.stride;
    }
    if (d == 0) return false;
  }
}

}  // namespace posenc::internal
