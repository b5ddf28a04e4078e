// Factors that are given in double but used in float32 (scales, attention factors, slopes) are
// checked in the precision they are used in: a double such as 1e308 or 1e-300 passes a check
// for "finite and > 0" and then becomes inf or 0 in float32, and every output with it.
#pragma once

#include <limits>
#include <string_view>

namespace posenc::internal {

// Whether x is a positive normal float32: in [2^-126, FLT_MAX]. Compared in double, so that an
// out-of-range x is never converted (undefined behaviour); NaN is false.
inline bool IsPositiveFloat32(double x) {
  return x >= static_cast<double>(std::numeric_limits<float>::min()) &&
         x <= static_cast<double>(std::numeric_limits<float>::max());
}

// What IsPositiveFloat32 checks, as error messages state it ("must be " + this).
inline constexpr std::string_view kPositiveFloat32 =
    "a positive normal float32, in [1.1754943508222875e-38, 3.4028234663852886e+38]";

}  // namespace posenc::internal
