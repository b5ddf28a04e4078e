// ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long",
// arXiv:2108.12409). No position is added to the tokens; instead each head h adds
//
//   bias(i, j) = -slope[h] * (i - j)      query position i, key position j
//
// to its attention scores, so distant keys are penalised linearly, each head at its own rate.
//
// Slopes. For n heads, a power of two, head h (0-based) gets 2^(-max_bias * (h + 1) / n); with
// max_bias = 8 these are the paper's 1/2, 1/4, ..., 1/256 for 8 heads. For other n, as in the
// paper's reference code and BLOOM: take the closest power of two below, n0 = 2^floor(log2 n),
// give the first n0 heads the n0-head slopes, and the remaining n - n0 heads every other slope
// of the 2*n0-head sequence (the odd powers 2^(-max_bias * (2k + 1) / (2 * n0)), k = 0, 1, ...).
// llama.cpp generalises 8 to max_bias (MPT's alibi_bias_max); the rule is the same.
#pragma once

#include <cstdint>
#include <vector>

namespace posenc {

struct Alibi {
  int64_t num_heads = 0;    // heads in the whole model, > 0
  double max_bias = 8.0;    // > 0 and <= 126 (slopes stay normal float32); 8: the paper's
  int64_t head_offset = 0;  // first head held by this shard (tensor parallelism), < num_heads
  int64_t shard_heads = 0;  // heads held by this shard, <= num_heads - head_offset;
                            // 0 means num_heads - head_offset

  // Throws posenc::Error naming the field, value and rule.
  void Validate() const;

  // The number of heads this shard holds.
  int64_t LocalHeads() const { return shard_heads > 0 ? shard_heads : num_heads - head_offset; }

  friend bool operator==(const Alibi&, const Alibi&) = default;
};

// Slopes of heads head_offset .. head_offset + LocalHeads() - 1, in double (validates first).
// Exact powers of two whenever the exponent is an integer (e.g. all slopes of 8 heads at 8).
std::vector<double> AlibiSlopes(const Alibi& alibi);

// The additive score bias for one head: -slope * (query_pos - key_pos). Positions follow the rule
// of every API (posenc/positions.h): in [0, kMaxPosition], so that the distance is exact and
// cannot overflow; slope must be finite. Throws posenc::Error otherwise.
double AlibiBias(double slope, int64_t query_pos, int64_t key_pos);

}  // namespace posenc
