// The parts of a double-precision attention reference that do not depend on how the scores were
// made: the mask rule and the softmax-weighted sum of one query row. AttentionReference and
// SelfExtendAttentionReference share them, so the two definitions cannot drift apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/relative_bias.h"

namespace posenc::internal {

// Whether key_pos may be seen from query_pos: with causal iff key_pos <= query_pos; with a window
// iff query_pos - key_pos < window (positions are >= 0, so no overflow); with chunks iff both lie
// in the same chunk.
inline bool VisibleByMask(const AttentionOptions& options, int64_t query_pos, int64_t key_pos) {
  const int64_t chunk = options.chunk_size;
  return (!options.causal || key_pos <= query_pos) &&
         (options.window == 0 || query_pos - key_pos < options.window) &&
         (chunk == 0 || query_pos / chunk == key_pos / chunk);
}

// The scores of query row (token i, head h) against every key, and which keys it sees, in double:
// (2) s_ij = scale c_i q_i . k_j, then soft-capping C tanh(s_ij / C), (3) the ALiBi or T5 bias,
// (4) the masks. q and k are already rotated; slopes holds ALiBi's slopes (empty without). With
// cap_grad (and soft-capping), also the derivative of each capped score by the uncapped one,
// 1 - tanh^2(s_ij / C), for the backward pass. AttentionReference and its backward twin share it.
inline void ReferenceScoreRow(const AttentionOptions& options, Heads<const float> q,
                              Heads<const float> k, std::span<const int64_t> query_pos,
                              std::span<const int64_t> key_pos, double scale,
                              const std::vector<double>& slopes, int64_t i, int64_t h,
                              std::vector<double>& scores, std::vector<char>& visible,
                              std::vector<double>* cap_grad = nullptr) {
  const int64_t g = h / (q.num_heads / k.num_heads);  // the key/value head query head h reads
  const float* q_row = q.Row(i, h);
  // The query scale multiplies the scores as it would q (after RoPE).
  const double query_scale = options.query_scale ? options.query_scale->At(query_pos[i]) : 1.0;
  for (int64_t j = 0; j < k.tokens; ++j) {
    // (2) score: s_ij = scale * c_i * q_i . k_j, in double.
    const float* k_row = k.Row(j, g);
    double dot = 0.0;
    for (int64_t d = 0; d < q.head_dim; ++d) {
      dot += static_cast<double>(q_row[d]) * static_cast<double>(k_row[d]);
    }
    double s = scale * query_scale * dot;
    // Soft-capping (Gemma 2, ggml): before the biases and the masks.
    if (options.softcap > 0.0) {
      const double t = std::tanh(s / options.softcap);
      s = options.softcap * t;
      if (cap_grad != nullptr) (*cap_grad)[static_cast<size_t>(j)] = 1.0 - t * t;
    }
    // (3) ALiBi: s_ij += -slope_h * (query_pos_i - key_pos_j); T5: s_ij +=
    // table[bucket(key_pos_j - query_pos_i)][h].
    if (options.alibi) s += AlibiBias(slopes[h], query_pos[i], key_pos[j]);
    if (options.relative_bias) {
      const RelativeBias& bias = *options.relative_bias;
      const int64_t bucket = RelativePositionBucket(bias.buckets, key_pos[j] - query_pos[i]);
      s += static_cast<double>(bias.table[static_cast<size_t>(bucket * bias.num_heads + h)]);
    }
    // (4) masks: causal, window and chunks (VisibleByMask).
    visible[j] = VisibleByMask(options, query_pos[i], key_pos[j]);
    scores[j] = s;
  }
}

// The softmax of one query row over the keys it sees, in double and in place (max subtracted, so
// that exp never overflows): scores[j] becomes p_j, 0 for hidden keys. An attention sink (-inf:
// none) joins the denominator, as a column of the scores that is dropped after the softmax
// (gpt-oss); with sink_weight, its own weight exp(sink) / denominator is written there (0
// without a sink). Returns false, all weights 0, when the row sees no key.
inline bool SoftmaxRow(std::vector<double>& scores, const std::vector<char>& visible,
                       double sink = -std::numeric_limits<double>::infinity(),
                       double* sink_weight = nullptr) {
  double max_score = sink;  // -inf without a sink
  bool any_visible = false;
  for (size_t j = 0; j < scores.size(); ++j) {
    if (!visible[j]) continue;
    max_score = std::max(max_score, scores[j]);
    any_visible = true;
  }
  const bool has_sink = sink != -std::numeric_limits<double>::infinity();
  double denominator = has_sink ? std::exp(sink - max_score) : 0.0;
  const double sink_term = denominator;
  for (size_t j = 0; j < scores.size(); ++j) {
    scores[j] = any_visible && visible[j] ? std::exp(scores[j] - max_score) : 0.0;
    denominator += scores[j];
  }
  if (sink_weight != nullptr) *sink_weight = has_sink ? sink_term / denominator : 0.0;
  if (!any_visible) return false;
  for (double& p : scores) p /= denominator;
  return true;
}

// One query row, given its scores against every key and which keys are visible: the softmax
// (SoftmaxRow, with the row's sink) and the weighted sum of the rows of v's head g, in double,
// into out_row. A row with no visible key gets zeros, not NaN. scores is overwritten; sum_v is
// scratch of v.head_dim entries.
inline void SoftmaxWeightedRow(std::vector<double>& scores, const std::vector<char>& visible,
                               Heads<const float> v, int64_t g, std::vector<double>& sum_v,
                               float* out_row,
                               double sink = -std::numeric_limits<double>::infinity()) {
  if (!SoftmaxRow(scores, visible, sink)) {
    std::fill(out_row, out_row + v.head_dim, 0.0f);
    return;
  }
  std::fill(sum_v.begin(), sum_v.end(), 0.0);
  for (size_t j = 0; j < scores.size(); ++j) {
    if (!visible[j]) continue;
    const float* v_row = v.Row(static_cast<int64_t>(j), g);
    for (int64_t e = 0; e < v.head_dim; ++e) sum_v[e] += scores[j] * static_cast<double>(v_row[e]);
  }
  for (int64_t e = 0; e < v.head_dim; ++e) out_row[e] = static_cast<float>(sum_v[e]);
}

}  // namespace posenc::internal
