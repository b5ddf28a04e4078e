#include "posenc/relative_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "posenc/error.h"
#include "posenc/positions.h"
#include "relative_bias_internal.h"

namespace posenc {
namespace {

// The buckets of one direction: bidirectional halves num_buckets (integer division, as
// Hugging Face's num_buckets //= 2).
int64_t DirectionBuckets(const RelativeBuckets& buckets) {
  return buckets.bidirectional ? buckets.num_buckets / 2 : buckets.num_buckets;
}

}  // namespace

void RelativeBuckets::Validate() const {
  Require(num_buckets > 0, "relative_buckets", "num_buckets", "be > 0", num_buckets);
  const int64_t max_exact = DirectionBuckets(*this) / 2;
  Require(max_exact >= 1, "relative_buckets", "num_buckets",
          std::string("give max_exact = num_buckets / ") + (bidirectional ? "4" : "2") + " >= 1 (" +
              (bidirectional ? "bidirectional" : "causal") + ")",
          num_buckets);
  Require(max_distance > max_exact, "relative_buckets", "max_distance",
          "be > max_exact (" + std::to_string(max_exact) + ")", max_distance);
}

namespace internal {

// Hugging Face's T5Attention._relative_position_bucket for one distance, on valid buckets. The
// logarithmic part follows its float32 tensor arithmetic step by step (this file is compiled
// without contraction into fused multiply-adds):
//   ratio = float32(n) / float32(max_exact)           tensor / int
//   x     = logf(ratio) / float32(log(max_distance / max_exact))   the log in double (math.log)
//   x     = x * float32(buckets - max_exact)           tensor * int
//   large = max_exact + trunc(x), then at most buckets - 1          .to(torch.long), torch.min
int64_t RelativePositionBucketUnchecked(const RelativeBuckets& buckets, int64_t relative_position) {
  const int64_t direction_buckets = DirectionBuckets(buckets);
  int64_t bucket = 0;
  int64_t n = 0;  // the distance, >= 0
  if (buckets.bidirectional) {
    if (relative_position > 0) bucket = direction_buckets;  // keys after the query
    n = relative_position < 0 ? -relative_position : relative_position;
  } else {
    n = relative_position < 0 ? -relative_position : 0;  // keys after the query: bucket 0
  }
  const int64_t max_exact = direction_buckets / 2;
  if (n < max_exact) return bucket + n;
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const auto log_range = static_cast<float>(
      std::log(static_cast<double>(buckets.max_distance) / static_cast<double>(max_exact)));
  const float x = std::log(ratio) / log_range * static_cast<float>(direction_buckets - max_exact);
  // x >= 0 here (ratio >= 1). Past the last bucket the truncation cannot matter, and a float
  // beyond int64 must not be converted.
  const int64_t last = direction_buckets - 1;
  if (!(x < static_cast<float>(direction_buckets - max_exact))) return bucket + last;
  return bucket + std::min(max_exact + static_cast<int64_t>(x), last);
}

}  // namespace internal

int64_t RelativePositionBucket(const RelativeBuckets& buckets, int64_t relative_position) {
  buckets.Validate();
  Require(relative_position >= -kMaxPosition && relative_position <= kMaxPosition,
          "relative_position_bucket", "relative_position",
          "be in [-2^32, 2^32] (a difference of two positions)", relative_position);
  return internal::RelativePositionBucketUnchecked(buckets, relative_position);
}

void RelativeBias::Validate() const {
  buckets.Validate();
  Require(num_heads > 0, "relative_bias", "num_heads", "be > 0", num_heads);
  // Compared by division, so that a huge num_buckets * num_heads cannot overflow.
  const bool size_ok =
      table.size() % static_cast<size_t>(num_heads) == 0 &&
      table.size() / static_cast<size_t>(num_heads) == static_cast<size_t>(buckets.num_buckets);
  Require(size_ok, "relative_bias", "table.size()",
          "equal num_buckets * num_heads (" + std::to_string(buckets.num_buckets) + " * " +
              std::to_string(num_heads) + ")",
          table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    Require(std::isfinite(table[i]), "relative_bias", "table[" + std::to_string(i) + "]",
            "be finite", table[i]);
  }
}

}  // namespace posenc
