#include "long_context.h"

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "posenc/heads.h"
#include "positions_autograd.h"

namespace posenc::study {
namespace {

// Batch element b of a [batch, tokens, heads, head_dim] tensor as a posenc view, strides kept.
template <typename T>
Heads<T> BatchHeads(const torch::Tensor& x, int64_t b) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() == 4 && x.stride(3) == 1,
              "[study] expected float32 [batch, tokens, heads, head_dim] with head_dim contiguous");
  return {x.data_ptr<float>() + b * x.stride(0),
          x.size(1),
          x.size(2),
          x.size(3),
          x.stride(1),
          x.stride(2)};
}

// Reads each batch element of a window with `attend` (posenc's SelfExtendAttention or
// DualChunkAttention: the same arguments after their own settings), at positions 0 .. tokens - 1.
template <typename Attend>
torch::Tensor ReadEachBatch(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const Rope& rope, const Attend& attend) {
  const int64_t batch = q.size(0), n = q.size(1);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = t;
  AttentionOptions options;
  options.causal = true;
  options.rope = rope;
  torch::Tensor out = torch::empty({batch, n, q.size(2), v.size(3)}, torch::kFloat32);
  for (int64_t b = 0; b < batch; ++b) {
    attend(options, BatchHeads<const float>(q, b), BatchHeads<const float>(k, b),
           BatchHeads<const float>(v, b), std::span<const int64_t>(positions),
           BatchHeads<float>(out, b));
  }
  return out;
}

}  // namespace

torch::Tensor SelfExtendRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const Rope& rope, const SelfExtend& se) {
  return ReadEachBatch(
      q, k, v, rope,
      [&](const AttentionOptions& options, auto qb, auto kb, auto vb, std::span<const int64_t> pos,
          auto out) { SelfExtendAttention(options, se, qb, kb, vb, pos, pos, out); });
}

// Fused: posenc's tiled kernel once per part, merged by log-sum-exp (no window x window buffer).
torch::Tensor DualChunkRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const Rope& rope, const DualChunk& dca) {
  return ReadEachBatch(
      q, k, v, rope,
      [&](const AttentionOptions& options, auto qb, auto kb, auto vb, std::span<const int64_t> pos,
          auto out) { DualChunkAttention(options, dca, qb, kb, vb, pos, pos, out); });
}

torch::Tensor SinkRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const Rope& rope, int64_t sinks, int64_t cache, SinkPositions positions) {
  TORCH_CHECK(sinks >= 0 && cache > sinks, "[study] sinks must be in [0, cache), got ", sinks,
              " with cache ", cache);
  const int64_t n = q.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor text = torch::arange(n, torch::kInt64);
  // Window keys sit at the same distance from the query in either mode (the cache is contiguous
  // past the sinks), so q and k rotated at their text positions score them.
  const torch::Tensor k_rot = ApplyRopeAutograd(k, text, rope).permute({0, 2, 3, 1});
  torch::Tensor scores =
      torch::matmul(ApplyRopeAutograd(q, text, rope).transpose(1, 2), k_rot) * scale;
  if (positions == SinkPositions::kCache && sinks > 0 && n > cache) {
    // Once the cache is full the query sits in its last slot, cache - 1, and the sinks at their
    // own slots 0 .. sinks - 1.
    const torch::Tensor slot = text.clamp_max(cache - 1);
    const torch::Tensor sink_scores =
        torch::matmul(ApplyRopeAutograd(q, slot, rope).transpose(1, 2), k_rot.slice(3, 0, sinks)) *
        scale;
    scores = torch::cat({sink_scores, scores.slice(3, sinks)}, 3);
  }
  // Visible: earlier keys that are sinks or among the last cache - sinks tokens.
  const torch::Tensor i = text.unsqueeze(1), j = text.unsqueeze(0);
  const torch::Tensor visible = (j <= i) & ((j < sinks) | (i - j < cache - sinks));
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v.transpose(1, 2)).transpose(1, 2);
}

}  // namespace posenc::study
