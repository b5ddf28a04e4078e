#include "distance_bias.h"

namespace posenc::study {

RelativeBuckets OneBucketPerDistance(int64_t tokens) {
  return {.num_buckets = 2 * tokens, .max_distance = tokens + 1, .bidirectional = false};
}

torch::Tensor KerpleLogTable(const torch::Tensor& r1, const torch::Tensor& r2, int64_t tokens) {
  const torch::Tensor distance = torch::arange(tokens, torch::kFloat32).unsqueeze(1);
  const torch::Tensor bias = -r1.clamp_min(kKerpleMinimum).unsqueeze(0) *
                             torch::log1p(r2.clamp_min(kKerpleMinimum).unsqueeze(0) * distance);
  return torch::cat({bias, torch::zeros_like(bias)}, 0);
}

BucketBias KerpleLogBias(const torch::Tensor& r1, const torch::Tensor& r2, int64_t tokens) {
  return {.table = KerpleLogTable(r1, r2, tokens), .buckets = OneBucketPerDistance(tokens)};
}

}  // namespace posenc::study
