// The fused attention kernel (behind Attention) against AttentionReference, the unfused
// composition in double, on every compiled SIMD target; and the identities a fused kernel must
// keep: decode equals the last row of prefill, positions shifted by a million change nothing,
// and ALiBi's two bias forms agree; bfloat16 stays within its weight rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention_bf16.h"
#include "bf16_arithmetics_for_test.h"
#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/positions.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"

namespace posenc {
namespace {

using testing_support::ForEachBf16Arithmetic;
using testing_support::ForEachSimdTarget;

// How far Attention's output may be from the reference's, absolute (values lie in [-1, 1]).
// float32: the kernel's float32 dot products, exp and sums against double, a few ulps of the
// largest terms. bfloat16 is defined by the reference on the widened inputs; the kernel rounds
// the RoPE-rotated q and k to bfloat16 (as the standalone op on bfloat16 does), which moves the
// scores by a few bfloat16 ulps.
template <typename T>
constexpr double kTolerance = 2e-5;
template <>
constexpr double kTolerance<BFloat16> = 2e-2;

// A [tokens, heads, dim] tensor of T inside a larger buffer: `gap` elements after every row and
// one element before the first (a misaligned start), all of them NaN, so that a kernel reading
// outside the rows poisons its output.
template <typename T>
struct Tensor {
  std::vector<T> buffer;
  Heads<T> view;
  std::vector<float> values;  // the rows, densely, as float: what the reference is given

  Tensor(int64_t tokens, int64_t heads, int64_t dim, uint32_t seed, float range = 1.0f,
         int64_t gap = 0) {
    const int64_t row = dim + gap;
    buffer.assign(static_cast<size_t>(tokens * heads * row + 1),
                  FromFloat<T>(std::numeric_limits<float>::quiet_NaN()));
    view = {buffer.data() + 1, tokens, heads, dim, heads * row, row};
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-range, range);
    values.resize(static_cast<size_t>(tokens * heads * dim));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < dim; ++d) {
          const T x = FromFloat<T>(uniform(rng));
          view.Row(t, h)[d] = x;
          values[static_cast<size_t>((t * heads + h) * dim + d)] = ToFloat(x);
        }
      }
    }
  }
  Heads<const float> Widened() const {
    return Heads<const float>::Dense(values.data(), view.tokens, view.num_heads, view.head_dim);
  }
};

using Output = std::vector<float>;

template <typename T>
Output Run(const AttentionOptions& options, Heads<const T> q, Heads<const T> k, Heads<const T> v,
           const std::vector<int64_t>& query_pos, const std::vector<int64_t>& key_pos) {
  Output out(static_cast<size_t>(q.tokens * q.num_heads * v.head_dim),
             std::numeric_limits<float>::quiet_NaN());
  Attention(options, q, k, v, query_pos, key_pos,
            Heads<float>::Dense(out.data(), q.tokens, q.num_heads, v.head_dim));
  return out;
}

template <typename T>
Output Run(const AttentionOptions& options, const Tensor<T>& q, const Tensor<T>& k,
           const Tensor<T>& v, const std::vector<int64_t>& query_pos,
           const std::vector<int64_t>& key_pos) {
  return Run<T>(options, q.view, k.view, v.view, query_pos, key_pos);
}

template <typename T>
Output Reference(const AttentionOptions& options, const Tensor<T>& q, const Tensor<T>& k,
                 const Tensor<T>& v, const std::vector<int64_t>& query_pos,
                 const std::vector<int64_t>& key_pos) {
  Output out(static_cast<size_t>(q.view.tokens * q.view.num_heads * v.view.head_dim));
  AttentionReference(
      options, q.Widened(), k.Widened(), v.Widened(), query_pos, key_pos,
      Heads<float>::Dense(out.data(), q.view.tokens, q.view.num_heads, v.view.head_dim));
  return out;
}

void ExpectNear(const Output& got, const Output& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << what << " element " << i;
  }
}

// The kernel against the reference (double, on the widened inputs) on every compiled SIMD target.
template <typename T>
void ExpectMatchesReference(const AttentionOptions& options, const Tensor<T>& q, const Tensor<T>& k,
                            const Tensor<T>& v, const std::vector<int64_t>& query_pos,
                            const std::vector<int64_t>& key_pos, const std::string& what,
                            double tolerance = kTolerance<T>) {
  const Output want = Reference(options, q, k, v, query_pos, key_pos);
  ForEachSimdTarget([&](int64_t) {
    ExpectNear(Run(options, q, k, v, query_pos, key_pos), want, tolerance, what);
  });
}

struct Shape {
  int64_t q_tokens, kv_tokens, num_heads, num_kv_heads, head_dim, value_dim;
};

// Odd sizes around the tile edges (4 query rows, 64 keys) and every vector width (4, 8, 16
// floats): head_dim 40 and 72 are no multiple of 16, 33 none of anything.
constexpr Shape kShapes[] = {
    {1, 1, 1, 1, 32, 32},     {3, 3, 2, 1, 40, 40},      {5, 7, 8, 8, 72, 72},
    {17, 17, 4, 2, 33, 24},   {65, 65, 8, 1, 64, 64},    {63, 129, 4, 4, 128, 128},
    {1, 300, 8, 2, 256, 256}, {131, 131, 2, 1, 256, 72}, {300, 300, 2, 1, 40, 40},
};

std::string Describe(const Shape& s, const AttentionOptions& o) {
  return "q_tokens " + std::to_string(s.q_tokens) + " kv_tokens " + std::to_string(s.kv_tokens) +
         " heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
         " head_dim " + std::to_string(s.head_dim) + " value_dim " + std::to_string(s.value_dim) +
         (o.causal ? " causal" : " full") + (o.alibi ? " alibi" : "") + (o.rope ? " rope" : "") +
         (o.window > 0 ? " window " + std::to_string(o.window) : "") +
         (o.chunk_size > 0 ? " chunk_size " + std::to_string(o.chunk_size) : "") +
         (o.query_scale ? " query_scale" : "") + (o.relative_bias ? " relative_bias" : "");
}

// Random q, k and v of a shape (q and v with gaps after their rows, seeds taken in turn from
// `seed`); the queries are the last q_tokens of the keys' positions (prefill when equal, a chunk
// or a decode step against a KV cache when not).
template <typename T>
struct ShapeInputs {
  ShapeInputs(const Shape& s, uint32_t& seed)
      : q(s.q_tokens, s.num_heads, s.head_dim, seed++, 2.0f, 3),
        k(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++, 2.0f),
        v(s.kv_tokens, s.num_kv_heads, s.value_dim, seed++, 1.0f, 1),
        key_pos(PositionRange(0, s.kv_tokens)),
        query_pos(PositionRange(s.kv_tokens - s.q_tokens, s.q_tokens)) {}
  Tensor<T> q, k, v;
  std::vector<int64_t> key_pos, query_pos;
};

// Option combination c of a shape: causal (bit 0), ALiBi (bit 1), RoPE (bit 2; the layout
// alternates with `seed`, and an odd head_dim leaves its last feature unrotated).
AttentionOptions Combination(int c, const Shape& s, uint32_t seed) {
  AttentionOptions options;
  options.causal = c & 1;
  if (c & 2) options.alibi = Alibi{.num_heads = s.num_heads};
  if (c & 4) {
    const RopeLayout layout = seed % 2 ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
    options.rope = Rope::Default(s.head_dim, 10000.0, layout, s.head_dim / 2 * 2);
  }
  return options;
}

// Every option combination, each shape, every SIMD target.
template <typename T>
void CheckAgainstReference() {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    const ShapeInputs<T> in(s, seed);
    for (int c = 0; c < 8; ++c) {
      const AttentionOptions options = Combination(c, s, seed);
      ExpectMatchesReference(options, in.q, in.k, in.v, in.query_pos, in.key_pos,
                             Describe(s, options));
    }
  }
}

TEST(AttentionKernel, MatchesReferenceAcrossShapesFloat32) { CheckAgainstReference<float>(); }
TEST(AttentionKernel, MatchesReferenceAcrossShapesBFloat16) {
  ForEachBf16Arithmetic([] { CheckAgainstReference<BFloat16>(); });
}

// bfloat16 without RoPE (which rounds rotated q and k back to bfloat16): beyond float32, the
// kernel rounds only the softmax weights, to bfloat16 for the weighted values where AVX512-BF16
// multiplies them (posenc/attention.h). Each weight moves by at most 2^-9 of itself, so with
// values in [-1, 1] the output stays within 2^-9 of the reference, float32 sums aside.
TEST(AttentionKernel, BFloat16OutputsWithinTheWeightRounding) {
  ForEachBf16Arithmetic([] {
    uint32_t seed = 500;
    for (const Shape& s : kShapes) {
      const ShapeInputs<BFloat16> in(s, seed);
      for (int c = 0; c < 4; ++c) {  // without RoPE
        const AttentionOptions options = Combination(c, s, seed);
        ExpectMatchesReference(options, in.q, in.k, in.v, in.query_pos, in.key_pos,
                               Describe(s, options), 0x1p-9 + kTolerance<float>);
      }
    }
  });
}

// Decode: query t alone against keys 0 .. t is row t of the causal prefill, for the last steps
// and at a position offset of a million (a long conversation).
template <typename T>
void CheckDecodeEqualsPrefill() {
  constexpr int64_t kTokens = 77, kHeads = 8, kKvHeads = 2, kDim = 72;
  const Tensor<T> q(kTokens, kHeads, kDim, 11, 2.0f), k(kTokens, kKvHeads, kDim, 12, 2.0f),
      v(kTokens, kKvHeads, kDim, 13);
  for (const int64_t offset : {int64_t{0}, int64_t{1000000}}) {
    AttentionOptions options;
    options.causal = true;
    options.alibi = Alibi{.num_heads = kHeads};
    options.rope = Rope::Default(kDim);
    const std::vector<int64_t> positions = PositionRange(offset, kTokens);
    ForEachSimdTarget([&](int64_t) {
      const Output prefill = Run(options, q, k, v, positions, positions);
      for (int64_t t = kTokens - 3; t < kTokens; ++t) {
        // Views of row t of q and of the first t + 1 keys and values (the cache).
        Heads<const T> q_step = q.view, k_cache = k.view, v_cache = v.view;
        q_step.data = q.view.Row(t, 0);
        q_step.tokens = 1;
        k_cache.tokens = v_cache.tokens = t + 1;
        const std::vector<int64_t> cache(positions.begin(), positions.begin() + t + 1);
        const Output decode = Run(options, q_step, k_cache, v_cache, {positions[t]}, cache);
        const Output row(prefill.begin() + t * kHeads * kDim,
                         prefill.begin() + (t + 1) * kHeads * kDim);
        ExpectNear(decode, row, 1e-6,
                   "decode step " + std::to_string(t) + " offset " + std::to_string(offset));
      }
    });
  }
}

TEST(AttentionKernel, DecodeStepEqualsLastRowsOfPrefillFloat32) {
  CheckDecodeEqualsPrefill<float>();
}
TEST(AttentionKernel, DecodeStepEqualsLastRowsOfPrefillBFloat16) {
  ForEachBf16Arithmetic([] { CheckDecodeEqualsPrefill<BFloat16>(); });
}

// Long decode: few query rows per KV head make few work items, so the kernel splits the keys
// into chunks (split-K, at least 256 keys each) and merges the partial results by the
// log-sum-exp rule. 1000 and 8192 keys, GQA ratios 1, 2, 4 and 8, head_dim a multiple of every
// vector width (keys read in place) or not (packed), causal and full, with ALiBi and RoPE. One
// case puts the queries a third of the way in, so that causal hides whole chunks (their
// partials carry no weight).
template <typename T>
void CheckSplitKeyDecode() {
  struct DecodeShape {
    int64_t q_tokens, kv_tokens, num_heads, num_kv_heads, head_dim;
    bool early_queries;
  };
  constexpr DecodeShape kDecodeShapes[] = {
      {1, 1000, 8, 8, 64, false}, {1, 1000, 8, 4, 40, false}, {3, 1000, 8, 1, 64, true},
      {1, 8192, 8, 1, 64, false}, {2, 8192, 8, 2, 72, false}, {1, 8192, 4, 4, 128, true},
  };
  uint32_t seed = 100;
  for (const DecodeShape& s : kDecodeShapes) {
    const Tensor<T> q(s.q_tokens, s.num_heads, s.head_dim, seed++, 2.0f);
    const Tensor<T> k(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++, 2.0f, 1);
    const Tensor<T> v(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++);
    const std::vector<int64_t> key_pos = PositionRange(0, s.kv_tokens);
    const int64_t first_query = s.early_queries ? s.kv_tokens / 3 : s.kv_tokens - s.q_tokens;
    const std::vector<int64_t> query_pos = PositionRange(first_query, s.q_tokens);
    for (const bool causal : {false, true}) {
      AttentionOptions options;
      options.causal = causal;
      options.alibi = Alibi{.num_heads = s.num_heads};
      options.rope = Rope::Default(s.head_dim);
      const std::string what =
          Describe({s.q_tokens, s.kv_tokens, s.num_heads, s.num_kv_heads, s.head_dim, s.head_dim},
                   options) +
          (s.early_queries ? " early queries" : "");
      ExpectMatchesReference(options, q, k, v, query_pos, key_pos, what);
    }
  }
}

TEST(AttentionKernel, SplitKeyDecodeMatchesReferenceFloat32) { CheckSplitKeyDecode<float>(); }
TEST(AttentionKernel, SplitKeyDecodeMatchesReferenceBFloat16) {
  ForEachBf16Arithmetic([] { CheckSplitKeyDecode<BFloat16>(); });
}

// Positions in the millions: the kernel still matches the reference there, and since RoPE scores
// and ALiBi biases depend only on position differences, shifting every position by 10^6 leaves
// the output as it was at 0.
template <typename T>
void CheckLongPositions() {
  constexpr int64_t kQueries = 37, kKeys = 150, kHeads = 4, kDim = 64;
  const Tensor<T> q(kQueries, kHeads, kDim, 21, 2.0f), k(kKeys, 2, kDim, 22, 2.0f),
      v(kKeys, 2, kDim, 23);
  AttentionOptions options;
  options.causal = true;
  options.alibi = Alibi{.num_heads = kHeads};
  options.rope = Rope::Default(kDim);
  const std::vector<int64_t> key_pos = PositionRange(0, kKeys);
  const std::vector<int64_t> query_pos = PositionRange(kKeys - kQueries, kQueries);
  const Output at_zero = Reference(options, q, k, v, query_pos, key_pos);
  for (const int64_t offset : {int64_t{1000000}, int64_t{1} << 24, int64_t{3000000000}}) {
    std::vector<int64_t> far_keys = key_pos, far_queries = query_pos;
    for (int64_t& p : far_keys) p += offset;
    for (int64_t& p : far_queries) p += offset;
    const Output want = Reference(options, q, k, v, far_queries, far_keys);
    ForEachSimdTarget([&](int64_t) {
      const Output got = Run(options, q, k, v, far_queries, far_keys);
      ExpectNear(got, want, kTolerance<T>, "offset " + std::to_string(offset));
      // Against the unshifted output: the rotation's float32 rounding at large angles adds a
      // little (RoPE's own precision contract, posenc/rope.h).
      ExpectNear(got, at_zero, 2 * kTolerance<T>, "shift by " + std::to_string(offset));
    });
  }
}

TEST(AttentionKernel, LongPositionsStayAccurateFloat32) { CheckLongPositions<float>(); }
TEST(AttentionKernel, LongPositionsStayAccurateBFloat16) {
  ForEachBf16Arithmetic([] { CheckLongPositions<BFloat16>(); });
}

// ALiBi's bias -slope (i - j) and the key-position-only form slope j differ by -slope i, a
// constant along each query's row, which softmax removes: without a causal mask (the one other
// use of query positions) and RoPE, putting every query at position 0 turns the first form into
// the second and must not change the output.
template <typename T>
void CheckAlibiBiasForms() {
  constexpr int64_t kQueries = 45, kKeys = 133, kHeads = 8, kDim = 40;
  const Tensor<T> q(kQueries, kHeads, kDim, 31, 2.0f), k(kKeys, 4, kDim, 32, 2.0f),
      v(kKeys, 4, kDim, 33);
  AttentionOptions options;
  options.alibi = Alibi{.num_heads = kHeads};
  const std::vector<int64_t> key_pos = PositionRange(0, kKeys);
  const std::vector<int64_t> query_pos = PositionRange(kKeys - kQueries, kQueries);
  const std::vector<int64_t> at_zero(kQueries, 0);
  const Output relative = Reference(options, q, k, v, query_pos, key_pos);
  ForEachSimdTarget([&](int64_t) {
    ExpectNear(Run(options, q, k, v, query_pos, key_pos), relative, kTolerance<T>, "-(i - j)");
    ExpectNear(Run(options, q, k, v, at_zero, key_pos), relative, kTolerance<T>, "key only");
  });
}

TEST(AttentionKernel, AlibiBiasFormsAgreeFloat32) { CheckAlibiBiasForms<float>(); }
TEST(AttentionKernel, AlibiBiasFormsAgreeBFloat16) {
  ForEachBf16Arithmetic([] { CheckAlibiBiasForms<BFloat16>(); });
}

// Sliding windows against the reference: windows of 1 (the query's own key), 7 (inside one key
// tile), 64 (one key tile) and 100 (straddling two), so that key tiles are skipped whole, masked
// key by key and left alone, with every option combination. Prefill and chunks have ordered
// positions; one pass reverses the key positions, so that skipping must rest on each tile's
// smallest and largest positions, not on their order.
template <typename T>
void CheckWindowAgainstReference() {
  constexpr Shape kWindowShapes[] = {
      {3, 3, 2, 1, 40, 40},      {17, 17, 4, 2, 33, 24},    {65, 65, 8, 1, 64, 64},
      {63, 129, 4, 4, 128, 128}, {131, 131, 2, 1, 256, 72}, {300, 300, 2, 1, 40, 40},
  };
  uint32_t seed = 200;
  for (const Shape& s : kWindowShapes) {
    const Tensor<T> q(s.q_tokens, s.num_heads, s.head_dim, seed++, 2.0f, 3);
    const Tensor<T> k(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++, 2.0f);
    const Tensor<T> v(s.kv_tokens, s.num_kv_heads, s.value_dim, seed++, 1.0f, 1);
    const std::vector<int64_t> query_pos = PositionRange(s.kv_tokens - s.q_tokens, s.q_tokens);
    std::vector<int64_t> key_pos = PositionRange(0, s.kv_tokens);
    for (const bool reversed : {false, true}) {
      if (reversed) std::reverse(key_pos.begin(), key_pos.end());
      for (const int64_t window : {1, 7, 64, 100}) {
        for (int combination = 0; combination < 8; ++combination) {
          // Under the sanitizer: plain, causal, and ALiBi with RoPE without and with causal.
          if (testing_support::kUnderSanitizer && combination > 1 && combination < 6) continue;
          AttentionOptions options;
          options.window = window;
          options.causal = combination & 1;
          if (combination & 2) options.alibi = Alibi{.num_heads = s.num_heads};
          if (combination & 4)
            options.rope =
                Rope::Default(s.head_dim, 10000.0, RopeLayout::kHalfSplit, s.head_dim / 2 * 2);
          const std::string what = Describe(s, options) + (reversed ? " reversed keys" : "");
          ExpectMatchesReference(options, q, k, v, query_pos, key_pos, what);
        }
      }
    }
  }
}

TEST(AttentionKernel, WindowMatchesReferenceFloat32) { CheckWindowAgainstReference<float>(); }
TEST(AttentionKernel, WindowMatchesReferenceBFloat16) {
  ForEachBf16Arithmetic([] { CheckWindowAgainstReference<BFloat16>(); });
}

// Decode against 8192 cached keys with a window of 4096 (and 100): split-K cuts the keys into
// chunks, and the chunks wholly behind the window see nothing, so their partials must carry no
// weight in the merge. 32 query heads over 8 KV heads as in the benchmark, and a GQA 4 case with
// queries a third of the way in, where without causal the keys ahead stay visible.
template <typename T>
void CheckWindowDecode() {
  struct DecodeShape {
    int64_t q_tokens, kv_tokens, num_heads, num_kv_heads, head_dim;
    bool early_queries;
  };
  constexpr DecodeShape kDecodeShapes[] = {
      {1, 8192, 32, 8, 128, false}, {3, 8192, 8, 2, 72, false}, {2, 8192, 8, 2, 64, true}};
  uint32_t seed = 300;
  for (const DecodeShape& s : kDecodeShapes) {
    const Tensor<T> q(s.q_tokens, s.num_heads, s.head_dim, seed++, 2.0f);
    const Tensor<T> k(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++, 2.0f, 1);
    const Tensor<T> v(s.kv_tokens, s.num_kv_heads, s.head_dim, seed++);
    const std::vector<int64_t> key_pos = PositionRange(0, s.kv_tokens);
    const int64_t first_query = s.early_queries ? s.kv_tokens / 3 : s.kv_tokens - s.q_tokens;
    const std::vector<int64_t> query_pos = PositionRange(first_query, s.q_tokens);
    for (const int64_t window : {4096, 100}) {
      for (const bool causal : {false, true}) {
        AttentionOptions options;
        options.causal = causal;
        options.window = window;
        // Without causal, ALiBi rewards keys ahead by slope x distance, thousands here, where a
        // float32 score keeps few fractional bits; SplitKeyDecode covers that regime, and the
        // window (which only cuts keys behind) adds nothing to it.
        if (causal) options.alibi = Alibi{.num_heads = s.num_heads};
        options.rope = Rope::Default(s.head_dim);
        const std::string what =
            Describe({s.q_tokens, s.kv_tokens, s.num_heads, s.num_kv_heads, s.head_dim, s.head_dim},
                     options) +
            (s.early_queries ? " early queries" : "");
        ExpectMatchesReference(options, q, k, v, query_pos, key_pos, what);
      }
    }
  }
}

TEST(AttentionKernel, WindowDecodeMatchesReferenceFloat32) { CheckWindowDecode<float>(); }
TEST(AttentionKernel, WindowDecodeMatchesReferenceBFloat16) {
  ForEachBf16Arithmetic([] { CheckWindowDecode<BFloat16>(); });
}

// The bfloat16 overload goes through the same validation as float32, before out is touched.
TEST(AttentionKernel, BFloat16OverloadValidatesLikeFloat32) {
  const Tensor<BFloat16> q(4, 8, 8, 41), k(5, 2, 8, 42), v(5, 2, 6, 43);
  Output out(4 * 8 * 6, 7.0f);
  const Heads<float> out_view = Heads<float>::Dense(out.data(), 4, 8, 6);
  Heads<const BFloat16> bad_k = k.view;
  bad_k.head_dim = 4;
  try {
    Attention({}, Heads<const BFloat16>(q.view), bad_k, Heads<const BFloat16>(v.view),
              PositionRange(0, 4), PositionRange(0, 5), out_view);
    ADD_FAILURE() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[attention] k.head_dim must equal q.head_dim (8), got 4");
  }
  for (const float x : out) EXPECT_EQ(x, 7.0f);

  AttentionOptions bad_window;
  bad_window.window = -3;
  try {
    Attention(bad_window, Heads<const BFloat16>(q.view), Heads<const BFloat16>(k.view),
              Heads<const BFloat16>(v.view), PositionRange(0, 4), PositionRange(0, 5), out_view);
    ADD_FAILURE() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[attention] window must be >= 0 (0 means no window), got -3");
  }
  for (const float x : out) EXPECT_EQ(x, 7.0f);
}

// ---------------------------------------------------------------------------------------------
// NaN and inf propagate as in the math (and PyTorch): out_i = sum over the keys query i sees of
// softmax(s)_j v_j. A NaN score (NaN in q, or in a key the query sees) makes the query's whole
// row NaN; a NaN or inf in a value row reaches every query that sees the key, in that column,
// even where its weight underflowed to 0 (0 x NaN = NaN); keys hidden by the mask are never
// part of the sum, so nothing non-finite in them reaches the query.

// Sets element (t, h, d) of x, in the storage and in the reference's widened copy.
template <typename T>
void Poison(Tensor<T>& x, int64_t t, int64_t h, int64_t d, float value) {
  x.view.Row(t, h)[d] = FromFloat<T>(value);
  x.values[static_cast<size_t>((t * x.view.num_heads + h) * x.view.head_dim + d)] =
      ToFloat(FromFloat<T>(value));
}

// got matches want: NaN where want is NaN, inf where want is inf, near elsewhere. Returns how
// many elements of want are not finite.
size_t ExpectNearWithNonFinite(const Output& got, const Output& want, double tolerance,
                               const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  size_t non_finite = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i << " got " << got[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tolerance) << what << " element " << i;
    }
    if (!std::isfinite(want[i])) ++non_finite;
  }
  return non_finite;
}

template <typename T>
void CheckNonFinitePropagates() {
  struct Case {
    const char* name;
    int64_t q_tokens, kv_tokens, first_query;  // prefill when q_tokens == kv_tokens
  };
  // Prefill over several query and key tiles; decode with split keys (600 keys, 2 chunks), at
  // the end of the cache and a third of the way in (causal hides the rest).
  constexpr Case kCases[] = {
      {"prefill", 70, 150, 0}, {"decode", 1, 600, 599}, {"early decode", 2, 600, 200}};
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  struct Poisoned {
    const char* name;
    char tensor;  // 'q', 'k' or 'v'
    float value;
  };
  constexpr Poisoned kPoisons[] = {{"NaN in q", 'q', kNaN},
                                   {"NaN in k", 'k', kNaN},
                                   {"inf in k", 'k', kInf},
                                   {"NaN in v", 'v', kNaN},
                                   {"inf in v", 'v', kInf}};
  uint32_t seed = 900;
  for (const Case& c : kCases) {
    for (const Poisoned& poison : kPoisons) {
      Tensor<T> q(c.q_tokens, 4, 16, seed++, 2.0f, 3), k(c.kv_tokens, 2, 16, seed++, 2.0f),
          v(c.kv_tokens, 2, 8, seed++, 1.0f, 1);
      // The poisoned key sits inside a tile (so that masked and visible keys share it).
      const int64_t key = std::min<int64_t>(c.first_query + c.q_tokens / 2, c.kv_tokens - 1);
      if (poison.tensor == 'q') Poison(q, c.q_tokens - 1, 1, 3, poison.value);
      if (poison.tensor == 'k') Poison(k, key, 0, 5, poison.value);
      if (poison.tensor == 'v') Poison(v, key, 1, 2, poison.value);
      const std::vector<int64_t> key_pos = PositionRange(0, c.kv_tokens);
      const std::vector<int64_t> query_pos = PositionRange(c.first_query, c.q_tokens);
      for (int variant = 0; variant < 3; ++variant) {
        AttentionOptions options;
        options.causal = variant >= 1;
        options.window = variant == 2 ? 40 : 0;
        const std::string what = std::string(c.name) + ", " + poison.name +
                                 (options.causal ? " causal" : " full") +
                                 (options.window ? " window 40" : "");
        const Output want = Reference(options, q, k, v, query_pos, key_pos);
        ForEachSimdTarget([&](int64_t) {
          const size_t non_finite = ExpectNearWithNonFinite(
              Run(options, q, k, v, query_pos, key_pos), want, kTolerance<T>, what);
          // NaN reaches someone (inf in k may only give scores of -inf, weights of 0), and
          // nothing reaches everyone.
          if (std::isnan(poison.value)) EXPECT_GT(non_finite, 0u) << what;
          EXPECT_LT(non_finite, want.size()) << what;
        });
      }
    }
  }
}

TEST(AttentionKernel, NonFiniteInputsPropagateAsInTheMathFloat32) {
  CheckNonFinitePropagates<float>();
}
TEST(AttentionKernel, NonFiniteInputsPropagateAsInTheMathBFloat16) {
  ForEachBf16Arithmetic([] { CheckNonFinitePropagates<BFloat16>(); });
}

// A NaN value row that the query sees reaches it even where its weight underflowed to 0 in
// float32: two keys, scores 0 and -200 (exp(-200) is 0 in float32, 1e-87 in the reference).
TEST(AttentionKernel, NonFiniteValueWithUnderflowedWeightStillReachesTheRow) {
  Tensor<float> q(1, 1, 1, 1), k(2, 1, 1, 2), v(2, 1, 1, 3);
  Poison(q, 0, 0, 0, 1.0f);
  Poison(k, 0, 0, 0, 0.0f);
  Poison(k, 1, 0, 0, -200.0f);
  Poison(v, 0, 0, 0, 0.5f);
  Poison(v, 1, 0, 0, std::numeric_limits<float>::quiet_NaN());
  AttentionOptions options;
  options.scale = 1.0;
  const std::vector<int64_t> query_pos{1}, key_pos{0, 1};
  ForEachSimdTarget([&](int64_t) {
    EXPECT_TRUE(std::isnan(posenc::Run(options, q, k, v, query_pos, key_pos)[0]));
  });
  EXPECT_TRUE(std::isnan(Reference(options, q, k, v, query_pos, key_pos)[0]));
}

// ---------------------------------------------------------------------------------------------
// Chunked attention, query scales and T5's relative bias.

// A T5 bias table [num_buckets, num_heads] with entries in [-2, 2] (a fixed seed).
std::vector<float> BiasTable(int64_t num_buckets, int64_t num_heads, uint32_t seed) {
  std::vector<float> table(static_cast<size_t>(num_buckets * num_heads));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (float& x : table) x = uniform(rng);
  return table;
}

// The option sets of the new layer kinds, for a shape: chunks smaller than a query tile (3),
// between (50), one key tile (64) and larger (100, 1000), alone and with causal and a window;
// Llama 4's query scale with RoPE; T5 encoder (bidirectional) and decoder (causal) buckets, one
// with a table that ends before the longest distances (buckets 16, max_distance 20) and one so
// wide (max_distance 10^5) that farther buckets are looked up one by one.
std::vector<std::pair<std::string, AttentionOptions>> NewLayerKinds(
    const Shape& s, const std::vector<float>& t5_table, const std::vector<float>& small_table) {
  std::vector<std::pair<std::string, AttentionOptions>> kinds;
  const auto add = [&](const std::string& name, const auto& set) {
    AttentionOptions options;
    set(options);
    kinds.emplace_back(name, options);
  };
  const LogFloorQueryScale llama4{.beta = 0.1, .floor_scale = 8.0, .offset = 1};
  const RelativeBias encoder{.buckets = {}, .num_heads = s.num_heads, .table = t5_table};
  RelativeBias decoder = encoder;
  decoder.buckets.bidirectional = false;
  RelativeBias small{.buckets = {.num_buckets = 16, .max_distance = 20},
                     .num_heads = s.num_heads,
                     .table = small_table};
  RelativeBias wide = encoder;
  wide.buckets.max_distance = 100000;
  add("chunk 3", [](AttentionOptions& o) { o.chunk_size = 3; });
  add("chunk 50 causal", [](AttentionOptions& o) {
    o.chunk_size = 50;
    o.causal = true;
  });
  add("chunk 64 causal window 20", [](AttentionOptions& o) {
    o.chunk_size = 64;
    o.causal = true;
    o.window = 20;
  });
  add("chunk 100 window 7", [](AttentionOptions& o) {
    o.chunk_size = 100;
    o.window = 7;
  });
  add("chunk 1000 causal", [](AttentionOptions& o) {
    o.chunk_size = 1000;
    o.causal = true;
  });
  add("query scale rope causal", [&](AttentionOptions& o) {
    o.query_scale = llama4;
    o.rope = Rope::Default(s.head_dim, 10000.0, RopeLayout::kHalfSplit, s.head_dim / 2 * 2);
    o.causal = true;
  });
  add("query scale chunk 50 alibi", [&](AttentionOptions& o) {
    o.query_scale = llama4;
    o.chunk_size = 50;
    o.alibi = Alibi{.num_heads = s.num_heads};
  });
  add("t5 encoder", [&](AttentionOptions& o) {
    o.relative_bias = encoder;
    o.scale = 1.0;
  });
  add("t5 decoder causal chunk 64", [&](AttentionOptions& o) {
    o.relative_bias = decoder;
    o.causal = true;
    o.chunk_size = 64;
  });
  add("t5 16/20 query scale window 30", [&](AttentionOptions& o) {
    o.relative_bias = small;
    o.query_scale = llama4;
    o.window = 30;
  });
  add("t5 max_distance 1e5 causal", [&](AttentionOptions& o) {
    o.relative_bias = wide;
    o.causal = true;
  });
  return kinds;
}

// Each new layer kind against the reference on every shape (odd token counts across tile edges,
// GQA, decode as a single query at the end) and every SIMD target; then again with key and
// query positions spread out (a gap of 97 between tokens, from 3 * 10^9): no key tile is
// contiguous, T5 distances reach past every table, and chunks hold one token or a few.
template <typename T>
void CheckNewLayerKinds() {
  uint32_t seed = 600;
  for (const Shape& s : kShapes) {
    const ShapeInputs<T> in(s, seed);
    const std::vector<float> t5_table = BiasTable(32, s.num_heads, seed++);
    const std::vector<float> small_table = BiasTable(16, s.num_heads, seed++);
    std::vector<int64_t> spread_keys = in.key_pos, spread_queries = in.query_pos;
    for (int64_t& p : spread_keys) p = 3000000000 + 97 * p;
    for (int64_t& p : spread_queries) p = 3000000000 + 97 * p;
    for (const auto& [name, options] : NewLayerKinds(s, t5_table, small_table)) {
      ExpectMatchesReference(options, in.q, in.k, in.v, in.query_pos, in.key_pos,
                             Describe(s, options) + " " + name);
      ExpectMatchesReference(options, in.q, in.k, in.v, spread_queries, spread_keys,
                             Describe(s, options) + " " + name + " spread positions");
    }
  }
}

TEST(AttentionKernel, NewLayerKindsMatchReferenceFloat32) { CheckNewLayerKinds<float>(); }
TEST(AttentionKernel, NewLayerKindsMatchReferenceBFloat16) {
  ForEachBf16Arithmetic([] { CheckNewLayerKinds<BFloat16>(); });
}

// Decode with every new option at once: query t alone against keys 0 .. t equals row t of the
// prefill (the decode path reads the cache in place, token by token), and long decodes split
// into key chunks match the reference.
template <typename T>
void CheckNewLayerKindsDecode() {
  constexpr int64_t kTokens = 77, kHeads = 8, kKvHeads = 2, kDim = 72;
  const Tensor<T> q(kTokens, kHeads, kDim, 61, 2.0f), k(kTokens, kKvHeads, kDim, 62, 2.0f),
      v(kTokens, kKvHeads, kDim, 63);
  const std::vector<float> table = BiasTable(32, kHeads, 64);
  AttentionOptions options;
  options.causal = true;
  options.chunk_size = 24;
  options.query_scale = LogFloorQueryScale{.beta = 0.25, .floor_scale = 8.0};
  options.relative_bias =
      RelativeBias{.buckets = {.bidirectional = false}, .num_heads = kHeads, .table = table};
  const std::vector<int64_t> positions = PositionRange(0, kTokens);
  ForEachSimdTarget([&](int64_t) {
    const Output prefill = Run(options, q, k, v, positions, positions);
    for (int64_t t = kTokens - 3; t < kTokens; ++t) {
      Heads<const T> q_step = q.view, k_cache = k.view, v_cache = v.view;
      q_step.data = q.view.Row(t, 0);
      q_step.tokens = 1;
      k_cache.tokens = v_cache.tokens = t + 1;
      const std::vector<int64_t> cache(positions.begin(), positions.begin() + t + 1);
      const Output decode = Run(options, q_step, k_cache, v_cache, {positions[t]}, cache);
      const Output row(prefill.begin() + t * kHeads * kDim,
                       prefill.begin() + (t + 1) * kHeads * kDim);
      ExpectNear(decode, row, 1e-6, "decode step " + std::to_string(t));
    }
  });

  constexpr int64_t kCache = 8192;
  const Tensor<T> q1(1, 32, 128, 65, 2.0f), k1(kCache, 8, 128, 66, 2.0f, 1), v1(kCache, 8, 128, 67);
  const std::vector<float> table32 = BiasTable(32, 32, 68);
  const std::vector<int64_t> key_pos = PositionRange(0, kCache);
  for (const int64_t chunk : {int64_t{0}, int64_t{8192}, int64_t{1000}}) {
    AttentionOptions decode;
    decode.causal = true;
    decode.chunk_size = chunk;
    decode.query_scale = LogFloorQueryScale{.beta = 0.1, .floor_scale = 1024.0, .offset = 1};
    decode.relative_bias =
        RelativeBias{.buckets = {.bidirectional = false}, .num_heads = 32, .table = table32};
    ExpectMatchesReference(decode, q1, k1, v1, {kCache - 1}, key_pos,
                           "decode 8192 keys chunk " + std::to_string(chunk));
  }
}

TEST(AttentionKernel, NewLayerKindsDecodeFloat32) { CheckNewLayerKindsDecode<float>(); }
TEST(AttentionKernel, NewLayerKindsDecodeBFloat16) {
  ForEachBf16Arithmetic([] { CheckNewLayerKindsDecode<BFloat16>(); });
}

// Keys in another chunk are not part of the sum: NaN and inf in their keys and values reach no
// query (the tiles they fill are skipped or masked), while the chunk's own keys still count.
template <typename T>
void CheckChunkHidesNonFinite() {
  constexpr int64_t kTokens = 150, kChunk = 70;
  Tensor<T> q(kTokens, 2, 16, 71), k(kTokens, 1, 16, 72), v(kTokens, 1, 16, 73);
  const std::vector<int64_t> positions = PositionRange(0, kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    if (t / kChunk != 1) continue;  // poison chunk 1 (tokens 70 .. 139)
    for (int64_t d = 0; d < 16; ++d) {
      k.view.Row(t, 0)[d] = FromFloat<T>(std::numeric_limits<float>::quiet_NaN());
      v.view.Row(t, 0)[d] = FromFloat<T>(std::numeric_limits<float>::infinity());
    }
  }
  AttentionOptions options;
  options.chunk_size = kChunk;
  ForEachSimdTarget([&](int64_t) {
    const Output out = Run(options, q, k, v, positions, positions);
    for (int64_t t = 0; t < kTokens; ++t) {
      const bool poisoned = t / kChunk == 1;
      for (int64_t i = 0; i < 2 * 16; ++i) {
        EXPECT_EQ(std::isfinite(out[t * 2 * 16 + i]), !poisoned) << "token " << t;
      }
    }
  });
}

TEST(AttentionKernel, ChunkHidesNonFiniteKeysOfOtherChunksFloat32) {
  CheckChunkHidesNonFinite<float>();
}
TEST(AttentionKernel, ChunkHidesNonFiniteKeysOfOtherChunksBFloat16) {
  ForEachBf16Arithmetic([] { CheckChunkHidesNonFinite<BFloat16>(); });
}

}  // namespace
}  // namespace posenc
