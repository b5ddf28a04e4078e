// Running a posenc call over a batch of Heads views: once over the whole batch folded into
// tokens when every view allows it, else once per batch element.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>

#include "arrays.h"
#include "posenc/npy.h"
#include "posenc/positions.h"

namespace posenc::python {

// Calls call(positions, view...) with the GIL released. All views must have the same batch
// shape. In the per-element case every position is checked first, and the first call validates
// the (identical) geometry of every element, so nothing is written when an argument is bad.
template <typename Call, typename... T>
void RunBatched(std::string_view function, BatchPositions& positions, const Call& call,
                BatchedHeads<T>... views) {
  const int64_t count = std::get<0>(std::tie(views...)).BatchCount();
  if (count == 0) return;
  auto folded = std::make_tuple(views...);
  // `&`, not `&&`: every copy is folded or the per-element originals are used.
  if (std::apply([](auto&... v) { return (v.Fold() & ...); }, folded)) {
    const std::span<const int64_t> all = positions.Folded(count);
    py::gil_scoped_release release;
    std::apply([&](auto&... v) { call(all, v.first...); }, folded);
    return;
  }
  ValidatePositions(function, positions.All(), static_cast<int64_t>(positions.All().size()));
  py::gil_scoped_release release;
  for (int64_t b = 0; b < count; ++b) call(positions.At(b), views.At(b)...);
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
