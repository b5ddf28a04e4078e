#include "posenc/self_extend.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "attention_call.h"
#include "attention_kernels.h"
#include "attention_reference_row.h"
#include "partial_attention.h"
#include "posenc/error.h"
#include "posenc/positions.h"

namespace posenc {
namespace {

constexpr std::string_view kFunction = "self_extend";

double ScoreScale(const AttentionOptions& options, int64_t head_dim) {
  return internal::ResolvedScale(options.scale, head_dim);
}

// The grouped rotation positions of every query and key (SelfExtend::GroupQueryPosition and
// GroupKeyPosition). Both stay within [0, kMaxPosition]: see the header.
std::vector<int64_t> GroupPositions(const SelfExtend& se, std::span<const int64_t> pos,
                                    bool query) {
  std::vector<int64_t> grouped(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    grouped[i] = query ? se.GroupQueryPosition(pos[i]) : se.GroupKeyPosition(pos[i]);
  }
  return grouped;
}

// Whether the original positions, causal aside, leave some query a key at distance >= W that
// options.window does not hide: otherwise the group part sees nothing and is not run.
bool AnyGroupKey(const AttentionOptions& options, const SelfExtend& se,
                 std::span<const int64_t> query_pos, std::span<const int64_t> key_pos) {
  if (query_pos.empty() || key_pos.empty()) return false;
  if (options.window > 0 && options.window <= se.neighbor_window) return false;
  const int64_t max_query = *std::max_element(query_pos.begin(), query_pos.end());
  const int64_t min_key = *std::min_element(key_pos.begin(), key_pos.end());
  return max_query - min_key >= se.neighbor_window;
}

// One partial attention: q and k rotated at the given positions, the masks of options in the
// original positions plus `window` and `min_distance`, into out and, when given, lse.
template <typename T>
void PartialAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                      Heads<const T> v, std::span<const int64_t> query_pos,
                      std::span<const int64_t> key_pos, std::span<const int64_t> query_rotation,
                      std::span<const int64_t> key_rotation, int64_t window, int64_t min_distance,
                      Heads<float> out, float* lse) {
  const auto q_rotated = internal::RotatedCopy(*options.rope, query_rotation, q);
  const auto k_rotated = internal::RotatedCopy(*options.rope, key_rotation, k);
  internal::PartialMasks masks;
  masks.causal = options.causal;
  masks.window = window;
  masks.chunk_size = options.chunk_size;
  masks.min_distance = min_distance;
  internal::PartialAttention(
      masks, static_cast<float>(ScoreScale(options, q.head_dim)),
      Heads<const T>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim),
      Heads<const T>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim), v, query_pos,
      key_pos, out, lse);
}

// The fast path on validated input. The neighbour keys (d < W) and the group keys (d >= W) of a
// query are disjoint, so softmax over their union is the log-sum-exp merge of the two partial
// attentions: with L_n, L_g the parts' log-sum-exps and o_n, o_g their outputs,
//   out = (exp(L_n - M) o_n + exp(L_g - M) o_g) / (exp(L_n - M) + exp(L_g - M)),  M = max.
template <typename T>
void FusedSelfExtend(const AttentionOptions& options, const SelfExtend& se, Heads<const T> q,
                     Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                     std::span<const int64_t> key_pos, Heads<float> out) {
  const int64_t w = se.neighbor_window;
  const int64_t neighbor_window = options.window > 0 ? std::min(options.window, w) : w;
  if (!AnyGroupKey(options, se, query_pos, key_pos)) {
    PartialAttention(options, q, k, v, query_pos, key_pos, query_pos, key_pos, neighbor_window, 0,
                     out, nullptr);
    return;
  }
  const size_t rows = static_cast<size_t>(q.tokens * q.num_heads);
  std::vector<float> neighbor_lse(rows), group_lse(rows);
  std::vector<float> group_out(rows * static_cast<size_t>(v.head_dim));
  const Heads<float> group =
      Heads<float>::Dense(group_out.data(), q.tokens, q.num_heads, v.head_dim);

  PartialAttention(options, q, k, v, query_pos, key_pos, query_pos, key_pos, neighbor_window, 0,
                   out, neighbor_lse.data());
  const std::vector<int64_t> group_query = GroupPositions(se, query_pos, true);
  const std::vector<int64_t> group_key = GroupPositions(se, key_pos, false);
  PartialAttention(options, q, k, v, query_pos, key_pos, group_query, group_key, options.window, w,
                   group, group_lse.data());

  internal::MergePartialAttention(out, neighbor_lse.data(), group, group_lse.data());
}

// Self-Extend's own checks, then Attention's (shapes, positions, rope, scale, window, chunks,
// aliasing), all before anything is written.
template <typename T>
void CheckSelfExtend(const AttentionOptions& options, const SelfExtend& se, Heads<const T> q,
                     Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                     std::span<const int64_t> key_pos, Heads<float> out) {
  se.Validate();
  Require(options.rope.has_value(), kFunction, "options.rope",
          "be given (Self-Extend regroups RoPE positions)", "none");
  const std::string_view unsupported = "not be given (not supported with Self-Extend)";
  Require(!options.mrope, kFunction, "options.mrope", unsupported, "an MRope");
  Require(!options.alibi, kFunction, "options.alibi", unsupported, "an Alibi");
  Require(!options.relative_bias, kFunction, "options.relative_bias", unsupported,
          "a RelativeBias");
  Require(!options.query_scale, kFunction, "options.query_scale", unsupported,
          "a LogFloorQueryScale");
  Require(options.softcap == 0.0, kFunction, "options.softcap", unsupported, options.softcap);
  Require(options.sinks.empty(), kFunction, "options.sinks", unsupported,
          std::to_string(options.sinks.size()) + " sinks");
  internal::CheckAttention(options, q, k, v, query_pos, key_pos, out);
}

template <typename T>
void ValidatedSelfExtend(const AttentionOptions& options, const SelfExtend& se, Heads<const T> q,
                         Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                         std::span<const int64_t> key_pos, Heads<float> out) {
  CheckSelfExtend(options, se, q, k, v, query_pos, key_pos, out);
  if (q.Empty()) return;
  FusedSelfExtend(options, se, q, k, v, query_pos, key_pos, out);
}

}  // namespace

void SelfExtend::Validate() const {
  const std::string range = "be >= 1";
  const std::string most = "be <= kMaxPosition (" + std::to_string(kMaxPosition) + ")";
  Require(group_size >= 1, kFunction, "group_size", range, group_size);
  Require(group_size <= kMaxPosition, kFunction, "group_size", most, group_size);
  Require(neighbor_window >= 1, kFunction, "neighbor_window", range, neighbor_window);
  Require(neighbor_window <= kMaxPosition, kFunction, "neighbor_window", most, neighbor_window);
}

void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         Heads<const float> q, Heads<const float> k, Heads<const float> v,
                         std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                         Heads<float> out) {
  ValidatedSelfExtend(options, se, q, k, v, query_pos, key_pos, out);
}

void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         Heads<const BFloat16> q, Heads<const BFloat16> k, Heads<const BFloat16> v,
                         std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                         Heads<float> out) {
  ValidatedSelfExtend(options, se, q, k, v, query_pos, key_pos, out);
}

namespace {

template <typename T>
void BatchedSelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                                const Batched<Heads<const T>>& q, const Batched<Heads<const T>>& k,
                                const Batched<Heads<const T>>& v, const BatchedPositions& query_pos,
                                const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  internal::RunAttentionBatch(
      kFunction, q, k, v, query_pos, key_pos, out,
      [&](int64_t, auto... views) { CheckSelfExtend(options, se, views...); },
      [&](int64_t, auto... views) { ValidatedSelfExtend(options, se, views...); });
}

}  // namespace

void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         const Batched<Heads<const float>>& q, const Batched<Heads<const float>>& k,
                         const Batched<Heads<const float>>& v, const BatchedPositions& query_pos,
                         const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  BatchedSelfExtendAttention(options, se, q, k, v, query_pos, key_pos, out);
}

void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         const Batched<Heads<const BFloat16>>& q,
                         const Batched<Heads<const BFloat16>>& k,
                         const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                         const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  BatchedSelfExtendAttention(options, se, q, k, v, query_pos, key_pos, out);
}

void SelfExtendAttentionReference(const AttentionOptions& options, const SelfExtend& se,
                                  Heads<const float> q, Heads<const float> k, Heads<const float> v,
                                  std::span<const int64_t> query_pos,
                                  std::span<const int64_t> key_pos, Heads<float> out) {
  // (1) RoPE, twice: q and k at their own positions (neighbour) and at the grouped ones (group),
  // as the paper's code rotates them (datamllab/LongLM self_extend_patch/Llama.py).
  const Rope& rope = *options.rope;
  const std::vector<int64_t> group_query = GroupPositions(se, query_pos, true);
  const std::vector<int64_t> group_key = GroupPositions(se, key_pos, false);
  const std::vector<float> qn = internal::RotatedReferenceCopy(rope, query_pos, q);
  const std::vector<float> kn = internal::RotatedReferenceCopy(rope, key_pos, k);
  const std::vector<float> qg = internal::RotatedReferenceCopy(rope, group_query, q);
  const std::vector<float> kg = internal::RotatedReferenceCopy(rope, group_key, k);
  const auto dense = [](const std::vector<float>& x, const auto& like) {
    return Heads<const float>::Dense(x.data(), like.tokens, like.num_heads, like.head_dim);
  };
  const Heads<const float> q_near = dense(qn, q), k_near = dense(kn, k);
  const Heads<const float> q_group = dense(qg, q), k_group = dense(kg, k);

  const double scale = ScoreScale(options, q.head_dim);
  const int64_t heads_per_kv = q.num_heads / k.num_heads;
  const int64_t w = se.neighbor_window;
  const auto dot = [&](const float* a, const float* b) {
    double sum = 0.0;
    for (int64_t d = 0; d < q.head_dim; ++d) {
      sum += static_cast<double>(a[d]) * static_cast<double>(b[d]);
    }
    return sum;
  };

  std::vector<double> neighbor_scores(static_cast<size_t>(k.tokens));
  std::vector<double> group_scores(static_cast<size_t>(k.tokens));
  std::vector<double> scores(static_cast<size_t>(k.tokens));
  std::vector<char> visible(static_cast<size_t>(k.tokens));
  std::vector<double> sum_v(static_cast<size_t>(v.head_dim));
  for (int64_t i = 0; i < q.tokens; ++i) {
    for (int64_t h = 0; h < q.num_heads; ++h) {
      const int64_t g = h / heads_per_kv;
      for (int64_t j = 0; j < k.tokens; ++j) {
        // (2) both scores: neighbor_attn_weights and group_attn_weights of the paper's code.
        neighbor_scores[j] = scale * dot(q_near.Row(i, h), k_near.Row(j, g));
        group_scores[j] = scale * dot(q_group.Row(i, h), k_group.Row(j, g));
        // (3) torch.where(neighbor_attention_mask, neighbor, group): the neighbour mask is
        // d < W (tril minus the tril shifted by W in the code's prefill, the last W keys in its
        // decode step).
        const int64_t d = query_pos[i] - key_pos[j];
        scores[j] = d < w ? neighbor_scores[j] : group_scores[j];
        // (4) the masks of options, in the original positions.
        visible[j] = internal::VisibleByMask(options, query_pos[i], key_pos[j]);
      }
      // (5) one softmax over the visible keys, (6) the weighted sum of v.
      internal::SoftmaxWeightedRow(scores, visible, v, g, sum_v, out.Row(i, h));
    }
  }
}

}  // namespace posenc
