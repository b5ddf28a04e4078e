#include "posenc/dual_chunk.h"

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

// float32 rounding of the fused path (three kernel calls, two merges) against the double
// reference, and bfloat16 storage (q and k rotated and stored in bfloat16): the tolerances of the
// Self-Extend tests.
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
  // The rows of tokens [first, first + count).
  Tensor Rows(int64_t first, int64_t count) const {
    Tensor rows(count, heads, dim, 0);
    std::copy(data.begin() + first * heads * dim, data.begin() + (first + count) * heads * dim,
              rows.data.begin());
    return rows;
  }
};

using Output = std::vector<float>;

Output NaNs(const Tensor& q, const Tensor& v) {
  return Output(static_cast<size_t>(q.tokens * q.heads * v.dim),
                std::numeric_limits<float>::quiet_NaN());
}

Output RunDualChunk(const AttentionOptions& options, const DualChunk& dca, const Tensor& q,
                    const Tensor& k, const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Output out = NaNs(q, v);
  DualChunkAttention(options, dca, q.view(), k.view(), v.view(), query_pos, key_pos,
                     Heads<float>::Dense(out.data(), q.tokens, q.heads, v.dim));
  return out;
}

Output RunReference(const AttentionOptions& options, const DualChunk& dca, const Tensor& q,
                    const Tensor& k, const Tensor& v, const std::vector<int64_t>& query_pos,
                    const std::vector<int64_t>& key_pos) {
  Output out = NaNs(q, v);
  DualChunkAttentionReference(options, dca, q.view(), k.view(), v.view(), query_pos, key_pos,
                              Heads<float>::Dense(out.data(), q.tokens, q.heads, v.dim));
  return out;
}

void ExpectNear(const Output& got, const Output& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << what << ", element " << i;
  }
}

AttentionOptions RopeOptions(int64_t head_dim) {
  AttentionOptions options;
  options.causal = true;
  options.rope = Rope::Default(head_dim);
  return options;
}

std::string Describe(const DualChunk& dca) {
  return "chunk_size " + std::to_string(dca.chunk_size) + ", local_size " +
         std::to_string(dca.local_size) + ", M " +
         std::to_string(dca.original_max_position_embeddings);
}

// The worked example of docs/DUAL_CHUNK.md: chunk_size 8, local_size 3, so chunks of L = 5.
TEST(DualChunk, WorkedExampleFromTheDocs) {
  const DualChunk dca{.chunk_size = 8, .local_size = 3};
  ASSERT_EQ(dca.ChunkLength(), 5);
  // Query 17 (chunk 3, offset 2): keys 15..17 intra, 10..14 successive, 0..9 inter.
  EXPECT_EQ(dca.PartOf(17, 15), DualChunkPart::kIntra);
  EXPECT_EQ(dca.PartOf(17, 14), DualChunkPart::kSuccessive);
  EXPECT_EQ(dca.PartOf(17, 10), DualChunkPart::kSuccessive);
  EXPECT_EQ(dca.PartOf(17, 9), DualChunkPart::kInter);
  EXPECT_EQ(dca.PartOf(17, 0), DualChunkPart::kInter);
  EXPECT_EQ(dca.QueryPosition(DualChunkPart::kIntra, 17), 2);
  EXPECT_EQ(dca.QueryPosition(DualChunkPart::kSuccessive, 17), 7);  // 2 + 5, under 8
  EXPECT_EQ(dca.QueryPosition(DualChunkPart::kInter, 17), 8);       // min(2 * 5 - 1, 8)
  EXPECT_EQ(dca.KeyPosition(14), 4);
  EXPECT_EQ(dca.KeyPosition(10), 0);
  EXPECT_EQ(dca.KeyPosition(9), 4);
  // Query 19 (offset 4 > local_size): the successive position is clamped at chunk_size.
  EXPECT_EQ(dca.QueryPosition(DualChunkPart::kSuccessive, 19), 8);
  // local_size >= L: the inter position is 2 L - 1, not chunk_size.
  const DualChunk wide{.chunk_size = 20, .local_size = 12};
  EXPECT_EQ(wide.QueryPosition(DualChunkPart::kInter, 100), 15);
}

// Every distance scored is in [0, chunk_size]; intra distances are exact, and successive ones
// exact while the query's offset in its chunk is at most local_size (the clamp is what keeps the
// rest below chunk_size).
TEST(DualChunk, ScoredDistancesStayWithinTheChunkSize) {
  for (const DualChunk dca :
       {DualChunk{.chunk_size = 8, .local_size = 3}, DualChunk{.chunk_size = 32, .local_size = 1},
        DualChunk{.chunk_size = 20, .local_size = 12}}) {
    const int64_t l = dca.ChunkLength();
    for (int64_t i = 0; i < 6 * l; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        const DualChunkPart part = dca.PartOf(i, j);
        const int64_t d = dca.QueryPosition(part, i) - dca.KeyPosition(j);
        ASSERT_GE(d, 0) << Describe(dca) << ", query " << i << ", key " << j;
        ASSERT_LE(d, dca.chunk_size) << Describe(dca) << ", query " << i << ", key " << j;
        if (part == DualChunkPart::kIntra ||
            (part == DualChunkPart::kSuccessive && i % l <= dca.local_size)) {
          ASSERT_EQ(d, i - j) << Describe(dca) << ", query " << i << ", key " << j;
        }
      }
    }
  }
}

TEST(DualChunk, LengthScaling) {
  const DualChunk dca{.chunk_size = 32, .local_size = 1, .original_max_position_embeddings = 32};
  EXPECT_EQ(dca.LengthScaling(1), 1.0);
  EXPECT_EQ(dca.LengthScaling(32), 1.0);
  EXPECT_DOUBLE_EQ(dca.LengthScaling(64), 0.1 * std::log(2.0) + 1.0);
  const DualChunk none{.chunk_size = 32, .local_size = 1};
  EXPECT_EQ(none.LengthScaling(int64_t{1} << 30), 1.0);
}

// The fused path against the double reference on every SIMD target: several geometries (L of 1,
// local_size above L), GQA (4 query heads on 2 key/value heads), several query and key tiles,
// with and without the length scaling, a prefill from position 0 and one whose queries are the
// second half of the keys (a chunked prefill after cached tokens).
TEST(DualChunk, MatchesReferenceOnEverySimdTarget) {
  constexpr int64_t kTokens = 150, kHeads = 4, kKvHeads = 2, kHeadDim = 24, kValueDim = 20;
  const Tensor q(kTokens, kHeads, kHeadDim, 1), k(kTokens, kKvHeads, kHeadDim, 2);
  const Tensor v(kTokens, kKvHeads, kValueDim, 3);
  const DualChunk configs[] = {
      {.chunk_size = 32, .local_size = 1, .original_max_position_embeddings = 32},
      {.chunk_size = 24, .local_size = 8},
      {.chunk_size = 20, .local_size = 12, .original_max_position_embeddings = 50},
      {.chunk_size = 2, .local_size = 1},
      {.chunk_size = 100, .local_size = 30}};
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  const std::vector<int64_t> later = PositionRange(kTokens / 2, kTokens - kTokens / 2);
  const Tensor q_later = q.Rows(kTokens / 2, kTokens - kTokens / 2);
  const AttentionOptions options = RopeOptions(kHeadDim);
  ForEachSimdTarget([&](int64_t) {
    for (const DualChunk& dca : configs) {
      ExpectNear(RunDualChunk(options, dca, q, k, v, pos, pos),
                 RunReference(options, dca, q, k, v, pos, pos), kTolerance, Describe(dca));
      ExpectNear(RunDualChunk(options, dca, q_later, k, v, later, pos),
                 RunReference(options, dca, q_later, k, v, later, pos), kTolerance,
                 Describe(dca) + ", queries from " + std::to_string(kTokens / 2));
    }
  });
}

// All positions inside one chunk: every key is intra and at its own position, so dual chunk
// attention is causal RoPE attention (without length scaling).
TEST(DualChunk, OneChunkIsRopeAttention) {
  constexpr int64_t kTokens = 90;
  const Tensor q(kTokens, 4, 16, 11), k(kTokens, 2, 16, 12), v(kTokens, 2, 12, 13);
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  const AttentionOptions options = RopeOptions(16);
  Output plain = NaNs(q, v);
  Attention(options, q.view(), k.view(), v.view(), pos, pos,
            Heads<float>::Dense(plain.data(), kTokens, 4, 12));
  ExpectNear(RunDualChunk(options, {.chunk_size = kTokens + 5, .local_size = 5}, q, k, v, pos, pos),
             plain, kTolerance, "L = tokens");
}

// Past the first chunk the successive and inter parts change the answer.
TEST(DualChunk, DiffersFromRopeAttentionPastTheFirstChunk) {
  const Tensor q(40, 2, 16, 21), k(40, 2, 16, 22), v(40, 2, 8, 23);
  const std::vector<int64_t> pos = PositionRange(0, 40);
  const AttentionOptions options = RopeOptions(16);
  const Output dual = RunDualChunk(options, {.chunk_size = 12, .local_size = 2}, q, k, v, pos, pos);
  Output plain = NaNs(q, v);
  Attention(options, q.view(), k.view(), v.view(), pos, pos,
            Heads<float>::Dense(plain.data(), 40, 2, 8));
  // Queries 0..9 (chunk 0) see only intra keys: the same; later ones differ.
  const size_t first_chunk = 10 * 2 * 8;
  ExpectNear(Output(dual.begin(), dual.begin() + first_chunk),
             Output(plain.begin(), plain.begin() + first_chunk), kTolerance, "chunk 0");
  float largest = 0.0f;
  for (size_t i = first_chunk; i < plain.size(); ++i) {
    largest = std::max(largest, std::abs(dual[i] - plain[i]));
  }
  EXPECT_GT(largest, 1e-3f);
}

// A decode step (one query at position T - 1 against T cached keys and values) equals the last
// row of the prefill and the reference, with enough keys that the kernel splits each part into
// chunks (split-K) before the parts are merged.
TEST(DualChunk, DecodeStepEqualsLastPrefillRow) {
  constexpr int64_t kTokens = 600, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kValueDim = 16;
  const Tensor q(kTokens, kHeads, kHeadDim, 41), k(kTokens, kKvHeads, kHeadDim, 42);
  const Tensor v(kTokens, kKvHeads, kValueDim, 43);
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  const DualChunk dca{.chunk_size = 160, .local_size = 32, .original_max_position_embeddings = 128};
  const AttentionOptions options = RopeOptions(kHeadDim);
  const Output prefill = RunDualChunk(options, dca, q, k, v, pos, pos);
  const Tensor last = q.Rows(kTokens - 1, 1);
  const std::vector<int64_t> last_pos = {kTokens - 1};
  const Output last_row(prefill.end() - kHeads * kValueDim, prefill.end());
  ForEachSimdTarget([&](int64_t) {
    const Output decode = RunDualChunk(options, dca, last, k, v, last_pos, pos);
    ExpectNear(decode, last_row, kTolerance, "decode against prefill");
    ExpectNear(decode, RunReference(options, dca, last, k, v, last_pos, pos), kTolerance,
               "decode against reference");
  });
}

TEST(DualChunk, BFloat16MatchesReferenceOnWidenedInputs) {
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
  const AttentionOptions options = RopeOptions(kHeadDim);
  ForEachSimdTarget([&](int64_t) {
    for (const DualChunk dca :
         {DualChunk{.chunk_size = 32, .local_size = 1, .original_max_position_embeddings = 32},
          DualChunk{.chunk_size = 20, .local_size = 12}}) {
      Output out(static_cast<size_t>(kTokens * kHeads * kValueDim));
      DualChunkAttention(options, dca,
                         Heads<const BFloat16>::Dense(qb.data(), kTokens, kHeads, kHeadDim),
                         Heads<const BFloat16>::Dense(kb.data(), kTokens, kKvHeads, kHeadDim),
                         Heads<const BFloat16>::Dense(vb.data(), kTokens, kKvHeads, kValueDim), pos,
                         pos, Heads<float>::Dense(out.data(), kTokens, kHeads, kValueDim));
      ExpectNear(out, RunReference(options, dca, q, k, v, pos, pos), kToleranceBFloat16,
                 Describe(dca));
    }
  });
}

// Bad input: a posenc::Error naming the parameter, and out untouched.
TEST(DualChunk, BadInputIsAnErrorAndLeavesOutUntouched) {
  const Tensor q(4, 2, 8, 71), k(4, 2, 8, 72), v(4, 2, 8, 73);
  const std::vector<int64_t> pos = PositionRange(0, 4);
  const AttentionOptions options = RopeOptions(8);
  const DualChunk good{.chunk_size = 8, .local_size = 2};
  Output out(4 * 2 * 8, 7.0f);
  const Heads<float> out_view = Heads<float>::Dense(out.data(), 4, 2, 8);
  // Every check twice: through DualChunkAttention and through its batched form (a batch of one).
  for (const bool batched : {false, true}) {
    const auto run = [&](const AttentionOptions& o, const DualChunk& dca) {
      return [&, o, dca] {
        batched
            ? DualChunkAttention(o, dca, Batched<Heads<const float>>(q.view()), k.view(), v.view(),
                                 BatchedPositions(pos), BatchedPositions(pos), out_view)
            : DualChunkAttention(o, dca, q.view(), k.view(), v.view(), pos, pos, out_view);
      };
    };
    ExpectError(run(options, {.chunk_size = 8, .local_size = 0}),
                "[dual_chunk] local_size must be >= 1, got 0");
    ExpectError(run(options, {.chunk_size = 8, .local_size = 8}),
                "[dual_chunk] chunk_size must be > local_size (8): the chunk length chunk_size - "
                "local_size must be >= 1, got 8");
    ExpectError(run(options, {.chunk_size = 4, .local_size = 6}),
                "[dual_chunk] chunk_size must be > local_size (6): the chunk length chunk_size - "
                "local_size must be >= 1, got 4");
    ExpectError(run(options, {.chunk_size = kMaxPosition + 1, .local_size = 2}),
                "[dual_chunk] chunk_size must be <= kMaxPosition (4294967296), got 4294967297");
    ExpectError(
        run(options, {.chunk_size = 8, .local_size = 2, .original_max_position_embeddings = -1}),
        "[dual_chunk] original_max_position_embeddings must be >= 0 (0 means no length "
        "scaling), got -1");
    AttentionOptions no_rope = options;
    no_rope.rope.reset();
    ExpectError(run(no_rope, good),
                "[dual_chunk] options.rope must be given (dual chunk attention re-positions "
                "RoPE), got none");
    AttentionOptions not_causal = options;
    not_causal.causal = false;
    ExpectError(run(not_causal, good),
                "[dual_chunk] options.causal must be true (dual chunk attention is causal, as in "
                "vLLM), got false");
    AttentionOptions windowed = options;
    windowed.window = 3;
    ExpectError(run(windowed, good),
                "[dual_chunk] options.window must not be given (not supported with dual chunk "
                "attention), got 3");
    AttentionOptions chunked = options;
    chunked.chunk_size = 4;
    ExpectError(run(chunked, good),
                "[dual_chunk] options.chunk_size must be 0 (dual chunk attention sets its own "
                "chunks: DualChunk::chunk_size), got 4");
    AttentionOptions with_alibi = options;
    with_alibi.alibi = Alibi{.num_heads = 2};
    ExpectError(run(with_alibi, good),
                "[dual_chunk] options.alibi must not be given (not supported with dual chunk "
                "attention), got an Alibi");
    // Attention's own checks come after dual chunk attention's, with Attention's message.
    AttentionOptions bad_scale = options;
    bad_scale.scale = -1.0;
    ExpectError(run(bad_scale, good),
                "[attention] scale must be 0 (meaning 1 / sqrt(head_dim)) or a positive normal "
                "float32, in [1.1754943508222875e-38, 3.4028234663852886e+38], got -1");
    // A scale Attention accepts, but not once the length scaling (f^2 = (0.1 ln 4 + 1)^2 for 4
    // tokens against M = 1) multiplies it.
    AttentionOptions huge_scale = options;
    huge_scale.scale = 3e38;
    ExpectError(
        run(huge_scale, {.chunk_size = 8, .local_size = 2, .original_max_position_embeddings = 1}),
        "[dual_chunk] options.scale times the length scaling squared must be a positive "
        "normal float32, in [1.1754943508222875e-38, 3.4028234663852886e+38], got "
        "3.8894309783421189e+38");
  }
  // A batch of two whose second element is bad is refused before the first is written.
  testing_support::ExpectBadSecondElementRefusedBeforeWriting(
      q.view(), k.view(), v.view(), pos,
      [&](const auto& qs, const auto& ks, const auto& vs, const auto& query_pos,
          const auto& key_pos, const auto& outs) {
        DualChunkAttention(options, good, qs, ks, vs, query_pos, key_pos, outs);
      });
  for (const float x : out) ASSERT_EQ(x, 7.0f);
}

TEST(DualChunk, NoKeysGiveZeros) {
  const Tensor q(3, 2, 8, 81), v(0, 2, 8, 83), k(0, 2, 8, 82);
  const Output out = RunDualChunk(RopeOptions(8), {.chunk_size = 4, .local_size = 1}, q, k, v,
                                  PositionRange(10, 3), {});
  for (const float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace posenc
