#include "posenc/self_extend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "posenc/attention.h"
#include "posenc/positions.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;

// float32 rounding of the fused path against the double reference (the tolerance of the attention
// kernel's own tests), and bfloat16 storage (q and k rotated and stored in bfloat16).
constexpr double kTolerance = 2e-5;
constexpr double kToleranceBFloat16 = 2e-2;

// A dense [tokens, heads, dim] tensor, uniform in [-1, 1) from a fixed seed.
struct Tensor {
  int64_t tokens = 0, heads = 0, dim = 0;
  std::vector<float> data;

  Tensor(int64_t tokens, int64_t heads, int64_t dim, uint32_t seed)
      : tokens(tokens), heads(heads), dim(dim), data(static_cast<size_t>(tokens * heads * dim)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& x : data) x = uniform(rng);
  }
  Heads<const float> view() const {
    return Heads<const float>::Dense(data.data(), tokens, heads, dim);
  }
};

using Output = std::vector<float>;

Output RunSelfExtend(const AttentionOptions& options, const SelfExtend& se, const Tensor& q,
                     const Tensor& k, const Tensor& v, const std::vector<int64_t>& query_pos,
                     const std::vector<int64_t>& key_pos) {
  Output out(static_cast<size_t>(q.tokens * q.heads * v.dim),
             std::numeric_limits<float>::quiet_NaN());
  SelfExtendAttention(options, se, q.view(), k.view(), v.view(), query_pos, key_pos,
                      Heads<float>::Dense(out.data(), q.tokens, q.heads, v.dim));
  return out;
}

Output RunReference(const AttentionOptions& options, const SelfExtend& se, const Tensor& q,
                    const Tensor& k, const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Output out(static_cast<size_t>(q.tokens * q.heads * v.dim),
             std::numeric_limits<float>::quiet_NaN());
  SelfExtendAttentionReference(options, se, q.view(), k.view(), v.view(), query_pos, key_pos,
                               Heads<float>::Dense(out.data(), q.tokens, q.heads, v.dim));
  return out;
}

Output RunAttention(const AttentionOptions& options, const Tensor& q, const Tensor& k,
                    const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Output out(static_cast<size_t>(q.tokens * q.heads * v.dim),
             std::numeric_limits<float>::quiet_NaN());
  Attention(options, q.view(), k.view(), v.view(), query_pos, key_pos,
            Heads<float>::Dense(out.data(), q.tokens, q.heads, v.dim));
  return out;
}

void ExpectNear(const Output& got, const Output& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << what << ", element " << i;
  }
}

// The rows of `out` ([tokens, heads, dim]) of tokens [first, first + count).
Output TokenRows(const Output& out, int64_t heads, int64_t dim, int64_t first, int64_t count) {
  const auto begin = out.begin() + first * heads * dim;
  return Output(begin, begin + count * heads * dim);
}

AttentionOptions RopeOptions(int64_t head_dim, bool causal) {
  AttentionOptions options;
  options.causal = causal;
  options.rope = Rope::Default(head_dim);
  return options;
}

std::string Describe(const SelfExtend& se, bool causal, int64_t first_pos) {
  return "G " + std::to_string(se.group_size) + ", W " + std::to_string(se.neighbor_window) +
         (causal ? ", causal" : ", not causal") + ", positions from " + std::to_string(first_pos);
}

TEST(SelfExtend, GroupedPositionsFollowThePaper) {
  // G = 4, W = 8 (docs/SELF_EXTEND.md): keys at floor(pos / 4), queries at floor(pos / 4) + 6.
  const SelfExtend se{.group_size = 4, .neighbor_window = 8};
  EXPECT_EQ(se.GroupKeyPosition(0), 0);
  EXPECT_EQ(se.GroupKeyPosition(7), 1);
  EXPECT_EQ(se.GroupKeyPosition(21), 5);
  EXPECT_EQ(se.GroupQueryPosition(8), 8);    // 2 + 8 - 2: at d = W the query keeps its place
  EXPECT_EQ(se.GroupQueryPosition(29), 13);  // 7 + 6
  // W not a multiple of G: the floor, as in the paper's first code (W - W // G).
  const SelfExtend odd{.group_size = 3, .neighbor_window = 10};
  EXPECT_EQ(odd.GroupQueryPosition(10), 3 + 10 - 3);
}

// The tiled path against the double reference (both score matrices, where, one softmax) on every
// SIMD target: causal and not, GQA (4 query heads on 2 key/value heads), several query and key
// tiles, W a multiple of G and not, positions from 0 and far out.
TEST(SelfExtend, MatchesReferenceOnEverySimdTarget) {
  constexpr int64_t kTokens = 150, kHeads = 4, kKvHeads = 2, kHeadDim = 24, kValueDim = 20;
  const Tensor q(kTokens, kHeads, kHeadDim, 1), k(kTokens, kKvHeads, kHeadDim, 2);
  const Tensor v(kTokens, kKvHeads, kValueDim, 3);
  const SelfExtend configs[] = {{.group_size = 4, .neighbor_window = 8},
                                {.group_size = 3, .neighbor_window = 10},
                                {.group_size = 8, .neighbor_window = 64},
                                {.group_size = 2, .neighbor_window = 1}};
  ForEachSimdTarget([&](int64_t) {
    for (const SelfExtend& se : configs) {
      for (const bool causal : {true, false}) {
        for (const int64_t first : {int64_t{0}, int64_t{100000}}) {
          const std::vector<int64_t> pos = PositionRange(first, kTokens);
          const AttentionOptions options = RopeOptions(kHeadDim, causal);
          ExpectNear(RunSelfExtend(options, se, q, k, v, pos, pos),
                     RunReference(options, se, q, k, v, pos, pos), kTolerance,
                     Describe(se, causal, first));
        }
      }
    }
  });
}

// The group part changes the answer: the far keys are not scored as plain RoPE would.
TEST(SelfExtend, DiffersFromRopeAttentionPastTheWindow) {
  const Tensor q(40, 2, 16, 11), k(40, 2, 16, 12), v(40, 2, 8, 13);
  const std::vector<int64_t> pos = PositionRange(0, 40);
  const AttentionOptions options = RopeOptions(16, true);
  const Output extended =
      RunSelfExtend(options, {.group_size = 4, .neighbor_window = 8}, q, k, v, pos, pos);
  const Output plain = RunAttention(options, q, k, v, pos, pos);
  // Queries 0..8 see only neighbours: the same; later ones see group keys: different.
  ExpectNear(TokenRows(extended, 2, 8, 0, 9), TokenRows(plain, 2, 8, 0, 9), kTolerance,
             "rows within the window");
  float largest = 0.0f;
  for (size_t i = 9 * 2 * 8; i < plain.size(); ++i) {
    largest = std::max(largest, std::abs(extended[i] - plain[i]));
  }
  EXPECT_GT(largest, 1e-3f);
}

// A neighbour window that covers every distance leaves plain RoPE attention.
TEST(SelfExtend, WindowCoveringTheSequenceIsRopeAttention) {
  constexpr int64_t kTokens = 100;
  const Tensor q(kTokens, 4, 16, 21), k(kTokens, 2, 16, 22), v(kTokens, 2, 12, 23);
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  for (const bool causal : {true, false}) {
    const AttentionOptions options = RopeOptions(16, causal);
    for (const int64_t w : {kTokens, kTokens + 1, int64_t{1} << 20}) {
      ExpectNear(RunSelfExtend(options, {.group_size = 4, .neighbor_window = w}, q, k, v, pos, pos),
                 RunAttention(options, q, k, v, pos, pos), kTolerance,
                 "W " + std::to_string(w) + (causal ? ", causal" : ""));
    }
  }
}

// G = 1 leaves every position as it is: both parts score as plain RoPE, and merged they are
// plain RoPE attention.
TEST(SelfExtend, GroupSizeOneIsRopeAttention) {
  constexpr int64_t kTokens = 130;
  const Tensor q(kTokens, 4, 16, 31), k(kTokens, 2, 16, 32), v(kTokens, 2, 12, 33);
  const std::vector<int64_t> pos = PositionRange(7, kTokens);
  for (const bool causal : {true, false}) {
    const AttentionOptions options = RopeOptions(16, causal);
    for (const int64_t w : {1, 5, 64}) {
      ExpectNear(RunSelfExtend(options, {.group_size = 1, .neighbor_window = w}, q, k, v, pos, pos),
                 RunAttention(options, q, k, v, pos, pos), kTolerance,
                 "W " + std::to_string(w) + (causal ? ", causal" : ""));
    }
  }
}

// A decode step (one query at position T - 1 against T cached keys and values) equals the last
// row of the prefill and the reference, with enough keys that the kernel splits them into chunks
// (split-K) and merges those by log-sum-exp before Self-Extend merges its two parts.
TEST(SelfExtend, DecodeStepEqualsLastPrefillRow) {
  constexpr int64_t kTokens = 600, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kValueDim = 16;
  const Tensor q(kTokens, kHeads, kHeadDim, 41), k(kTokens, kKvHeads, kHeadDim, 42);
  const Tensor v(kTokens, kKvHeads, kValueDim, 43);
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  const SelfExtend se{.group_size = 4, .neighbor_window = 32};
  const AttentionOptions options = RopeOptions(kHeadDim, true);
  const Output prefill = RunSelfExtend(options, se, q, k, v, pos, pos);
  Tensor last(1, kHeads, kHeadDim, 0);
  std::copy(q.data.end() - kHeads * kHeadDim, q.data.end(), last.data.begin());
  const std::vector<int64_t> last_pos = {kTokens - 1};
  ForEachSimdTarget([&](int64_t) {
    const Output decode = RunSelfExtend(options, se, last, k, v, last_pos, pos);
    ExpectNear(decode, TokenRows(prefill, kHeads, kValueDim, kTokens - 1, 1), kTolerance,
               "decode against prefill");
    ExpectNear(decode, RunReference(options, se, last, k, v, last_pos, pos), kTolerance,
               "decode against reference");
  });
}

// options.window and chunk_size keep their meaning (in the original positions) on top of the
// neighbour / group split, including rows whose window leaves only group keys.
TEST(SelfExtend, WindowAndChunksMatchReference) {
  constexpr int64_t kTokens = 90;
  const Tensor q(kTokens, 2, 16, 51), k(kTokens, 1, 16, 52), v(kTokens, 1, 8, 53);
  const std::vector<int64_t> pos = PositionRange(3, kTokens);
  const SelfExtend se{.group_size = 4, .neighbor_window = 8};
  for (const bool causal : {true, false}) {
    AttentionOptions windowed = RopeOptions(16, causal);
    windowed.window = 40;
    ExpectNear(RunSelfExtend(windowed, se, q, k, v, pos, pos),
               RunReference(windowed, se, q, k, v, pos, pos), kTolerance, "window 40");
    windowed.window = 5;  // inside the neighbour window: no group keys
    ExpectNear(RunSelfExtend(windowed, se, q, k, v, pos, pos),
               RunReference(windowed, se, q, k, v, pos, pos), kTolerance, "window 5");
    AttentionOptions chunked = RopeOptions(16, causal);
    chunked.chunk_size = 32;
    ExpectNear(RunSelfExtend(chunked, se, q, k, v, pos, pos),
               RunReference(chunked, se, q, k, v, pos, pos), kTolerance, "chunks of 32");
  }
}

TEST(SelfExtend, BFloat16MatchesReferenceOnWidenedInputs) {
  constexpr int64_t kTokens = 150, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kValueDim = 32;
  Tensor q(kTokens, kHeads, kHeadDim, 61), k(kTokens, kKvHeads, kHeadDim, 62);
  Tensor v(kTokens, kKvHeads, kValueDim, 63);
  // The inputs rounded to bfloat16, and their float32 widening for the reference.
  const auto to_bf16 = [](Tensor& x) {
    std::vector<BFloat16> bits(x.data.size());
    for (size_t i = 0; i < x.data.size(); ++i) {
      bits[i] = BFloat16::FromFloat(x.data[i]);
      x.data[i] = bits[i].ToFloat();
    }
    return bits;
  };
  const std::vector<BFloat16> qb = to_bf16(q), kb = to_bf16(k), vb = to_bf16(v);
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  const SelfExtend se{.group_size = 4, .neighbor_window = 16};
  ForEachSimdTarget([&](int64_t) {
    for (const bool causal : {true, false}) {
      const AttentionOptions options = RopeOptions(kHeadDim, causal);
      Output out(static_cast<size_t>(kTokens * kHeads * kValueDim));
      SelfExtendAttention(options, se,
                          Heads<const BFloat16>::Dense(qb.data(), kTokens, kHeads, kHeadDim),
                          Heads<const BFloat16>::Dense(kb.data(), kTokens, kKvHeads, kHeadDim),
                          Heads<const BFloat16>::Dense(vb.data(), kTokens, kKvHeads, kValueDim),
                          pos, pos, Heads<float>::Dense(out.data(), kTokens, kHeads, kValueDim));
      ExpectNear(out, RunReference(options, se, q, k, v, pos, pos), kToleranceBFloat16,
                 causal ? "causal" : "not causal");
    }
  });
}

// Bad input: a posenc::Error naming the parameter, and out untouched.
TEST(SelfExtend, BadInputIsAnErrorAndLeavesOutUntouched) {
  const Tensor q(4, 2, 8, 71), k(4, 2, 8, 72), v(4, 2, 8, 73);
  const std::vector<int64_t> pos = PositionRange(0, 4);
  const AttentionOptions options = RopeOptions(8, true);
  Output out(4 * 2 * 8, 7.0f);
  const Heads<float> out_view = Heads<float>::Dense(out.data(), 4, 2, 8);
  // Every check twice: through SelfExtendAttention and through its batched form (a batch of one).
  for (const bool batched : {false, true}) {
    const auto run = [&](const AttentionOptions& o, const SelfExtend& se) {
      return [&, o, se] {
        batched
            ? SelfExtendAttention(o, se, Batched<Heads<const float>>(q.view()), k.view(), v.view(),
                                  BatchedPositions(pos), BatchedPositions(pos), out_view)
            : SelfExtendAttention(o, se, q.view(), k.view(), v.view(), pos, pos, out_view);
      };
    };
    ExpectError(run(options, {.group_size = 0, .neighbor_window = 8}),
                "[self_extend] group_size must be >= 1, got 0");
    ExpectError(run(options, {.group_size = 4, .neighbor_window = 0}),
                "[self_extend] neighbor_window must be >= 1, got 0");
    ExpectError(run(options, {.group_size = -3, .neighbor_window = 8}),
                "[self_extend] group_size must be >= 1, got -3");
    ExpectError(run(options, {.group_size = 4, .neighbor_window = kMaxPosition + 1}),
                "[self_extend] neighbor_window must be <= kMaxPosition (4294967296), got "
                "4294967297");
    AttentionOptions no_rope = options;
    no_rope.rope.reset();
    ExpectError(run(no_rope, {.group_size = 4, .neighbor_window = 8}),
                "[self_extend] options.rope must be given (Self-Extend regroups RoPE positions), "
                "got none");
    AttentionOptions with_alibi = options;
    with_alibi.alibi = Alibi{.num_heads = 2};
    ExpectError(run(with_alibi, {.group_size = 4, .neighbor_window = 8}),
                "[self_extend] options.alibi must not be given (not supported with Self-Extend), "
                "got an Alibi");
    // Attention's own checks come after Self-Extend's, with Attention's message.
    AttentionOptions bad_window = options;
    bad_window.window = -1;
    ExpectError(run(bad_window, {.group_size = 4, .neighbor_window = 8}),
                "[attention] window must be >= 0 (0 means no window), got -1");
  }
  // A batch of two whose second element is bad is refused before the first is written.
  testing_support::ExpectBadSecondElementRefusedBeforeWriting(
      q.view(), k.view(), v.view(), pos,
      [&](const auto& qs, const auto& ks, const auto& vs, const auto& query_pos,
          const auto& key_pos, const auto& outs) {
        SelfExtendAttention(options, {.group_size = 4, .neighbor_window = 8}, qs, ks, vs, query_pos,
                            key_pos, outs);
      });
  for (const float x : out) ASSERT_EQ(x, 7.0f);
}

TEST(SelfExtend, NoQueriesOrNoKeys) {
  const Tensor q(3, 2, 8, 81), v(0, 2, 8, 83), k(0, 2, 8, 82);
  const AttentionOptions options = RopeOptions(8, true);
  // No keys: every query sees nothing and gets zeros.
  const Output out = RunSelfExtend(options, {.group_size = 2, .neighbor_window = 2}, q, k, v,
                                   PositionRange(0, 3), {});
  for (const float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace posenc
