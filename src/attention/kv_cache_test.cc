// The KV cache (posenc/kv_cache.h): decode through it equals attention over the whole rotated
// sequence, chunks equal one append, a context shift equals rotating the original keys to their
// new positions within float32 rounding per shift (a random walk over 10,000 shifts), attention
// sinks in both position modes, and bad input refused with the cache untouched.
#include "posenc/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "posenc/attention.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;
using testing_support::RandomNormal;

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 64;

Heads<const float> View(const std::vector<float>& x, int64_t tokens, int64_t heads,
                        int64_t offset = 0) {
  return Heads<const float>::Dense(x.data() + offset * heads * kDim, tokens, heads, kDim);
}

KvCacheOptions RopeCache(int64_t capacity) {
  KvCacheOptions o;
  o.capacity = capacity;
  o.kv_heads = kKvHeads;
  o.head_dim = kDim;
  o.rope = Rope::Default(kDim, 500000.0);
  return o;
}

// Prefill in chunks, then a decode step through the cache, against Attention over the whole
// sequence with options.rope (which rotates every key on every call): the same kernels on the
// same rotated values, so the same bits.
TEST(KvCache, DecodeEqualsAttentionOverTheWholeRotatedSequenceOnEveryTarget) {
  const int64_t T = 37;
  const std::vector<float> q = RandomNormal(T * kHeads * kDim, 1),
                           k = RandomNormal(T * kKvHeads * kDim, 2),
                           v = RandomNormal(T * kKvHeads * kDim, 3);
  const std::vector<int64_t> pos = PositionRange(1000, T);
  ForEachSimdTarget([&](int64_t) {
    KvCache<float> cache(RopeCache(64));
    for (int64_t begin = 0; begin < T; begin += 10) {  // chunks of 10, 10, 10, 7
      const int64_t n = std::min<int64_t>(10, T - begin);
      cache.Append(std::span(pos).subspan(begin, n), View(k, n, kKvHeads, begin),
                   View(v, n, kKvHeads, begin));
    }
    ASSERT_EQ(cache.size(), T);
    AttentionOptions plain;
    plain.causal = true;
    std::vector<float> step(kHeads * kDim);
    const std::vector<int64_t> last{pos.back()};
    cache.Attend(plain, View(q, 1, kHeads, T - 1), last,
                 Heads<float>::Dense(step.data(), 1, kHeads, kDim));

    AttentionOptions full = plain;
    full.rope = Rope::Default(kDim, 500000.0);
    std::vector<float> want(T * kHeads * kDim);
    Attention(full, View(q, T, kHeads), View(k, T, kKvHeads), View(v, T, kKvHeads), pos, pos,
              Heads<float>::Dense(want.data(), T, kHeads, kDim));
    for (int64_t j = 0; j < kHeads * kDim; ++j) {
      EXPECT_NEAR(step[j], want[(T - 1) * kHeads * kDim + j], 1e-6) << j;
    }
    // The cached keys are exactly ApplyRope's rotation of the appended ones.
    std::vector<float> rotated(T * kKvHeads * kDim);
    ApplyRope(*full.rope, pos, View(k, T, kKvHeads),
              Heads<float>::Dense(rotated.data(), T, kKvHeads, kDim));
    EXPECT_EQ(std::vector<float>(cache.Keys().data, cache.Keys().data + rotated.size()), rotated);
  });
}

// Relative to the pair's size, the largest difference between the cache's keys and the original
// keys rotated once to the cache's positions.
double WorstKeyError(const KvCache<float>& cache, const std::vector<float>& original,
                     const std::vector<int64_t>& original_index) {
  const Rope rope = *cache.options().rope;
  double worst = 0;
  for (int64_t t = 0; t < cache.size(); ++t) {
    // The truth in double: the original float32 key rotated once, unrounded.
    const float* from = original.data() + original_index[t] * kKvHeads * kDim;
    std::vector<double> want(from, from + kKvHeads * kDim);
    const std::vector<int64_t> p{cache.Positions()[t]};
    ApplyRope(rope, p, Heads<double>::Dense(want.data(), 1, kKvHeads, kDim));
    for (int64_t h = 0; h < kKvHeads; ++h) {
      const float* got = cache.Keys().Row(t, h);
      for (int64_t i = 0; i < kDim / 2; ++i) {
        const double size = std::hypot(want[h * kDim + i], want[h * kDim + i + kDim / 2]);
        for (const int64_t j : {i, i + kDim / 2}) {
          worst = std::max(worst, std::abs(got[j] - want[h * kDim + j]) / size);
        }
      }
    }
  }
  return worst;
}

// llama.cpp's context shift: keep 4, drop 8, the rest move down by 8 in position and slot. After
// one shift the keys are those of the original keys rotated to their new positions within
// float32 rounding; repeated shifts (each a fresh rotation by -n_discard of already rounded keys)
// drift like a random walk of float32 roundings: within 4 x 2^-24 x sqrt(shifts) of the pair.
TEST(KvCache, ContextShiftEqualsRotatingTheOriginalKeysWithinRoundingPerShift) {
  const int64_t T = 40;
  const std::vector<float> k = RandomNormal(T * kKvHeads * kDim, 4),
                           v = RandomNormal(T * kKvHeads * kDim, 5);
  KvCache<float> cache(RopeCache(T));
  std::vector<int64_t> pos = PositionRange(20000, T);
  cache.Append(pos, View(k, T, kKvHeads), View(v, T, kKvHeads));
  cache.ContextShift(4, 8);
  ASSERT_EQ(cache.size(), T - 8);
  std::vector<int64_t> index;  // which appended token each slot holds
  for (int64_t t = 0; t < T; ++t) {
    if (t < 4 || t >= 12) index.push_back(t);
  }
  for (int64_t t = 0; t < cache.size(); ++t) {
    EXPECT_EQ(cache.Positions()[t], t < 4 ? 20000 + t : 20000 + index[t] - 8) << t;
    // Values move with their keys, untouched.
    EXPECT_EQ(cache.Values().Row(t, 1)[3], v[(index[t] * kKvHeads + 1) * kDim + 3]) << t;
  }
  const double one = WorstKeyError(cache, k, index);
  EXPECT_LT(one, 4 * std::ldexp(1.0, -24));
  std::printf("context shift drift (relative to the pair): 1 shift %.3g", one);

  std::printf("\n");
}

// The drift of repeated shifts: every shift re-rotates already rounded keys by a fresh exact
// angle, so each adds float32 rounding and the errors add up like a random walk. The same keys
// shifted by -1 at a time, 10,000 times (positions 30000 .. 20000), stay within
// 4 x 2^-24 x sqrt(shifts) of the pair against one rotation of the original keys.
TEST(KvCache, RepeatedShiftsDriftNoFasterThanARandomWalk) {
  const int64_t T = 16;
  const std::vector<float> k = RandomNormal(T * kKvHeads * kDim, 13),
                           v = RandomNormal(T * kKvHeads * kDim, 14);
  KvCache<float> cache(RopeCache(T));
  cache.Append(PositionRange(30000, T), View(k, T, kKvHeads), View(v, T, kKvHeads));
  std::vector<int64_t> index;
  for (int64_t t = 0; t < T; ++t) index.push_back(t);
  int64_t shifts = 0;
  std::printf("drift of repeated shifts by -1 (relative to the pair):");
  for (const int64_t target : {1, 100, 10000}) {
    for (; shifts < target; ++shifts) cache.ShiftPositions(0, T, -1);
    const double drift = WorstKeyError(cache, k, index);
    std::printf(" %d: %.3g (%.2f x 2^-24 x sqrt)", static_cast<int>(target), drift,
                drift / std::ldexp(1.0, -24) / std::sqrt(static_cast<double>(target)));
    EXPECT_LT(drift, 4 * std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(target)));
  }
  std::printf("\n");
  EXPECT_EQ(cache.Positions()[0], 20000);
}

TEST(KvCache, ContextShiftKeepsScoresOfTheShiftedPositions) {
  // Scores of a query against the shifted cache equal those computed from scratch at the new
  // positions: attention outputs agree to float32 rounding.
  const int64_t T = 24;
  const std::vector<float> q = RandomNormal(kHeads * kDim, 6),
                           k = RandomNormal(T * kKvHeads * kDim, 7),
                           v = RandomNormal(T * kKvHeads * kDim, 8);
  KvCache<float> cache(RopeCache(T));
  const std::vector<int64_t> pos = PositionRange(0, T);
  cache.Append(pos, View(k, T, kKvHeads), View(v, T, kKvHeads));
  cache.ContextShift(2, 6);
  AttentionOptions options;
  options.causal = true;
  std::vector<float> got(kHeads * kDim), want(kHeads * kDim);
  const std::vector<int64_t> qpos{T - 6};
  cache.Attend(options, View(q, 1, kHeads), qpos, Heads<float>::Dense(got.data(), 1, kHeads, kDim));
  // From scratch: the kept tokens 0, 1 and 8..23 at positions 0, 1, 2..17.
  std::vector<float> kk, vv;
  for (int64_t t = 0; t < T; ++t) {
    if (t >= 2 && t < 8) continue;
    kk.insert(kk.end(), k.begin() + t * kKvHeads * kDim, k.begin() + (t + 1) * kKvHeads * kDim);
    vv.insert(vv.end(), v.begin() + t * kKvHeads * kDim, v.begin() + (t + 1) * kKvHeads * kDim);
  }
  AttentionOptions scratch = options;
  scratch.rope = *cache.options().rope;
  Attention(scratch, View(q, 1, kHeads), View(kk, T - 6, kKvHeads), View(vv, T - 6, kKvHeads), qpos,
            PositionRange(0, T - 6), Heads<float>::Dense(want.data(), 1, kHeads, kDim));
  for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-5) << j;
}

// StreamingLLM: 2 sinks and a window of 6. In cache mode the positions are the slots after every
// roll; in text mode they are the text's.
TEST(KvCache, SinkWindowRollsInBothPositionModes) {
  const std::vector<float> k = RandomNormal(30 * kKvHeads * kDim, 9),
                           v = RandomNormal(30 * kKvHeads * kDim, 10);
  for (const SinkPositions mode : {SinkPositions::kText, SinkPositions::kCache}) {
    KvCache<float> cache(RopeCache(8));
    for (int64_t t = 0; t < 30; ++t) {
      RollSinkWindow(cache, 2, 6, 1, mode);
      const std::vector<int64_t> p{mode == SinkPositions::kText ? t : cache.size()};
      cache.Append(p, View(k, 1, kKvHeads, t), View(v, 1, kKvHeads, t));
    }
    ASSERT_EQ(cache.size(), 8);
    // Values tell which tokens stayed: 0, 1 and the last six, 24..29.
    for (int64_t s = 0; s < 8; ++s) {
      const int64_t token = s < 2 ? s : 22 + s;
      EXPECT_EQ(cache.Values().Row(s, 0)[0], v[token * kKvHeads * kDim]) << s;
      EXPECT_EQ(cache.Positions()[s], mode == SinkPositions::kText ? token : s) << s;
    }
  }
}

// bfloat16 storage: the cached keys are the bfloat16 ApplyRope of the appended ones, so decode
// through the cache equals bfloat16 attention over the whole sequence.
TEST(KvCache, BFloat16DecodeEqualsAttentionOverTheWholeSequence) {
  const int64_t T = 21;
  auto bf16 = [](const std::vector<float>& x) {
    std::vector<BFloat16> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = BFloat16::FromFloat(x[i]);
    return out;
  };
  const std::vector<BFloat16> q = bf16(RandomNormal(T * kHeads * kDim, 15)),
                              k = bf16(RandomNormal(T * kKvHeads * kDim, 16)),
                              v = bf16(RandomNormal(T * kKvHeads * kDim, 17));
  auto view = [](const std::vector<BFloat16>& x, int64_t tokens, int64_t heads, int64_t offset) {
    return Heads<const BFloat16>::Dense(x.data() + offset * heads * kDim, tokens, heads, kDim);
  };
  const std::vector<int64_t> pos = PositionRange(7, T);
  KvCache<BFloat16> cache(RopeCache(T));
  cache.Append(pos, view(k, T, kKvHeads, 0), view(v, T, kKvHeads, 0));
  AttentionOptions options;
  options.causal = true;
  std::vector<float> step(kHeads * kDim), want(T * kHeads * kDim);
  const std::vector<int64_t> last{pos.back()};
  cache.Attend(options, view(q, 1, kHeads, T - 1), last,
               Heads<float>::Dense(step.data(), 1, kHeads, kDim));
  options.rope = *cache.options().rope;
  Attention(options, view(q, T, kHeads, 0), view(k, T, kKvHeads, 0), view(v, T, kKvHeads, 0), pos,
            pos, Heads<float>::Dense(want.data(), T, kHeads, kDim));
  for (int64_t j = 0; j < kHeads * kDim; ++j) {
    EXPECT_NEAR(step[j], want[(T - 1) * kHeads * kDim + j], 1e-6) << j;
  }
}

// An M-RoPE cache: keys rotated on append by their streams; a decode step rotates its query by
// its streams; the result equals Attention with options.mrope over the whole sequence.
TEST(KvCache, MRopeCacheDecodesFromStreams) {
  const int64_t T = 12;
  const std::vector<float> q = RandomNormal(T * kHeads * kDim, 18),
                           k = RandomNormal(T * kKvHeads * kDim, 19),
                           v = RandomNormal(T * kKvHeads * kDim, 20);
  // Text 0..2, a 2 x 3 image at (3, 3 + row, 3 + col), text 6, 7, 8.
  std::vector<int64_t> streams(3 * T);
  for (int64_t t = 0; t < T; ++t) {
    const bool image = t >= 3 && t < 9;
    const int64_t text = t < 3 ? t : t - 3;
    streams[t] = image ? 3 : text;
    streams[T + t] = image ? 3 + (t - 3) / 3 : text;
    streams[2 * T + t] = image ? 3 + (t - 3) % 3 : text;
  }
  const std::vector<int64_t> order = PositionRange(0, T);
  KvCacheOptions o = RopeCache(T);
  o.rope.reset();
  o.mrope = MRope::Sections(Rope::Default(kDim, 1e6), std::vector<int64_t>{8, 12, 12},
                            MropeSections::kBlocks);
  KvCache<float> cache(o);
  const PositionStreams all = PositionStreams::Dense(streams.data(), 3, T);
  cache.Append(order, all, View(k, T, kKvHeads), View(v, T, kKvHeads));
  AttentionOptions options;
  options.causal = true;
  std::vector<float> step(kHeads * kDim), want(T * kHeads * kDim);
  const std::vector<int64_t> last{T - 1};
  const PositionStreams last_streams{streams.data() + T - 1, 3, 1, T, 1};
  cache.Attend(options, View(q, 1, kHeads, T - 1), last, last_streams,
               Heads<float>::Dense(step.data(), 1, kHeads, kDim));
  options.mrope = *o.mrope;
  options.mrope_query_pos = options.mrope_key_pos = all;
  Attention(options, View(q, T, kHeads), View(k, T, kKvHeads), View(v, T, kKvHeads), order, order,
            Heads<float>::Dense(want.data(), T, kHeads, kDim));
  for (int64_t j = 0; j < kHeads * kDim; ++j) {
    EXPECT_NEAR(step[j], want[(T - 1) * kHeads * kDim + j], 1e-6) << j;
  }
}

TEST(KvCacheErrors, BadInputLeavesTheCacheUntouched) {
  const std::vector<float> k = RandomNormal(8 * kKvHeads * kDim, 11),
                           v = RandomNormal(8 * kKvHeads * kDim, 12);
  KvCache<float> cache(RopeCache(6));
  cache.Append(PositionRange(0, 4), View(k, 4, kKvHeads), View(v, 4, kKvHeads));
  const std::vector<float> keys(cache.Keys().data, cache.Keys().data + 4 * kKvHeads * kDim);
  ExpectError(
      [&] { cache.Append(PositionRange(4, 3), View(k, 3, kKvHeads), View(v, 3, kKvHeads)); },
      "[kv_cache] k.tokens must fit the free slots (capacity 6 - size 4 = 2), got 3");
  ExpectError([&] { cache.ContextShift(2, 3); },
              "[kv_cache] n_keep + n_discard must be <= size (4), got 5");
  ExpectError([&] { cache.ContextShift(0, 0); }, "[kv_cache] n_discard must be >= 1, got 0");
  ExpectError([&] { cache.ShiftPositions(1, 3, -2); },
              "[kv_cache] positions[1] + delta must be >= 0, got -1");
  const std::vector<int64_t> bad{-1};
  ExpectError([&] { cache.Append(bad, View(k, 1, kKvHeads), View(v, 1, kKvHeads)); },
              "[kv_cache] positions[0] must be >= 0, got -1");
  ExpectError([&] { RollSinkWindow(cache, 1, 0, 1, SinkPositions::kText); },
              "[sink_window] window must be >= 1, got 0");
  AttentionOptions with_rope;
  with_rope.rope = Rope::Default(kDim);
  std::vector<float> out(kHeads * kDim);
  const std::vector<int64_t> qpos{4};
  ExpectError(
      [&] {
        cache.Attend(with_rope, View(k, 1, kHeads), qpos,
                     Heads<float>::Dense(out.data(), 1, kHeads, kDim));
      },
      "[kv_cache] options.rope must be unset: the cache rotates with its own scheme, and its keys "
      "are rotated already, got set");
  EXPECT_EQ(cache.size(), 4);
  EXPECT_EQ(std::vector<float>(cache.Keys().data, cache.Keys().data + keys.size()), keys);
  EXPECT_EQ(cache.Positions()[3], 3);
  KvCacheOptions zero = RopeCache(0);
  ExpectError([&] { KvCache<float> c(zero); }, "[kv_cache] capacity must be >= 1, got 0");
}

}  // namespace
}  // namespace posenc
