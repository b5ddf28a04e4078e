#include "posenc/alibi.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "posenc/error.h"
#include "posenc/positions.h"

namespace posenc {

void Alibi::Validate() const {
  Require(num_heads > 0, "alibi", "num_heads", "be positive", num_heads);
  // The smallest slope is 2^-max_bias, used in float32 by the attention kernel: past 126 it is
  // no normal float32, and past 149 it is 0, which silently turns ALiBi off.
  Require(std::isfinite(max_bias) && max_bias > 0 && max_bias <= 126, "alibi", "max_bias",
          "be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a normal float32)",
          max_bias);
  Require(head_offset >= 0 && head_offset < num_heads, "alibi", "head_offset",
          "be >= 0 and < num_heads (" + std::to_string(num_heads) + ")", head_offset);
  // Written as a difference so that huge values cannot overflow.
  Require(
      shard_heads >= 0 && shard_heads <= num_heads - head_offset, "alibi", "shard_heads",
      "be >= 0 and <= num_heads - head_offset (" + std::to_string(num_heads - head_offset) + ")",
      shard_heads);
}

std::vector<double> AlibiSlopes(const Alibi& alibi) {
  alibi.Validate();
  // n0: the largest power of two <= num_heads.
  const auto n0 = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(alibi.num_heads)));
  const double n0d = static_cast<double>(n0);
  std::vector<double> slopes(alibi.LocalHeads());
  for (int64_t s = 0; s < alibi.LocalHeads(); ++s) {
    const int64_t h = alibi.head_offset + s;
    // The exponents are exact for integer max_bias (a dyadic rational over a power of two), so
    // power-of-two slopes come out exact.
    const double exponent =
        h < n0 ? -alibi.max_bias * static_cast<double>(h + 1) / n0d
               : -alibi.max_bias * static_cast<double>(2 * (h - n0) + 1) / (2 * n0d);
    slopes[s] = std::exp2(exponent);
  }
  return slopes;
}

double AlibiBias(double slope, int64_t query_pos, int64_t key_pos) {
  Require(std::isfinite(slope), "alibi_bias", "slope", "be finite", slope);
  ValidatePosition("alibi_bias", "query_pos", query_pos);
  ValidatePosition("alibi_bias", "key_pos", key_pos);
  return -slope * static_cast<double>(query_pos - key_pos);  // |difference| <= 2^32: exact
}

}  // namespace posenc
