#include "posenc/attention.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "posenc/positions.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;

// A dense [tokens, heads, dim] tensor owning its memory.
struct Tensor {
  int64_t tokens = 0, heads = 0, dim = 0;
  std::vector<float> data;

  Tensor(int64_t tokens, int64_t heads, int64_t dim, float fill = 0.0f)
      : tokens(tokens), heads(heads), dim(dim), data(tokens * heads * dim, fill) {}

  float& at(int64_t t, int64_t h, int64_t d) { return data[(t * heads + h) * dim + d]; }
  float at(int64_t t, int64_t h, int64_t d) const { return data[(t * heads + h) * dim + d]; }
  Heads<float> view() { return Heads<float>::Dense(data.data(), tokens, heads, dim); }
  Heads<const float> view() const {
    return Heads<const float>::Dense(data.data(), tokens, heads, dim);
  }
};

// Uniform in [-1, 1) with a fixed seed.
Tensor RandomTensor(int64_t tokens, int64_t heads, int64_t dim, uint32_t seed) {
  Tensor x(tokens, heads, dim);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& value : x.data) value = uniform(rng);
  return x;
}

// Runs the public Attention into a fresh dense out [q.tokens, q.heads, v.dim].
Tensor RunAttention(const AttentionOptions& options, const Tensor& q, const Tensor& k,
                    const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Tensor out(q.tokens, q.heads, v.dim, std::numeric_limits<float>::quiet_NaN());
  Attention(options, q.view(), k.view(), v.view(), query_pos, key_pos, out.view());
  return out;
}

// y[t] = x[order[t]].
Tensor SelectTokens(const Tensor& x, const std::vector<int64_t>& order) {
  Tensor y(static_cast<int64_t>(order.size()), x.heads, x.dim);
  for (size_t t = 0; t < order.size(); ++t) {
    for (int64_t h = 0; h < x.heads; ++h) {
      for (int64_t d = 0; d < x.dim; ++d) y.at(t, h, d) = x.at(order[t], h, d);
    }
  }
  return y;
}

float MaxAbsDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.data.size(), b.data.size());
  float diff = 0.0f;
  for (size_t i = 0; i < a.data.size() && i < b.data.size(); ++i) {
    diff = std::max(diff, std::abs(a.data[i] - b.data[i]));
  }
  return diff;
}

// ---------------------------------------------------------------------------------------------
// Small cases worked by hand.

TEST(Attention, TinyCaseWorkedByHand) {
  // 1 head, head_dim 2, 2 keys at positions 0 and 1, scale ln 3, causal.
  //   k0 = [1, 0], v0 = [4, 8];  k1 = [0, 1], v1 = [8, -4]
  // Query 0 (position 0, q = [0.3, -0.7]) sees only key 0: weight 1, out = v0 = [4, 8].
  // Query 1 (position 1, q = [1, 0]):
  //   s0 = ln3 * (1*1 + 0*0) = ln 3,  s1 = ln3 * (1*0 + 0*1) = 0
  //   softmax: p0 = 3 / (3 + 1) = 3/4,  p1 = 1 / (3 + 1) = 1/4
  //   out = 3/4 [4, 8] + 1/4 [8, -4] = [3 + 2, 6 - 1] = [5, 5]
  Tensor q(2, 1, 2), k(2, 1, 2), v(2, 1, 2);
  q.data = {0.3f, -0.7f, 1.0f, 0.0f};
  k.data = {1.0f, 0.0f, 0.0f, 1.0f};
  v.data = {4.0f, 8.0f, 8.0f, -4.0f};
  AttentionOptions options;
  options.causal = true;
  options.scale = std::log(3.0);
  const Tensor out = RunAttention(options, q, k, v, {0, 1}, {0, 1});
  EXPECT_FLOAT_EQ(out.at(0, 0, 0), 4.0f);
  EXPECT_FLOAT_EQ(out.at(0, 0, 1), 8.0f);
  EXPECT_FLOAT_EQ(out.at(1, 0, 0), 5.0f);
  EXPECT_FLOAT_EQ(out.at(1, 0, 1), 5.0f);
}

TEST(Attention, DefaultScaleIsOneOverSqrtHeadDim) {
  // head_dim 2, scale 0 -> 1/sqrt(2). q = [1, 1], k0 = [1, 1], k1 = [-1, -1], v one-hot:
  //   s0 = (1 + 1) / sqrt2 = sqrt2,  s1 = -sqrt2
  //   p0 = e^sqrt2 / (e^sqrt2 + e^-sqrt2) = 1 / (1 + e^(-2 sqrt2)) = 0.9441928 (by calculator)
  Tensor q(1, 1, 2), k(2, 1, 2), v(2, 1, 2);
  q.data = {1.0f, 1.0f};
  k.data = {1.0f, 1.0f, -1.0f, -1.0f};
  v.data = {1.0f, 0.0f, 0.0f, 1.0f};
  const Tensor out = RunAttention({}, q, k, v, {0}, {0, 1});
  const double p0 = 1.0 / (1.0 + std::exp(-2.0 * std::sqrt(2.0)));
  EXPECT_NEAR(p0, 0.9441928, 1e-7);
  EXPECT_NEAR(out.at(0, 0, 0), p0, 1e-6);
  EXPECT_NEAR(out.at(0, 0, 1), 1.0 - p0, 1e-6);

  // Explicit 1/sqrt(head_dim) is the same thing.
  AttentionOptions explicit_scale;
  explicit_scale.scale = 1.0 / std::sqrt(2.0);
  EXPECT_EQ(MaxAbsDiff(RunAttention(explicit_scale, q, k, v, {0}, {0, 1}), out), 0.0f);
}

TEST(Attention, RopeInsideAttentionWorkedByHand) {
  // head_dim 2, one pair turning at 1 radian per position, scale 1. q = [1, 0] at position 0;
  // k0 = k1 = [1, 0] at positions 0 and 1, so k1 is turned to [cos 1, sin 1]:
  //   s0 = 1,  s1 = cos 1 = 0.5403023
  //   p0 = e / (e + e^cos1) = 0.6129425,  p1 = 0.3870575 (by calculator); v one-hot.
  // Without RoPE the two scores are equal and the weights 1/2, 1/2.
  Tensor q(1, 1, 2), k(2, 1, 2), v(2, 1, 2);
  q.data = {1.0f, 0.0f};
  k.data = {1.0f, 0.0f, 1.0f, 0.0f};
  v.data = {1.0f, 0.0f, 0.0f, 1.0f};
  AttentionOptions options;
  options.scale = 1.0;
  const Tensor plain = RunAttention(options, q, k, v, {0}, {0, 1});
  EXPECT_FLOAT_EQ(plain.at(0, 0, 0), 0.5f);
  EXPECT_FLOAT_EQ(plain.at(0, 0, 1), 0.5f);

  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
    options.rope = Rope{2, 2, layout, {1.0}, 1.0};
    const Tensor out = RunAttention(options, q, k, v, {0}, {0, 1});
    const double p0 = std::exp(1.0) / (std::exp(1.0) + std::exp(std::cos(1.0)));
    EXPECT_NEAR(p0, 0.6129425, 1e-7);
    EXPECT_NEAR(out.at(0, 0, 0), p0, 1e-6);
    EXPECT_NEAR(out.at(0, 0, 1), 1.0 - p0, 1e-6);
  }
}

TEST(Attention, QueryWithNoVisibleKeyWritesZeros) {
  // Causal, the query at position 0 and the keys at 1 and 2: nothing is visible.
  const Tensor q = RandomTensor(1, 2, 4, 1), k = RandomTensor(2, 2, 4, 2),
               v = RandomTensor(2, 2, 3, 3);
  AttentionOptions options;
  options.causal = true;
  const Tensor out = RunAttention(options, q, k, v, {0}, {1, 2});  // out starts as NaN
  for (float value : out.data) EXPECT_EQ(value, 0.0f);
}

TEST(Attention, SoftmaxSubtractsTheMaxSoExtremeScoresStayFinite) {
  // Scores of 1000 and 0: exp(1000) overflows double, yet p = 1, e^-1000 = 1, 0.
  Tensor q(1, 1, 1), k(2, 1, 1), v(2, 1, 2);
  q.data = {1.0f};
  k.data = {1.0f, 0.0f};
  v.data = {1.0f, 0.0f, 0.0f, 1.0f};
  AttentionOptions options;
  options.scale = 1000.0;
  const Tensor big = RunAttention(options, q, k, v, {0}, {0, 1});
  EXPECT_FLOAT_EQ(big.at(0, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(big.at(0, 0, 1), 0.0f);

  // ALiBi at slope 1/2 with both keys ~10^6 positions back: biases -500000 and -499999.5, whose
  // exp underflows to 0; after subtracting the max the weights are 1 / (1 + e^0.5), e^0.5 / (..).
  k.data = {0.0f, 0.0f};
  options.scale = 0.0;
  options.causal = true;
  options.alibi = Alibi{.num_heads = 1, .max_bias = 1.0};  // one head: slope 2^-1
  const Tensor far = RunAttention(options, q, k, v, {1000000}, {0, 1});
  EXPECT_NEAR(far.at(0, 0, 0), 1.0 / (1.0 + std::exp(0.5)), 1e-6);
  EXPECT_NEAR(far.at(0, 0, 1), std::exp(0.5) / (1.0 + std::exp(0.5)), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Symmetries.

const std::vector<int64_t> kShuffle{3, 0, 4, 1, 2};

TEST(Attention, PermutationEquivariantWithoutMaskOrPositions) {
  // 5 tokens of width 8 (2 heads x 4). Shuffling the tokens of q, k and v shuffles the output
  // rows the same way: attention is a set operation until positions or a mask come in.
  const std::vector<int64_t> positions = PositionRange(0, 5);
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Tensor q = RandomTensor(5, 2, 4, 3 * seed), k = RandomTensor(5, 2, 4, 3 * seed + 1),
                 v = RandomTensor(5, 2, 4, 3 * seed + 2);
    const Tensor shuffled_out =
        RunAttention({}, SelectTokens(q, kShuffle), SelectTokens(k, kShuffle),
                     SelectTokens(v, kShuffle), positions, positions);
    const Tensor out = RunAttention({}, q, k, v, positions, positions);
    EXPECT_LT(MaxAbsDiff(shuffled_out, SelectTokens(out, kShuffle)), 1e-6f);
  }
}

TEST(Attention, NotPermutationEquivariantWithCausalMaskAlibiOrRope) {
  // Positions 0..4 stay in place while the tokens move, so each token now sits somewhere else.
  const std::vector<int64_t> positions = PositionRange(0, 5);
  AttentionOptions causal;
  causal.causal = true;
  AttentionOptions alibi;
  alibi.alibi = Alibi{.num_heads = 2};
  AttentionOptions rope;
  rope.rope = Rope::Default(4);
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Tensor q = RandomTensor(5, 2, 4, 3 * seed), k = RandomTensor(5, 2, 4, 3 * seed + 1),
                 v = RandomTensor(5, 2, 4, 3 * seed + 2);
    for (const AttentionOptions* options : {&causal, &alibi, &rope}) {
      const Tensor shuffled_out =
          RunAttention(*options, SelectTokens(q, kShuffle), SelectTokens(k, kShuffle),
                       SelectTokens(v, kShuffle), positions, positions);
      const Tensor out = RunAttention(*options, q, k, v, positions, positions);
      EXPECT_GT(MaxAbsDiff(shuffled_out, SelectTokens(out, kShuffle)), 1e-3f);
    }
  }
}

TEST(Attention, RopeScoresDependOnlyOnRelativePosition) {
  const Tensor q = RandomTensor(6, 2, 8, 11), k = RandomTensor(6, 2, 8, 12),
               v = RandomTensor(6, 2, 8, 13);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    AttentionOptions options;
    options.causal = causal;
    options.rope = Rope::Default(8);
    const Tensor out = RunAttention(options, q, k, v, PositionRange(0, 6), PositionRange(0, 6));
    for (int64_t shift : {int64_t{1000}, int64_t{1000000}}) {
      SCOPED_TRACE("shift " + std::to_string(shift));
      const Tensor shifted =
          RunAttention(options, q, k, v, PositionRange(shift, 6), PositionRange(shift, 6));
      EXPECT_LT(MaxAbsDiff(shifted, out), 1e-5f);
    }
    // Sanity: RoPE does change the result, and so does moving the keys alone.
    AttentionOptions no_rope = options;
    no_rope.rope.reset();
    EXPECT_GT(
        MaxAbsDiff(RunAttention(no_rope, q, k, v, PositionRange(0, 6), PositionRange(0, 6)), out),
        1e-3f);
    if (!causal) {
      EXPECT_GT(
          MaxAbsDiff(RunAttention(options, q, k, v, PositionRange(0, 6), PositionRange(3, 6)), out),
          1e-3f);
    }
  }
}

TEST(Attention, AlibiIsShiftInvariant) {
  const Tensor q = RandomTensor(6, 4, 8, 21), k = RandomTensor(6, 4, 8, 22),
               v = RandomTensor(6, 4, 8, 23);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    AttentionOptions options;
    options.causal = causal;
    options.alibi = Alibi{.num_heads = 4};
    const Tensor out = RunAttention(options, q, k, v, PositionRange(0, 6), PositionRange(0, 6));
    for (int64_t shift : {int64_t{1000}, int64_t{1000000}}) {
      SCOPED_TRACE("shift " + std::to_string(shift));
      const Tensor shifted =
          RunAttention(options, q, k, v, PositionRange(shift, 6), PositionRange(shift, 6));
      EXPECT_LT(MaxAbsDiff(shifted, out), 1e-5f);
    }
    AttentionOptions no_alibi = options;
    no_alibi.alibi.reset();
    EXPECT_GT(
        MaxAbsDiff(RunAttention(no_alibi, q, k, v, PositionRange(0, 6), PositionRange(0, 6)), out),
        1e-3f);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE and ALiBi inside attention.

TEST(Attention, RopeOptionEqualsRotatingQAndKFirst) {
  // Pass 1 is the standalone op: attention with rope == attention without, on q and k rotated by
  // ApplyRope at their own positions.
  const Tensor q = RandomTensor(4, 4, 16, 31), k = RandomTensor(7, 2, 16, 32),
               v = RandomTensor(7, 2, 5, 33);
  const std::vector<int64_t> query_pos{10, 11, 12, 13}, key_pos{7, 8, 9, 10, 11, 12, 13};
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
    AttentionOptions options;
    options.causal = true;
    options.rope = Rope::Default(16, 10000.0, layout, 8);  // partial rotary
    Tensor q_rotated(4, 4, 16), k_rotated(7, 2, 16);
    ApplyRope(*options.rope, query_pos, q.view(), q_rotated.view());
    ApplyRope(*options.rope, key_pos, k.view(), k_rotated.view());
    AttentionOptions no_rope = options;
    no_rope.rope.reset();
    EXPECT_LT(MaxAbsDiff(RunAttention(options, q, k, v, query_pos, key_pos),
                         RunAttention(no_rope, q_rotated, k_rotated, v, query_pos, key_pos)),
              1e-5f);
  }
}

TEST(Attention, RopeAttentionFactorScalesScoresByItsSquare) {
  // cos and sin are both multiplied by attention_factor, so q . k gains attention_factor^2:
  // factor 2 with scale 0.1 is factor 1 with scale 0.4.
  const Tensor q = RandomTensor(5, 2, 8, 41), k = RandomTensor(5, 2, 8, 42),
               v = RandomTensor(5, 2, 8, 43);
  const std::vector<int64_t> positions = PositionRange(3, 5);
  AttentionOptions doubled;
  doubled.rope = Rope::Default(8);
  doubled.rope->attention_factor = 2.0;
  doubled.scale = 0.1;
  AttentionOptions plain;
  plain.rope = Rope::Default(8);
  plain.scale = 0.4;
  EXPECT_LT(MaxAbsDiff(RunAttention(doubled, q, k, v, positions, positions),
                       RunAttention(plain, q, k, v, positions, positions)),
            1e-6f);
}

TEST(Attention, AlibiWithASingleKeyGivesWeightOne) {
  const Tensor q = RandomTensor(1, 8, 4, 51), k = RandomTensor(1, 8, 4, 52);
  Tensor v(1, 8, 3);
  for (int64_t h = 0; h < 8; ++h) {
    for (int64_t e = 0; e < 3; ++e) v.at(0, h, e) = static_cast<float>(10 * h + e) - 7.5f;
  }
  AttentionOptions options;
  options.causal = true;
  options.alibi = Alibi{.num_heads = 8};
  const Tensor out = RunAttention(options, q, k, v, {100}, {3});
  for (size_t i = 0; i < out.data.size(); ++i) EXPECT_FLOAT_EQ(out.data[i], v.data[i]);
}

TEST(Attention, AlibiWeightsDecayWithDistanceAtEachHeadsSlope) {
  // q = 0, so every score is 0 before the bias and the weights are softmax of the bias alone:
  //   p_j = exp(-slope_h * (3 - j)) / sum_j' exp(-slope_h * (3 - j'))    keys j = 0..3, query 3
  // v is one-hot (v_j = e_j, one kv head shared by all query heads), so out[h] is p.
  // Head 0 (slope 1/2), by calculator: exp(-1.5), exp(-1), exp(-0.5), 1 = 0.2231302, 0.3678794,
  // 0.6065307, 1; sum 2.1975403; p = 0.1015363, 0.1674051, 0.2760043, 0.4550542.
  const Tensor q(1, 8, 4);
  const Tensor k = RandomTensor(4, 1, 4, 61);
  Tensor v(4, 1, 4);
  for (int64_t j = 0; j < 4; ++j) v.at(j, 0, j) = 1.0f;
  AttentionOptions options;
  options.causal = true;
  options.alibi = Alibi{.num_heads = 8};
  const Tensor out = RunAttention(options, q, k, v, {3}, {0, 1, 2, 3});

  const std::array<double, 4> head0{0.1015363, 0.1674051, 0.2760043, 0.4550542};
  for (int64_t j = 0; j < 4; ++j) EXPECT_NEAR(out.at(0, 0, j), head0[j], 1e-6);

  // The paper's slopes for 8 heads: 1/2, 1/4, ..., 1/256.
  const std::array<double, 8> slopes{1.0 / 2,  1.0 / 4,  1.0 / 8,   1.0 / 16,
                                     1.0 / 32, 1.0 / 64, 1.0 / 128, 1.0 / 256};
  for (int64_t h = 0; h < 8; ++h) {
    double weights[4], sum = 0.0;
    for (int64_t j = 0; j < 4; ++j) sum += weights[j] = std::exp(-slopes[h] * (3 - j));
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_NEAR(out.at(0, h, j), weights[j] / sum, 1e-6) << "head " << h << " key " << j;
    }
  }

  // A shard holding heads 4..7 of the 8 uses their slopes 1/32 .. 1/256.
  const Tensor q_shard(1, 4, 4);
  AttentionOptions shard = options;
  shard.alibi = Alibi{.num_heads = 8, .head_offset = 4, .shard_heads = 4};
  const Tensor out_shard = RunAttention(shard, q_shard, k, v, {3}, {0, 1, 2, 3});
  for (int64_t h = 0; h < 4; ++h) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(out_shard.at(0, h, j), out.at(0, h + 4, j));
  }

  // Without the mask, a key ahead of the query gets -slope * (0 - 2) = +1 at slope 1/2:
  // p = 1 / (1 + e), e / (1 + e) for keys at 0 and 2 seen from query 0.
  options.causal = false;
  const Tensor ahead =
      RunAttention(options, q, SelectTokens(k, {0, 1}), SelectTokens(v, {0, 1}), {0}, {0, 2});
  EXPECT_NEAR(ahead.at(0, 0, 0), 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(ahead.at(0, 0, 1), std::exp(1.0) / (1.0 + std::exp(1.0)), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Grouped-query attention, KV-cache decoding, layouts.

AttentionOptions Everything(int64_t num_heads, int64_t head_dim) {
  AttentionOptions options;
  options.causal = true;
  options.rope = Rope::Default(head_dim);
  options.alibi = Alibi{.num_heads = num_heads};
  return options;
}

TEST(Attention, GroupedQueryEqualsMultiHeadWithRepeatedKeyValueHeads) {
  // 8 query heads over num_kv_heads key/value heads: query head h reads kv head h / (8 / kv).
  // Repeating each kv head 8 / kv times gives plain multi-head attention with the same result.
  const Tensor q = RandomTensor(5, 8, 4, 71);
  const std::vector<int64_t> positions = PositionRange(2, 5);
  for (int64_t num_kv_heads : {1, 2, 4, 8}) {
    SCOPED_TRACE("num_kv_heads " + std::to_string(num_kv_heads));
    const Tensor k = RandomTensor(5, num_kv_heads, 4, 72), v = RandomTensor(5, num_kv_heads, 3, 73);
    Tensor k_repeated(5, 8, 4), v_repeated(5, 8, 3);
    const int64_t group = 8 / num_kv_heads;
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t h = 0; h < 8; ++h) {
        for (int64_t d = 0; d < 4; ++d) k_repeated.at(t, h, d) = k.at(t, h / group, d);
        for (int64_t d = 0; d < 3; ++d) v_repeated.at(t, h, d) = v.at(t, h / group, d);
      }
    }
    const AttentionOptions options = Everything(8, 4);
    EXPECT_LT(MaxAbsDiff(RunAttention(options, q, k, v, positions, positions),
                         RunAttention(options, q, k_repeated, v_repeated, positions, positions)),
              1e-6f);
  }
}

TEST(Attention, DecodeStepAgainstKvCacheEqualsLastRowOfFullAttention) {
  constexpr int64_t T = 7;
  const Tensor q = RandomTensor(T, 4, 8, 81), k = RandomTensor(T, 2, 8, 82),
               v = RandomTensor(T, 2, 6, 83);
  const std::vector<int64_t> positions = PositionRange(0, T);
  const AttentionOptions options = Everything(4, 8);
  const Tensor full = RunAttention(options, q, k, v, positions, positions);

  // Decode: one query at position T - 1 against the cached keys 0 .. T - 1.
  const Tensor decode = RunAttention(options, SelectTokens(q, {T - 1}), k, v, {T - 1}, positions);
  EXPECT_LT(MaxAbsDiff(decode, SelectTokens(full, {T - 1})), 1e-6f);

  // Prefix: the first 3 tokens alone give the first 3 rows (causal: later keys are invisible).
  const std::vector<int64_t> first{0, 1, 2};
  const Tensor prefix = RunAttention(options, SelectTokens(q, first), SelectTokens(k, first),
                                     SelectTokens(v, first), first, first);
  EXPECT_LT(MaxAbsDiff(prefix, SelectTokens(full, first)), 1e-6f);

  // Chunked prefill: queries 3 .. T - 1 against every key give the remaining rows.
  const std::vector<int64_t> rest{3, 4, 5, 6};
  const Tensor chunk = RunAttention(options, SelectTokens(q, rest), k, v, rest, positions);
  EXPECT_LT(MaxAbsDiff(chunk, SelectTokens(full, rest)), 1e-6f);
}

TEST(Attention, StridedHeadsOuterViewsEqualDense) {
  // Hugging Face's [heads, tokens, dim], each row padded by 3 elements that must never be read
  // (NaN) or written (sentinel).
  constexpr int64_t T = 6, H = 4, KV = 2, D = 8, E = 5, kPad = 3;
  const Tensor q = RandomTensor(T, H, D, 91), k = RandomTensor(T, KV, D, 92),
               v = RandomTensor(T, KV, E, 93);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Strided {
    std::vector<float> buffer;
    Heads<float> view;
  };
  auto heads_outer = [&](const Tensor& x, float fill) {
    const int64_t token_stride = x.dim + kPad, head_stride = x.tokens * token_stride;
    Strided s{std::vector<float>(x.heads * head_stride, fill), {}};
    s.view = {s.buffer.data(), x.tokens, x.heads, x.dim, token_stride, head_stride};
    for (int64_t t = 0; t < x.tokens; ++t) {
      for (int64_t h = 0; h < x.heads; ++h) {
        for (int64_t d = 0; d < x.dim; ++d) s.view.Row(t, h)[d] = x.at(t, h, d);
      }
    }
    return s;
  };
  Strided sq = heads_outer(q, nan), sk = heads_outer(k, nan), sv = heads_outer(v, nan);
  Strided sout = heads_outer(Tensor(T, H, E), 7.0f);

  const std::vector<int64_t> positions = PositionRange(0, T);
  const AttentionOptions options = Everything(H, D);
  Attention(options, sq.view, sk.view, sv.view, positions, positions, sout.view);
  const Tensor dense = RunAttention(options, q, k, v, positions, positions);

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < E; ++e) EXPECT_EQ(sout.view.Row(t, h)[e], dense.at(t, h, e));
      for (int64_t e = E; e < E + kPad; ++e) EXPECT_EQ(sout.view.Row(t, h)[e], 7.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Sliding window.

// Runs AttentionReference into a fresh dense out, like RunAttention.
Tensor RunReference(const AttentionOptions& options, const Tensor& q, const Tensor& k,
                    const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Tensor out(q.tokens, q.heads, v.dim, std::numeric_limits<float>::quiet_NaN());
  AttentionReference(options, q.view(), k.view(), v.view(), query_pos, key_pos, out.view());
  return out;
}

TEST(Attention, SlidingWindowWorkedByHand) {
  // 1 head, head_dim 1, 4 tokens at positions 0..3, scale ln 3, q = 1 everywhere,
  // k = [0, 1, 0, 1] (scores 0, ln 3, 0, ln 3, so weights go 1 : 3 : 1 : 3), v = [4, 8, 16, 32].
  // Causal, window 2: each query sees itself and the key before it.
  //   query 0: key 0 only                  out = 4
  //   query 1: keys 0, 1, weights 1/4, 3/4  out = 1 + 6 = 7
  //   query 2: keys 1, 2, weights 3/4, 1/4  out = 6 + 4 = 10
  //   query 3: keys 2, 3, weights 1/4, 3/4  out = 4 + 24 = 28
  // (without the window, query 3 would see all four: (4 + 24 + 16 + 96) / 8 = 17.5).
  // Without causal, window 2 still hides keys 2 or more behind, but keys ahead stay visible:
  //   query 0: all four keys                out = 17.5
  //   query 3: keys 2, 3                    out = 28
  Tensor q(4, 1, 1, 1.0f), k(4, 1, 1), v(4, 1, 1);
  k.data = {0.0f, 1.0f, 0.0f, 1.0f};
  v.data = {4.0f, 8.0f, 16.0f, 32.0f};
  const std::vector<int64_t> positions = PositionRange(0, 4);
  AttentionOptions options;
  options.causal = true;
  options.scale = std::log(3.0);
  options.window = 2;
  for (const auto& run : {RunAttention, RunReference}) {
    const Tensor causal = run(options, q, k, v, positions, positions);
    EXPECT_FLOAT_EQ(causal.at(0, 0, 0), 4.0f);
    EXPECT_FLOAT_EQ(causal.at(1, 0, 0), 7.0f);
    EXPECT_FLOAT_EQ(causal.at(2, 0, 0), 10.0f);
    EXPECT_FLOAT_EQ(causal.at(3, 0, 0), 28.0f);

    AttentionOptions full = options;
    full.causal = false;
    const Tensor windowed = run(full, q, k, v, positions, positions);
    EXPECT_FLOAT_EQ(windowed.at(0, 0, 0), 17.5f);
    EXPECT_FLOAT_EQ(windowed.at(3, 0, 0), 28.0f);
  }
}

TEST(Attention, WindowCoveringEveryKeyEqualsNoWindow) {
  // Positions 0..6: no query is 7 or more ahead of a key, so windows >= 7 hide nothing.
  const Tensor q = RandomTensor(7, 4, 8, 1), k = RandomTensor(7, 2, 8, 2),
               v = RandomTensor(7, 2, 5, 3);
  const std::vector<int64_t> positions = PositionRange(0, 7);
  for (const bool causal : {false, true}) {
    AttentionOptions plain = Everything(4, 8);
    plain.causal = causal;
    const Tensor want_kernel = RunAttention(plain, q, k, v, positions, positions);
    const Tensor want_reference = RunReference(plain, q, k, v, positions, positions);
    for (const int64_t window : {7, 8, 1000000}) {
      AttentionOptions windowed = plain;
      windowed.window = window;
      EXPECT_EQ(MaxAbsDiff(RunAttention(windowed, q, k, v, positions, positions), want_kernel),
                0.0f);
      EXPECT_EQ(MaxAbsDiff(RunReference(windowed, q, k, v, positions, positions), want_reference),
                0.0f);
    }
  }
}

TEST(Attention, WindowOfOneWithCausalReturnsTheOwnValue) {
  // Each query sees only the key at its own position: weight 1, out[i, h] = v[i, g].
  const Tensor q = RandomTensor(9, 4, 8, 1), k = RandomTensor(9, 2, 8, 2),
               v = RandomTensor(9, 2, 5, 3);
  AttentionOptions options = Everything(4, 8);
  options.window = 1;
  const std::vector<int64_t> positions = PositionRange(3, 9);
  for (const auto& run : {RunAttention, RunReference}) {
    const Tensor out = run(options, q, k, v, positions, positions);
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t e = 0; e < 5; ++e) EXPECT_FLOAT_EQ(out.at(i, h, e), v.at(i, h / 2, e));
      }
    }
  }
}

TEST(Attention, PublicEntryMatchesReference) {
  // Attention may dispatch to a fused kernel; it must agree with the reference.
  const Tensor q = RandomTensor(9, 8, 16, 101), k = RandomTensor(9, 2, 16, 102),
               v = RandomTensor(9, 2, 16, 103);
  const std::vector<int64_t> positions = PackedPositions(std::vector<int64_t>{0, 4, 9});
  for (bool causal : {false, true}) {
    AttentionOptions options = Everything(8, 16);
    options.causal = causal;
    Tensor reference(9, 8, 16);
    AttentionReference(options, q.view(), k.view(), v.view(), positions, positions,
                       reference.view());
    EXPECT_LT(MaxAbsDiff(RunAttention(options, q, k, v, positions, positions), reference), 1e-5f);
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: a clear posenc::Error, and out untouched.

// ---------------------------------------------------------------------------------------------
// Chunked attention, query scales and T5's relative bias, worked by hand.

TEST(Attention, ChunkOfOneEachQuerySeesOnlyItself) {
  // Chunks of 1: a key is visible only at the query's own position, weight 1, out = v of the
  // token (without causal; the chunk alone hides the rest). 2 tokens, and 9 with GQA.
  for (const int64_t tokens : {2, 9}) {
    const Tensor q = RandomTensor(tokens, 4, 8, 1), k = RandomTensor(tokens, 2, 8, 2),
                 v = RandomTensor(tokens, 2, 5, 3);
    AttentionOptions options;
    options.chunk_size = 1;
    const std::vector<int64_t> positions = PositionRange(5, tokens);
    for (const auto& run : {RunAttention, RunReference}) {
      const Tensor out = run(options, q, k, v, positions, positions);
      for (int64_t i = 0; i < tokens; ++i) {
        for (int64_t h = 0; h < 4; ++h) {
          for (int64_t e = 0; e < 5; ++e) EXPECT_FLOAT_EQ(out.at(i, h, e), v.at(i, h / 2, e));
        }
      }
    }
  }
}

TEST(Attention, ChunkedWorkedByHand) {
  // 1 head, head_dim 1, positions 0..3, scale ln 3, q = 1, k = [0, 1, 0, 1] (weights 1 : 3 : 1
  // : 3), v = [4, 8, 16, 32], chunks of 2: queries 0, 1 see keys 0, 1; queries 2, 3 keys 2, 3.
  //   full:   queries 0, 1: (4 + 24) / 4 = 7;  queries 2, 3: (16 + 96) / 4 = 28
  //   causal: query 0: 4; query 1: 7; query 2: 16 (itself only); query 3: 28
  // Chunks of 3 with causal and window 2: query 3 starts chunk 1 and sees only itself: 32;
  // query 2 sees keys 1, 2 (window): (3 * 8 + 16) / 4 = 10.
  Tensor q(4, 1, 1, 1.0f), k(4, 1, 1), v(4, 1, 1);
  k.data = {0.0f, 1.0f, 0.0f, 1.0f};
  v.data = {4.0f, 8.0f, 16.0f, 32.0f};
  const std::vector<int64_t> positions = PositionRange(0, 4);
  AttentionOptions options;
  options.scale = std::log(3.0);
  options.chunk_size = 2;
  for (const auto& run : {RunAttention, RunReference}) {
    const Tensor full = run(options, q, k, v, positions, positions);
    EXPECT_FLOAT_EQ(full.at(0, 0, 0), 7.0f);
    EXPECT_FLOAT_EQ(full.at(1, 0, 0), 7.0f);
    EXPECT_FLOAT_EQ(full.at(2, 0, 0), 28.0f);
    EXPECT_FLOAT_EQ(full.at(3, 0, 0), 28.0f);
    AttentionOptions causal = options;
    causal.causal = true;
    const Tensor masked = run(causal, q, k, v, positions, positions);
    EXPECT_FLOAT_EQ(masked.at(0, 0, 0), 4.0f);
    EXPECT_FLOAT_EQ(masked.at(1, 0, 0), 7.0f);
    EXPECT_FLOAT_EQ(masked.at(2, 0, 0), 16.0f);
    EXPECT_FLOAT_EQ(masked.at(3, 0, 0), 28.0f);
    AttentionOptions windowed = causal;
    windowed.chunk_size = 3;
    windowed.window = 2;
    const Tensor all = run(windowed, q, k, v, positions, positions);
    EXPECT_FLOAT_EQ(all.at(2, 0, 0), 10.0f);
    EXPECT_FLOAT_EQ(all.at(3, 0, 0), 32.0f);
  }
}

TEST(Attention, ChunkLargerThanEveryPositionEqualsNoChunk) {
  const Tensor q = RandomTensor(7, 4, 8, 1), k = RandomTensor(7, 2, 8, 2),
               v = RandomTensor(7, 2, 5, 3);
  const std::vector<int64_t> positions = PositionRange(0, 7);
  AttentionOptions plain = Everything(4, 8);
  AttentionOptions chunked = plain;
  chunked.chunk_size = 7;  // positions 0..6: one chunk
  EXPECT_EQ(MaxAbsDiff(RunAttention(chunked, q, k, v, positions, positions),
                       RunAttention(plain, q, k, v, positions, positions)),
            0.0f);
  EXPECT_EQ(MaxAbsDiff(RunReference(chunked, q, k, v, positions, positions),
                       RunReference(plain, q, k, v, positions, positions)),
            0.0f);
}

TEST(Attention, QueryScaleWorkedByHand) {
  // beta = 1 / ln 2, floor_scale 1, offset 0: scale(0) = 1 + ln(1) / ln 2 = 1,
  // scale(1) = 1 + ln(2) / ln 2 = 2. 1 head, head_dim 1, scale ln 3, q = 1, keys k = [1, 0] at
  // positions 0 and 1, v = [10, 0], no mask:
  //   query at position 0: scores ln 3, 0: weights 3 : 1, out = 30 / 4 = 7.5
  //   query at position 1: scores 2 ln 3, 0: weights 9 : 1, out = 90 / 10 = 9
  Tensor q(2, 1, 1, 1.0f), k(2, 1, 1), v(2, 1, 1);
  k.data = {1.0f, 0.0f};
  v.data = {10.0f, 0.0f};
  AttentionOptions options;
  options.scale = std::log(3.0);
  options.query_scale = LogFloorQueryScale{.beta = 1.0 / std::log(2.0), .floor_scale = 1.0};
  for (const auto& run : {RunAttention, RunReference}) {
    const Tensor out = run(options, q, k, v, {0, 1}, {0, 1});
    EXPECT_FLOAT_EQ(out.at(0, 0, 0), 7.5f);
    EXPECT_FLOAT_EQ(out.at(1, 0, 0), 9.0f);
  }
}

TEST(Attention, QueryScaleWithBetaZeroEqualsNoScale) {
  const Tensor q = RandomTensor(9, 4, 8, 1), k = RandomTensor(9, 2, 8, 2),
               v = RandomTensor(9, 2, 5, 3);
  const std::vector<int64_t> positions = PositionRange(100000, 9);
  const AttentionOptions plain = Everything(4, 8);
  AttentionOptions scaled = plain;
  scaled.query_scale = LogFloorQueryScale{.beta = 0.0, .floor_scale = 8192.0, .offset = 1};
  EXPECT_EQ(MaxAbsDiff(RunAttention(scaled, q, k, v, positions, positions),
                       RunAttention(plain, q, k, v, positions, positions)),
            0.0f);
  EXPECT_EQ(MaxAbsDiff(RunReference(scaled, q, k, v, positions, positions),
                       RunReference(plain, q, k, v, positions, positions)),
            0.0f);
}

TEST(Attention, RelativeBiasWithOneNonzeroBucketWorkedByHand) {
  // q = 0: every score is 0 before the bias. Query at position 1, keys at 0, 1, 2 (distances
  // -1, 0, +1), scale 1, v = [4, 8, 16].
  // Encoder (32 buckets, bidirectional): -1 -> bucket 1, 0 -> 0, +1 -> 16 + 1 = 17.
  //   head 0: table[17][0] = ln 2 doubles key 2: weights 1 : 1 : 2, out = 1 + 2 + 8 = 11
  //   head 1: no bias: out = 28 / 3
  // Decoder (causal buckets, causal mask): -1 -> bucket 1, table[1][0] = ln 3: keys 0, 1 with
  //   weights 3 : 1, out = 3 + 2 = 5; head 1: (4 + 8) / 2 = 6.
  Tensor q(1, 2, 1, 0.0f), k(3, 1, 1, 0.0f), v(3, 1, 1);
  v.data = {4.0f, 8.0f, 16.0f};
  std::vector<float> table(32 * 2, 0.0f);
  table[17 * 2 + 0] = std::log(2.0f);
  AttentionOptions options;
  options.scale = 1.0;
  options.relative_bias = RelativeBias{.buckets = {}, .num_heads = 2, .table = table};
  std::vector<float> decoder_table(32 * 2, 0.0f);
  decoder_table[1 * 2 + 0] = std::log(3.0f);
  AttentionOptions decoder = options;
  decoder.causal = true;
  decoder.relative_bias =
      RelativeBias{.buckets = {.bidirectional = false}, .num_heads = 2, .table = decoder_table};
  for (const auto& run : {RunAttention, RunReference}) {
    const Tensor out = run(options, q, k, v, {1}, {0, 1, 2});
    EXPECT_FLOAT_EQ(out.at(0, 0, 0), 11.0f);
    EXPECT_FLOAT_EQ(out.at(0, 1, 0), 28.0f / 3.0f);
    const Tensor causal = run(decoder, q, k, v, {1}, {0, 1, 2});
    EXPECT_FLOAT_EQ(causal.at(0, 0, 0), 5.0f);
    EXPECT_FLOAT_EQ(causal.at(0, 1, 0), 6.0f);
  }
}

TEST(Attention, RelativeBiasDependsOnlyOnDistance) {
  // Shifting every position leaves every distance, and so the output, unchanged.
  const Tensor q = RandomTensor(20, 4, 8, 1), k = RandomTensor(20, 4, 8, 2),
               v = RandomTensor(20, 4, 5, 3);
  std::vector<float> table(32 * 4);
  for (size_t i = 0; i < table.size(); ++i) table[i] = std::sin(static_cast<float>(i));
  AttentionOptions options;
  options.scale = 1.0;
  options.relative_bias = RelativeBias{.buckets = {}, .num_heads = 4, .table = table};
  const Tensor at_zero = RunAttention(options, q, k, v, PositionRange(0, 20), PositionRange(0, 20));
  const std::vector<int64_t> far = PositionRange(4000000000, 20);
  EXPECT_LT(MaxAbsDiff(RunAttention(options, q, k, v, far, far), at_zero), 1e-6f);
}

// A valid call: q [4, 8, 8], k [5, 2, 8], v [5, 2, 6], out [4, 8, 6]; each test breaks one thing.
struct Call {
  AttentionOptions options;
  Tensor q = RandomTensor(4, 8, 8, 1), k = RandomTensor(5, 2, 8, 2), v = RandomTensor(5, 2, 6, 3);
  std::vector<int64_t> query_pos = PositionRange(1, 4), key_pos = PositionRange(0, 5);
  Tensor out = Tensor(4, 8, 6, 7.0f);
  Heads<const float> q_view = q.view(), k_view = k.view(), v_view = v.view();
  Heads<float> out_view = out.view();

  Call() {
    options.causal = true;
    options.rope = Rope::Default(8);
    options.alibi = Alibi{.num_heads = 8};
  }

  // The message of the posenc::Error thrown by Attention (or, when batched, by its batched form
  // on a batch of one), or "no error".
  std::string Error(bool batched = false) {
    try {
      if (batched) {
        Attention(options, Batched<Heads<const float>>(q_view), k_view, v_view,
                  BatchedPositions(query_pos), BatchedPositions(key_pos), out_view);
      } else {
        Attention(options, q_view, k_view, v_view, query_pos, key_pos, out_view);
      }
    } catch (const posenc::Error& e) {
      return e.what();
    }
    return "no error";
  }

  bool OutUntouched() const {
    for (float value : out.data) {
      if (value != 7.0f) return false;
    }
    return true;
  }
};

TEST(AttentionErrors, TheValidCallWorks) {
  Call call;
  EXPECT_EQ(call.Error(), "no error");
  EXPECT_FALSE(call.OutUntouched());
}

// Runs `call` expecting exactly `message` and no write to out.
void ExpectError(Call& call, const std::string& message) {
  EXPECT_EQ(call.Error(), message);
  EXPECT_TRUE(call.OutUntouched());
}

TEST(AttentionErrors, GroupedQueryMismatch) {
  Call call;
  call.k = RandomTensor(5, 3, 8, 2);
  call.v = RandomTensor(5, 3, 6, 3);
  call.k_view = call.k.view();
  call.v_view = call.v.view();
  ExpectError(call, "[attention] num_heads must be a multiple of num_kv_heads (3), got 8");
}

TEST(AttentionErrors, ShapeMismatches) {
  {
    Call call;
    call.k_view.head_dim = 4;
    ExpectError(call, "[attention] k.head_dim must equal q.head_dim (8), got 4");
  }
  {
    Call call;
    call.v_view.tokens = 4;
    ExpectError(call, "[attention] v.tokens must equal k.tokens (5), got 4");
  }
  {
    Call call;
    call.v = RandomTensor(5, 1, 6, 3);
    call.v_view = call.v.view();
    ExpectError(call, "[attention] v.num_heads must equal k.num_heads (2), got 1");
  }
  {
    Call call;
    call.out_view.tokens = 3;
    ExpectError(call, "[attention] out.tokens must equal q.tokens (4), got 3");
  }
  {
    Call call;
    call.out_view = Heads<float>::Dense(call.out.data.data(), 4, 4, 6);
    ExpectError(call, "[attention] out.num_heads must equal q.num_heads (8), got 4");
  }
  {
    Call call;
    call.out_view = Heads<float>::Dense(call.out.data.data(), 4, 6, 8);
    ExpectError(call, "[attention] out.num_heads must equal q.num_heads (8), got 6");
    call.out_view = Heads<float>::Dense(call.out.data.data(), 3, 8, 8);
    ExpectError(call, "[attention] out.tokens must equal q.tokens (4), got 3");
    call.out_view = Heads<float>::Dense(call.out.data.data(), 4, 8, 5);
    ExpectError(call, "[attention] out.head_dim must equal v.head_dim (6), got 5");
  }
}

TEST(AttentionErrors, MalformedViews) {
  {
    Call call;
    call.q_view.tokens = -1;
    ExpectError(call, "[attention] q.tokens must be >= 0, got -1");
  }
  {
    Call call;
    call.k_view.data = nullptr;
    ExpectError(call, "[attention] k.data must be non-null, got nullptr");
  }
  {
    Call call;
    call.out_view.head_stride = 3;  // rows of 6 would overlap
    ExpectError(call,
                "[attention] out.head_stride must be >= head_dim (6) so that rows do not overlap, "
                "got 3");
  }
}

TEST(AttentionErrors, Positions) {
  {
    Call call;
    call.query_pos = {0, 1, 2};
    ExpectError(call, "[attention] query_pos.size() must equal the number of tokens (4), got 3");
  }
  {
    Call call;
    call.key_pos = {0, 1, 2, 3, 4, 5};
    ExpectError(call, "[attention] key_pos.size() must equal the number of tokens (5), got 6");
  }
  {
    Call call;
    call.key_pos = {0, -2, 2, 3, 4};
    ExpectError(call, "[attention] key_pos[1] must be >= 0, got -2");
  }
  {
    Call call;
    call.query_pos = {1, 2, 3, -1};
    ExpectError(call, "[attention] query_pos[3] must be >= 0, got -1");
  }
  {
    // Positions are checked even when nothing uses them.
    Call call;
    call.options = {};
    call.query_pos = {};
    ExpectError(call, "[attention] query_pos.size() must equal the number of tokens (4), got 0");
  }
}

TEST(AttentionErrors, RopeAndAlibi) {
  {
    Call call;
    call.options.rope = Rope::Default(16);
    ExpectError(call, "[attention] rope.head_dim must equal q.head_dim (8), got 16");
  }
  {
    Call call;
    call.options.rope->rotary_dim = 3;  // odd: Rope::Validate rejects it
    EXPECT_NE(call.Error(), "no error");
    EXPECT_TRUE(call.OutUntouched());
  }
  {
    Call call;
    call.options.alibi = Alibi{.num_heads = 4};
    ExpectError(call, "[attention] alibi.LocalHeads() must equal q.num_heads (8), got 4");
  }
  {
    Call call;
    call.options.alibi = Alibi{.num_heads = 16, .head_offset = 4, .shard_heads = 4};
    ExpectError(call, "[attention] alibi.LocalHeads() must equal q.num_heads (8), got 4");
  }
  {
    Call call;
    call.options.alibi = Alibi{.num_heads = 16, .head_offset = 8};  // heads 8..15: fine
    EXPECT_EQ(call.Error(), "no error");
  }
  {
    Call call;
    call.options.alibi->max_bias = -1.0;  // Alibi::Validate rejects it
    EXPECT_NE(call.Error(), "no error");
    EXPECT_TRUE(call.OutUntouched());
  }
}

TEST(AttentionErrors, Scale) {
  {
    Call call;
    call.options.scale = -1.0;
    ExpectError(call,
                "[attention] scale must be 0 (meaning 1 / sqrt(head_dim)) or a positive normal "
                "float32, in [1.1754943508222875e-38, 3.4028234663852886e+38], got -1");
  }
  {  // finite in double, inf in float32, where the kernel scores
    Call call;
    call.options.scale = 1e300;
    ExpectError(call,
                "[attention] scale must be 0 (meaning 1 / sqrt(head_dim)) or a positive normal "
                "float32, in [1.1754943508222875e-38, 3.4028234663852886e+38], got "
                "1.0000000000000001e+300");
    EXPECT_TRUE(call.OutUntouched());
  }
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), 1e-300}) {
    Call call;
    call.options.scale = bad;
    EXPECT_NE(call.Error(), "no error");
    EXPECT_TRUE(call.OutUntouched());
  }
}

TEST(AttentionErrors, Window) {
  Call call;
  call.options.window = -3;
  ExpectError(call, "[attention] window must be >= 0 (0 means no window), got -3");
}

TEST(AttentionErrors, ChunkQueryScaleAndRelativeBias) {
  {
    Call call;
    call.options.chunk_size = -1;
    ExpectError(call, "[attention] chunk_size must be >= 0 (0 means no chunks), got -1");
  }
  {
    Call call;
    call.options.query_scale = LogFloorQueryScale{.beta = 0.1, .floor_scale = 0.5};
    ExpectError(call, "[query_scale] floor_scale must be finite and >= 1, got 0.5");
  }
  {
    // 1 / sqrt(8) * (1 + 1e300 ln 5) at the last query (position 4): past float32.
    Call call;
    call.options.query_scale = LogFloorQueryScale{.beta = 1e300, .floor_scale = 1.0};
    const std::string message = call.Error();
    EXPECT_EQ(message.rfind("[attention] scale * query_scale.At(query_pos) must be a positive "
                            "normal float32",
                            0),
              0u)
        << message;
    EXPECT_TRUE(call.OutUntouched());
  }
  std::vector<float> table(32 * 8, 0.0f);
  {
    Call call;  // with ALiBi
    call.options.relative_bias = RelativeBias{.buckets = {}, .num_heads = 8, .table = table};
    ExpectError(call,
                "[attention] relative_bias must not be given with alibi (each is a position "
                "bias), got both");
  }
  {
    Call call;
    call.options.alibi.reset();
    call.options.relative_bias =
        RelativeBias{.buckets = {}, .num_heads = 8, .table = std::span(table).first(255)};
    ExpectError(call,
                "[relative_bias] table.size() must equal num_buckets * num_heads (32 * 8), got "
                "255");
  }
  {
    Call call;
    call.options.alibi.reset();
    call.options.relative_bias =
        RelativeBias{.buckets = {}, .num_heads = 4, .table = std::span(table).first(128)};
    ExpectError(call, "[attention] relative_bias.num_heads must equal q.num_heads (8), got 4");
  }
  {
    Call call;
    call.options.alibi.reset();
    call.options.relative_bias =
        RelativeBias{.buckets = {.num_buckets = 2}, .num_heads = 8, .table = table};
    ExpectError(call,
                "[relative_buckets] num_buckets must give max_exact = num_buckets / 4 >= 1 "
                "(bidirectional), got 2");
  }
  {
    Call call;  // every new option valid: it runs
    call.options.alibi.reset();
    call.options.chunk_size = 2;
    call.options.query_scale = LogFloorQueryScale{.beta = 0.1, .floor_scale = 2.0, .offset = 1};
    call.options.relative_bias = RelativeBias{.buckets = {}, .num_heads = 8, .table = table};
    EXPECT_EQ(call.Error(), "no error");
    EXPECT_EQ(call.Error(/*validate_only=*/true), "no error");
  }
}

TEST(AttentionErrors, OutMustNotOverlapInputs) {
  {
    // out written over q's memory (attention is not in place).
    Call call;
    call.q = RandomTensor(4, 8, 8, 1);
    Tensor shared(4, 8, 8, 7.0f);
    call.q_view = shared.view();
    call.out_view = Heads<float>::Dense(shared.data.data() + 10, 4, 8, 6);
    EXPECT_EQ(call.Error(),
              "[attention] out must not share memory with q, k or v, got a view overlapping q");
    for (float value : shared.data) EXPECT_EQ(value, 7.0f);
  }
  {
    Call call;
    call.k_view = Heads<const float>::Dense(call.out.data.data(), 5, 2, 8);
    ExpectError(call,
                "[attention] out must not share memory with q, k or v, got a view overlapping k");
  }
  {
    Call call;
    call.v_view = Heads<const float>::Dense(call.out.data.data() + 100, 5, 2, 6);
    ExpectError(call,
                "[attention] out must not share memory with q, k or v, got a view overlapping v");
  }
}

TEST(AttentionErrors, OutMayShareAFusedBufferWithoutSharingARow) {
  // One [tokens, 3, heads, dim] buffer: q and k in slots 0 and 1, out written into slot 2. The
  // three byte ranges interleave token by token, but no row is shared, so the call is fine.
  const int64_t tokens = 4, heads = 2, dim = 8;
  Tensor fused = RandomTensor(tokens, 3 * heads, dim, 5);
  const auto slot = [&](int64_t s) {
    return Heads<float>{
        fused.data.data() + s * heads * dim, tokens, heads, dim, 3 * heads * dim, dim};
  };
  ASSERT_TRUE(Overlaps(slot(2), slot(0)));  // the byte ranges meet: a hull test would refuse
  Tensor q(tokens, heads, dim), k(tokens, heads, dim);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        q.at(t, h, d) = slot(0).Row(t, h)[d];
        k.at(t, h, d) = slot(1).Row(t, h)[d];
      }
    }
  }
  const Tensor v = RandomTensor(tokens, heads, dim, 6);
  const std::vector<int64_t> pos = PositionRange(0, tokens);
  AttentionOptions options;
  options.causal = true;
  const Tensor expect = RunAttention(options, q, k, v, pos, pos);
  Attention(options, slot(0), slot(1), v.view(), pos, pos, slot(2));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(slot(2).Row(t, h)[d], expect.at(t, h, d));
    }
  }

  // Real overlaps are still refused: out over k's slot, or half a row into it.
  const std::vector<float> before = fused.data;
  Heads<float> half_into_k = slot(1);
  half_into_k.data += dim / 2;
  for (const Heads<float>& out : {slot(1), half_into_k}) {
    ExpectError([&] { Attention(options, slot(0), slot(1), v.view(), pos, pos, out); },
                "[attention] out must not share memory with q, k or v, got a view overlapping k");
  }
  EXPECT_EQ(fused.data, before);
}

TEST(AttentionValidate, BatchedFormThrowsWhatAttentionThrowsAndWritesNothing) {
  // Each case breaks one thing in a valid call (or nothing): the batched form gives Attention's
  // exact message and leaves out alone.
  const std::vector<std::pair<std::function<void(Call&)>, std::string>> cases = {
      {[](Call& c) { c.k_view.head_dim = 4; },
       "[attention] k.head_dim must equal q.head_dim (8), got 4"},
      {[](Call& c) { c.key_pos[1] = -2; }, "[attention] key_pos[1] must be >= 0, got -2"},
      {[](Call& c) { c.options.window = -3; },
       "[attention] window must be >= 0 (0 means no window), got -3"},
      {[](Call& c) { c.options.chunk_size = -2; },
       "[attention] chunk_size must be >= 0 (0 means no chunks), got -2"},
      {[](Call& c) { c.options.query_scale = LogFloorQueryScale{.offset = 3}; },
       "[query_scale] offset must be 0 or 1, got 3"},
      {[](Call& c) {
         static const std::vector<float> table(32 * 8, 0.0f);
         c.options.relative_bias = RelativeBias{.buckets = {}, .num_heads = 8, .table = table};
       },
       "[attention] relative_bias must not be given with alibi (each is a position bias), got "
       "both"},
      {[](Call& c) { c.v_view = Heads<const float>::Dense(c.out.data.data() + 100, 5, 2, 6); },
       "[attention] out must not share memory with q, k or v, got a view overlapping v"},
      {[](Call&) {}, "no error"},
  };
  for (const auto& [breaks, message] : cases) {
    Call call;
    breaks(call);
    EXPECT_EQ(call.Error(), message);
    EXPECT_EQ(call.OutUntouched(), message != "no error");
    Call batched;
    breaks(batched);
    EXPECT_EQ(batched.Error(/*batched=*/true), message);
    EXPECT_EQ(batched.OutUntouched(), message != "no error");
  }
  // The bfloat16 form shares the checks.
  const std::vector<BFloat16> bf(4 * 2 * 8);
  const auto view = Heads<const BFloat16>::Dense(bf.data(), 4, 2, 8);
  std::vector<float> out(4 * 2 * 8, 7.0f);
  const std::vector<int64_t> pos{0, 1, 2, 3}, short_pos{0, 1, 2};
  ExpectError(
      [&] {
        Attention({}, Batched<Heads<const BFloat16>>(view), view, view, BatchedPositions(short_pos),
                  BatchedPositions(pos), Heads<float>::Dense(out.data(), 4, 2, 8));
      },
      "[attention] query_pos.size() must equal the number of tokens (4), got 3");
  EXPECT_EQ(out, std::vector<float>(out.size(), 7.0f));
}

TEST(Attention, EmptyInputsAreANoOpOrZeros) {
  // No queries (zero tokens or heads): nothing to do, whatever the pointers. No keys: every
  // query sees nothing and gets zeros, as a query with no visible key does.
  const AttentionOptions options;
  const std::vector<int64_t> none, three{0, 1, 2};
  const Tensor k = RandomTensor(3, 2, 8, 1), v = RandomTensor(3, 2, 4, 2);
  EXPECT_NO_THROW(Attention(options, Heads<const float>::Dense(nullptr, 0, 4, 8), k.view(),
                            v.view(), none, three, Heads<float>::Dense(nullptr, 0, 4, 4)));
  const Tensor q = RandomTensor(3, 4, 8, 3);
  Tensor out(3, 4, 4, 7.0f);
  Attention(options, q.view(), Heads<const float>::Dense(nullptr, 0, 2, 8),
            Heads<const float>::Dense(nullptr, 0, 2, 4), three, none, out.view());
  EXPECT_EQ(out.data, std::vector<float>(out.data.size(), 0.0f));
}

}  // namespace
}  // namespace posenc
