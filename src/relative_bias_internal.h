// The bucket function behind RelativePositionBucket without its checks, for the attention kernel,
// which validates the buckets once per call.
#pragma once

#include <cstdint>

#include "posenc/relative_bias.h"

namespace posenc::internal {

// RelativePositionBucket on valid buckets and |relative_position| <= 2^32.
int64_t RelativePositionBucketUnchecked(const RelativeBuckets& buckets, int64_t relative_position);

}  // namespace posenc::internal
