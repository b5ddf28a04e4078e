// The parts of a double-precision attention reference that do not depend on how the scores were
// made: the mask rule and the softmax-weighted sum of one query row. AttentionReference and
// SelfExtendAttentionReference share them, so the two definitions cannot drift apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "posenc/attention.h"
#include "posenc/heads.h"

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

// One query row, given its scores against every key and which keys are visible: the softmax over
// the visible keys (max subtracted, so that exp never overflows) and the weighted sum of the rows
// of v's head g, in double, into out_row. A row with no visible key gets zeros, not NaN. scores
// is overwritten; sum_v is scratch of v.head_dim entries.
inline void SoftmaxWeightedRow(std::vector<double>& scores, const std::vector<char>& visible,
                               Heads<const float> v, int64_t g, std::vector<double>& sum_v,
                               float* out_row) {
  double max_score = -std::numeric_limits<double>::infinity();
  bool any_visible = false;
  for (size_t j = 0; j < scores.size(); ++j) {
    if (!visible[j]) continue;
    max_score = std::max(max_score, scores[j]);
    any_visible = true;
  }
  if (!any_visible) {
    std::fill(out_row, out_row + v.head_dim, 0.0f);
    return;
  }
  double denominator = 0.0;
  for (size_t j = 0; j < scores.size(); ++j) {
    scores[j] = visible[j] ? std::exp(scores[j] - max_score) : 0.0;
    denominator += scores[j];
  }
  std::fill(sum_v.begin(), sum_v.end(), 0.0);
  for (size_t j = 0; j < scores.size(); ++j) {
    if (!visible[j]) continue;
    const double p = scores[j] / denominator;
    const float* v_row = v.Row(static_cast<int64_t>(j), g);
    for (int64_t e = 0; e < v.head_dim; ++e) sum_v[e] += p * static_cast<double>(v_row[e]);
  }
  for (int64_t e = 0; e < v.head_dim; ++e) out_row[e] = static_cast<float>(sum_v[e]);
}

}  // namespace posenc::internal
