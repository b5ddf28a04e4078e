#include "posenc/query_scale.h"

#include <cmath>
#include <cstdint>

#include "posenc/error.h"
#include "posenc/positions.h"

namespace posenc {

void LogFloorQueryScale::Validate() const {
  Require(std::isfinite(beta) && beta >= 0.0, "query_scale", "beta", "be finite and >= 0", beta);
  Require(std::isfinite(floor_scale) && floor_scale >= 1.0, "query_scale", "floor_scale",
          "be finite and >= 1", floor_scale);
  Require(offset == 0 || offset == 1, "query_scale", "offset", "be 0 or 1", offset);
}

double LogFloorQueryScale::At(int64_t position) const {
  ValidatePosition("query_scale", "position", position);
  // position + offset <= 2^32 + 1: exact in double, and so is the floor of the quotient.
  const double steps = std::floor(static_cast<double>(position + offset) / floor_scale);
  return 1.0 + beta * std::log(steps + 1.0);
}

}  // namespace posenc
