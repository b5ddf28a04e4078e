#include "posenc/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "attention_call.h"
#include "attention_kernels.h"
#include "attention_reference_row.h"
#include "float32_range.h"
#include "posenc/error.h"
#include "posenc/positions.h"
#include "relative_bias_internal.h"

namespace posenc {
namespace {

double ScoreScale(const AttentionOptions& options, int64_t head_dim) {
  return internal::ResolvedScale(options.scale, head_dim);
}

using internal::RotatedCopy;
using internal::Rotates;

}  // namespace

void AttentionReference(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                        Heads<const float> v, std::span<const int64_t> query_pos,
                        std::span<const int64_t> key_pos, Heads<float> out) {
  // Assumes validated input (see Attention): shapes agree, positions are >= 0, out is disjoint.

  // (1) RoPE: rotate q and k at their own positions, into dense float copies. The rest of the
  // passes read q and k through the views, whichever memory they point at.
  internal::ScratchVector<float> q_rotated, k_rotated;
  if (Rotates(options)) {
    q_rotated = RotatedCopy(options, true, query_pos, q, true);
    k_rotated = RotatedCopy(options, false, key_pos, k, true);
    q = Heads<const float>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim);
    k = Heads<const float>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  }

  const double scale = ScoreScale(options, q.head_dim);
  const std::vector<double> slopes =
      options.alibi ? AlibiSlopes(*options.alibi) : std::vector<double>();
  const int64_t group = q.num_heads / k.num_heads;  // query heads per key/value head
  constexpr double kInf = std::numeric_limits<double>::infinity();

  std::vector<double> scores(static_cast<size_t>(k.tokens));
  std::vector<char> visible(static_cast<size_t>(k.tokens));
  std::vector<double> sum_v(static_cast<size_t>(v.head_dim));

  for (int64_t i = 0; i < q.tokens; ++i) {
    for (int64_t h = 0; h < q.num_heads; ++h) {
      const int64_t g = h / group;  // the key/value head query head h reads
      internal::ReferenceScoreRow(options, q, k, query_pos, key_pos, scale, slopes, i, h, scores,
                                  visible);
      // (5) softmax over the visible keys, (6) weighted sum of v: out_i = sum_j p_ij v_j.
      // (5) with the head's sink in the denominator, when given.
      internal::SoftmaxWeightedRow(scores, visible, v, g, sum_v, out.Row(i, h),
                                   options.sinks.empty() ? -kInf : options.sinks[h]);
    }
  }
}

namespace {

// Every public Attention: the checks, then the kernel.
template <typename T>
void ValidatedAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                        Heads<const T> v, std::span<const int64_t> query_pos,
                        std::span<const int64_t> key_pos, Heads<float> out) {
  // Everything is validated before out is written.
  internal::CheckAttention(options, q, k, v, query_pos, key_pos, out);
  // No queries: nothing to write. (No keys: every query sees nothing and gets zeros.)
  if (q.Empty()) return;
  // The fused (flash-style) kernel, tested against AttentionReference.
  const internal::PreparedAttention<T> call(options, q, k, v, query_pos, key_pos, out);
  internal::AttentionKernel(call.args);
}

}  // namespace

void Attention(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
               Heads<const float> v, std::span<const int64_t> query_pos,
               std::span<const int64_t> key_pos, Heads<float> out) {
  ValidatedAttention(options, q, k, v, query_pos, key_pos, out);
}

void Attention(const AttentionOptions& options, Heads<const BFloat16> q, Heads<const BFloat16> k,
               Heads<const BFloat16> v, std::span<const int64_t> query_pos,
               std::span<const int64_t> key_pos, Heads<float> out) {
  ValidatedAttention(options, q, k, v, query_pos, key_pos, out);
}

namespace {

template <typename T>
void BatchedAttention(const AttentionOptions& options, const Batched<Heads<const T>>& q,
                      const Batched<Heads<const T>>& k, const Batched<Heads<const T>>& v,
                      const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                      const Batched<Heads<float>>& out) {
  internal::RunAttentionBatch(
      "attention", q, k, v, query_pos, key_pos, out,
      [&](int64_t, auto... views) { internal::CheckAttention(options, views...); },
      [&](int64_t, auto... views) { ValidatedAttention(options, views...); });
}

}  // namespace

void Attention(const AttentionOptions& options, const Batched<Heads<const float>>& q,
               const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
               const BatchedPositions& query_pos, const BatchedPositions& key_pos,
               const Batched<Heads<float>>& out) {
  BatchedAttention(options, q, k, v, query_pos, key_pos, out);
}

void Attention(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
               const Batched<Heads<const BFloat16>>& k, const Batched<Heads<const BFloat16>>& v,
               const BatchedPositions& query_pos, const BatchedPositions& key_pos,
               const Batched<Heads<float>>& out) {
  BatchedAttention(options, q, k, v, query_pos, key_pos, out);
}

}  // namespace posenc
