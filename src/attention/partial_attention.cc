#include "partial_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_kernels.h"

namespace posenc::internal {

template <typename T>
ScratchVector<T> RotatedCopy(const Rope& rope, std::span<const int64_t> positions,
                             Heads<const T> x) {
  ScratchVector<T> buffer(static_cast<size_t>(x.tokens * x.num_heads * x.head_dim));
  ApplyRope(rope, positions, x, Heads<T>::Dense(buffer.data(), x.tokens, x.num_heads, x.head_dim),
            RopeDirection::kForward);
  return buffer;
}

std::vector<float> RotatedReferenceCopy(const Rope& rope, std::span<const int64_t> positions,
                                        Heads<const float> x) {
  std::vector<float> buffer(static_cast<size_t>(x.tokens * x.num_heads * x.head_dim));
  ApplyRopeReference(rope, positions, x,
                     Heads<float>::Dense(buffer.data(), x.tokens, x.num_heads, x.head_dim),
                     RopeDirection::kForward);
  return buffer;
}

template <typename T>
void PartialAttention(const PartialMasks& masks, float scale, Heads<const T> q, Heads<const T> k,
                      Heads<const T> v, std::span<const int64_t> query_pos,
                      std::span<const int64_t> key_pos, Heads<float> out, float* lse) {
  AttentionKernelArgs args = KernelArgsFor<T>(q, k, v, query_pos, key_pos, out);
  args.causal = masks.causal;
  args.window = masks.window;
  args.chunk_size = masks.chunk_size;
  args.min_distance = masks.min_distance;
  args.chunk_lag = masks.chunk_lag;
  args.earlier_chunks = masks.earlier_chunks;
  args.scale = scale;
  args.lse = lse;
  AttentionKernel(args);
}

void MergePartialAttention(Heads<float> out, float* lse, Heads<const float> part,
                           const float* part_lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < out.tokens; ++i) {
    for (int64_t h = 0; h < out.num_heads; ++h) {
      const size_t row = static_cast<size_t>(i * out.num_heads + h);
      const double lo = lse[row], lp = part_lse[row];
      float* o = out.Row(i, h);
      const float* op = part.Row(i, h);
      if (lp == kNegInf) continue;  // the part saw no key: the running result is the answer
      if (lo == kNegInf) {          // the running result saw none (a window or chunk edge)
        std::copy(op, op + out.head_dim, o);
        lse[row] = part_lse[row];
        continue;
      }
      // NaN in either log-sum-exp makes both weights NaN, and the row NaN.
      const double m = std::isnan(lo) || std::isnan(lp) ? lo + lp : std::max(lo, lp);
      const double wo = std::exp(lo - m), wp = std::exp(lp - m);
      const double total = wo + wp;
      for (int64_t e = 0; e < out.head_dim; ++e) {
        o[e] = static_cast<float>(
            (wo * static_cast<double>(o[e]) + wp * static_cast<double>(op[e])) / total);
      }
      lse[row] = static_cast<float>(m + std::log(total));
    }
  }
}

template ScratchVector<float> RotatedCopy(const Rope&, std::span<const int64_t>,
                                          Heads<const float>);
template ScratchVector<BFloat16> RotatedCopy(const Rope&, std::span<const int64_t>,
                                             Heads<const BFloat16>);
template void PartialAttention(const PartialMasks&, float, Heads<const float>, Heads<const float>,
                               Heads<const float>, std::span<const int64_t>,
                               std::span<const int64_t>, Heads<float>, float*);
template void PartialAttention(const PartialMasks&, float, Heads<const BFloat16>,
                               Heads<const BFloat16>, Heads<const BFloat16>,
                               std::span<const int64_t>, std::span<const int64_t>, Heads<float>,
                               float*);

}  // namespace posenc::internal
