#include "posenc/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/positions.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;
using testing_support::RandomNormal;

using std::numbers::pi;

// A Rope with explicit frequencies (no scaling rule), attention factor 1.
Rope MakeRope(int64_t head_dim, int64_t rotary_dim, std::vector<double> inv_freq,
              RopeLayout layout = RopeLayout::kHalfSplit) {
  Rope rope;
  rope.head_dim = head_dim;
  rope.rotary_dim = rotary_dim;
  rope.layout = layout;
  rope.inv_freq = std::move(inv_freq);
  return rope;
}

double Dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// Bit-exact equality of two float buffers (distinguishes -0 and 0, compares NaN payloads).
bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr RopeLayout kLayouts[] = {RopeLayout::kHalfSplit, RopeLayout::kInterleaved};

// ---------------------------------------------------------------------------------------------
// Worked examples.

TEST(RopeApply, QuarterTurnOfTwoOneGivesMinusOneTwo) {
  // (2, 1) turned by +90 degrees is (-1, 2); both have norm sqrt(5) = 2.2360679774997896.
  for (RopeLayout layout : kLayouts) {
    const Rope rope = MakeRope(2, 2, {pi / 2}, layout);
    std::vector<float> x{2.0f, 1.0f};
    const std::vector<int64_t> positions{1};
    EXPECT_NEAR(std::hypot(double{x[0]}, double{x[1]}), 2.2360679774997896, 1e-15);
    ApplyRope(rope, positions, Heads<float>::Dense(x.data(), 1, 1, 2));
    // cos(pi/2) is 6e-17 in double, far below half a float32 ulp of 1 and 2.
    EXPECT_FLOAT_EQ(x[0], -1.0f);
    EXPECT_FLOAT_EQ(x[1], 2.0f);
    EXPECT_NEAR(std::hypot(double{x[0]}, double{x[1]}), 2.2360679774997896, 1e-15);
    // And back: a quarter turn the other way.
    ApplyRope(rope, positions, Heads<float>::Dense(x.data(), 1, 1, 2), RopeDirection::kInverse);
    EXPECT_FLOAT_EQ(x[0], 2.0f);
    EXPECT_FLOAT_EQ(x[1], 1.0f);
  }
}

TEST(RopeApply, LayoutsPairTheDocumentedFeatures) {
  // head_dim 4, pair 0 turned a quarter turn, pair 1 a half turn, x = [1, 2, 3, 4].
  //   half-split pairs (x0, x2) = (1, 3) -> (-3, 1) and (x1, x3) = (2, 4) -> (-2, -4):
  //     [-3, -2, 1, -4]
  //   interleaved pairs (x0, x1) = (1, 2) -> (-2, 1) and (x2, x3) = (3, 4) -> (-3, -4):
  //     [-2, 1, -3, -4]
  const std::vector<int64_t> positions{1};
  std::vector<float> half{1, 2, 3, 4}, inter{1, 2, 3, 4};
  ApplyRope(MakeRope(4, 4, {pi / 2, pi}, RopeLayout::kHalfSplit), positions,
            Heads<float>::Dense(half.data(), 1, 1, 4));
  ApplyRope(MakeRope(4, 4, {pi / 2, pi}, RopeLayout::kInterleaved), positions,
            Heads<float>::Dense(inter.data(), 1, 1, 4));
  const float want_half[] = {-3, -2, 1, -4}, want_inter[] = {-2, 1, -3, -4};
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(half[d], want_half[d], 1e-6) << d;
    EXPECT_NEAR(inter[d], want_inter[d], 1e-6) << d;
  }
}

TEST(RopeApply, PositionZeroIsTheIdentity) {
  const Rope rope = Rope::Default(8);
  std::vector<float> x = RandomNormal(2 * 3 * 8, 3);
  const std::vector<float> before = x;
  const std::vector<int64_t> positions{0, 0};
  ApplyRope(rope, positions, Heads<float>::Dense(x.data(), 2, 3, 8));
  EXPECT_TRUE(BitEqual(x, before));  // cos 0 = 1 and sin 0 = 0 exactly
}

TEST(RopeApply, AttentionFactorScalesEveryRotatedFeature) {
  // Both cos and sin carry the factor, so the rotated features scale by it; the pass-through
  // features do not.
  Rope rope = Rope::Default(8, 10000.0, RopeLayout::kHalfSplit, 4);
  const std::vector<float> x = RandomNormal(8, 11);
  const std::vector<int64_t> positions{37};
  std::vector<float> plain(8), scaled(8);
  ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 1, 1, 8),
            Heads<float>::Dense(plain.data(), 1, 1, 8));
  rope.attention_factor = 1.7;
  ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 1, 1, 8),
            Heads<float>::Dense(scaled.data(), 1, 1, 8));
  for (int d = 0; d < 4; ++d) EXPECT_NEAR(scaled[d], 1.7 * plain[d], 1e-6) << d;
  for (int d = 4; d < 8; ++d) EXPECT_EQ(scaled[d], x[d]) << d;
}

// ---------------------------------------------------------------------------------------------
// Properties.

TEST(RopeApply, PreservesTheNormOfEveryPair) {
  std::mt19937 gen(20240601);
  std::uniform_int_distribution<int64_t> pos_dist(0, 5'000'000);
  for (int trial = 0; trial < 50; ++trial) {
    const RopeLayout layout = kLayouts[trial % 2];
    const int64_t head_dim = 2 * (1 + trial % 40), tokens = 1 + trial % 5, heads = 1 + trial % 3;
    const Rope rope = Rope::Default(head_dim, 10000.0, layout);
    std::vector<int64_t> positions(tokens);
    for (auto& p : positions) p = pos_dist(gen);
    const std::vector<float> x = RandomNormal(tokens * heads * head_dim, 1000 + trial);
    std::vector<float> y(x.size());
    ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), tokens, heads, head_dim),
              Heads<float>::Dense(y.data(), tokens, heads, head_dim));
    const int64_t half = head_dim / 2;
    for (int64_t row = 0; row < tokens * heads; ++row) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t j0 = layout == RopeLayout::kHalfSplit ? i : 2 * i;
        const int64_t j1 = layout == RopeLayout::kHalfSplit ? i + half : 2 * i + 1;
        const float* a = &x[row * head_dim];
        const float* b = &y[row * head_dim];
        const double before = std::hypot(double{a[j0]}, double{a[j1]});
        const double after = std::hypot(double{b[j0]}, double{b[j1]});
        // Only the two float32 output roundings (each <= 2^-24 relative) separate the norms.
        ASSERT_NEAR(after, before, 2e-7 * before + 1e-30) << "trial " << trial << " pair " << i;
      }
    }
  }
}

// q_m . k_n after rotation, q at position m and k at position n.
double Score(const Rope& rope, const std::vector<float>& q, const std::vector<float>& k, int64_t m,
             int64_t n) {
  const int64_t d = rope.head_dim;
  std::vector<float> qr(d), kr(d);
  const std::vector<int64_t> pm{m}, pn{n};
  ApplyRope(rope, pm, Heads<const float>::Dense(q.data(), 1, 1, d),
            Heads<float>::Dense(qr.data(), 1, 1, d));
  ApplyRope(rope, pn, Heads<const float>::Dense(k.data(), 1, 1, d),
            Heads<float>::Dense(kr.data(), 1, 1, d));
  return Dot(qr.data(), kr.data(), d);
}

TEST(RopeApply, ScoreDependsOnlyOnTheRelativePosition) {
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(16, 10000.0, layout);
    const std::vector<float> q = RandomNormal(16, 5), k = RandomNormal(16, 6);
    const double s = Score(rope, q, k, 5, 2);
    // The float32 outputs carry ~6e-8 relative rounding; over 16 terms of size ~1 that is well
    // below 1e-5. Double angles keep this true at position one million.
    EXPECT_NEAR(Score(rope, q, k, 105, 102), s, 1e-5);
    EXPECT_NEAR(Score(rope, q, k, 1005, 1002), s, 1e-5);
    EXPECT_NEAR(Score(rope, q, k, 1000005, 1000002), s, 1e-5);
    // A different offset gives a different score.
    EXPECT_GT(std::abs(Score(rope, q, k, 7, 2) - s), 1e-2);
    // Without rotation, the score is the plain dot product.
    EXPECT_NEAR(Score(rope, q, k, 0, 0), Dot(q.data(), k.data(), 16), 1e-6);
  }
}

TEST(RopeApply, InverseUndoesForward) {
  std::mt19937 gen(77);
  std::uniform_int_distribution<int64_t> pos_dist(0, 1 << 24);
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(64, 500000.0, layout, 48);
    std::vector<int64_t> positions(7);
    for (auto& p : positions) p = pos_dist(gen);
    const std::vector<float> x = RandomNormal(7 * 3 * 64, 8);
    std::vector<float> y = x;
    auto view = Heads<float>::Dense(y.data(), 7, 3, 64);
    ApplyRope(rope, positions, view, RopeDirection::kForward);
    ApplyRope(rope, positions, view, RopeDirection::kInverse);
    // Two float32 roundings per feature, each <= 2^-24 relative to values of size < 5.
    for (size_t e = 0; e < x.size(); ++e) ASSERT_NEAR(y[e], x[e], 1e-6) << e;
  }
}

TEST(RopeApply, InverseIsTheTransposeEvenWithAnAttentionFactor) {
  // <a R x, y> == <x, a R^T y> for every x and y: kInverse is the backward pass of kForward.
  for (RopeLayout layout : kLayouts) {
    Rope rope = Rope::Default(32, 10000.0, layout, 24);
    rope.attention_factor = 1.7;
    const std::vector<int64_t> positions{0, 3, 4096, 131071, 2000000};
    const int64_t n = 5 * 2 * 32;
    const std::vector<float> x = RandomNormal(n, 21), y = RandomNormal(n, 22);
    std::vector<float> rx(n), rty(n);
    ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 5, 2, 32),
              Heads<float>::Dense(rx.data(), 5, 2, 32), RopeDirection::kForward);
    ApplyRope(rope, positions, Heads<const float>::Dense(y.data(), 5, 2, 32),
              Heads<float>::Dense(rty.data(), 5, 2, 32), RopeDirection::kInverse);
    // Pass-through features (24..31) are the identity in both directions, which is its own
    // transpose, so the identity holds over whole vectors. Each side differs from the exact
    // value only by rounding the rotated vector to float32: sum |y_e| |d rx_e| <= 2^-24 a |x| |y|
    // by Cauchy-Schwarz, and the same for the right side.
    double lhs = 0, rhs = 0, xx = 0, yy = 0;
    for (int64_t e = 0; e < n; ++e) {
      lhs += double{rx[e]} * y[e];
      rhs += double{x[e]} * rty[e];
      xx += double{x[e]} * x[e];
      yy += double{y[e]} * y[e];
    }
    EXPECT_NEAR(lhs, rhs, 2.02 * std::ldexp(1.7, -24) * std::sqrt(xx * yy));
    EXPECT_GT(std::abs(lhs), 1.0);  // not trivially zero
    // Round trip with the factor gives a^2 x ...
    std::vector<float> back(n);
    ApplyRope(rope, positions, Heads<const float>::Dense(rx.data(), 5, 2, 32),
              Heads<float>::Dense(back.data(), 5, 2, 32), RopeDirection::kInverse);
    for (int64_t row = 0; row < 10; ++row) {
      for (int64_t d = 0; d < 24; ++d) {
        ASSERT_NEAR(back[row * 32 + d], 1.7 * 1.7 * x[row * 32 + d], 2e-6);
      }
    }
    // ... and the header's recipe, kInverse with attention_factor 1/a, undoes it.
    Rope undo = rope;
    undo.attention_factor = 1.0 / 1.7;
    ApplyRope(undo, positions, Heads<const float>::Dense(rx.data(), 5, 2, 32),
              Heads<float>::Dense(back.data(), 5, 2, 32), RopeDirection::kInverse);
    for (int64_t e = 0; e < n; ++e) ASSERT_NEAR(back[e], x[e], 1e-6) << e;
  }
}

TEST(RopeApply, InPlaceEqualsOutOfPlace) {
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(40, 10000.0, layout, 16);
    const std::vector<int64_t> positions{0, 1, 2, 7, 100, 4095, 4096, 32767, 131071};
    const std::vector<float> x = RandomNormal(9 * 4 * 40, 31);
    std::vector<float> out(x.size()), in_place = x, reference = x;
    ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 9, 4, 40),
              Heads<float>::Dense(out.data(), 9, 4, 40));
    ApplyRope(rope, positions, Heads<float>::Dense(in_place.data(), 9, 4, 40));
    EXPECT_TRUE(BitEqual(out, in_place));
    // The reference twin, in place and out of place, is one computation too. (The SIMD kernel
    // computes in float32; rope_kernels_test.cc holds it to the twin within a tolerance.)
    std::vector<float> reference_out(x.size());
    ApplyRopeReference(rope, positions, Heads<const float>::Dense(x.data(), 9, 4, 40),
                       Heads<float>::Dense(reference_out.data(), 9, 4, 40),
                       RopeDirection::kForward);
    auto view = Heads<float>::Dense(reference.data(), 9, 4, 40);
    ApplyRopeReference(rope, positions, view, view, RopeDirection::kForward);
    EXPECT_TRUE(BitEqual(reference_out, reference));
  }
}

TEST(RopeApply, QAndKWithDifferentHeadCountsEqualTwoSeparateCalls) {
  // Grouped-query attention: 8 query heads, 2 key heads, one call.
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(16, 10000.0, layout);
    const std::vector<int64_t> positions{3, 1, 4, 1, 5};
    const std::vector<float> q0 = RandomNormal(5 * 8 * 16, 41), k0 = RandomNormal(5 * 2 * 16, 42);

    std::vector<float> q = q0, k = k0;
    ApplyRope(rope, positions, Heads<float>::Dense(q.data(), 5, 8, 16),
              Heads<float>::Dense(k.data(), 5, 2, 16));
    std::vector<float> q1 = q0, k1 = k0;
    ApplyRope(rope, positions, Heads<float>::Dense(q1.data(), 5, 8, 16));
    ApplyRope(rope, positions, Heads<float>::Dense(k1.data(), 5, 2, 16));
    EXPECT_TRUE(BitEqual(q, q1));
    EXPECT_TRUE(BitEqual(k, k1));
    EXPECT_FALSE(BitEqual(q, q0));

    std::vector<float> q2(q0.size()), k2(k0.size());
    ApplyRope(rope, positions, Heads<const float>::Dense(q0.data(), 5, 8, 16),
              Heads<float>::Dense(q2.data(), 5, 8, 16),
              Heads<const float>::Dense(k0.data(), 5, 2, 16),
              Heads<float>::Dense(k2.data(), 5, 2, 16));
    EXPECT_TRUE(BitEqual(q2, q1));
    EXPECT_TRUE(BitEqual(k2, k1));
  }
}

TEST(RopeApply, FeaturesPastRotaryDimPassThrough) {
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(80, 10000.0, layout, 32);  // Phi-2: 32 of 80
    const std::vector<int64_t> positions{5, 900000};
    const std::vector<float> x = RandomNormal(2 * 2 * 80, 51);
    std::vector<float> in_place = x;
    std::vector<float> out(x.size(), -7.0f);
    ApplyRope(rope, positions, Heads<float>::Dense(in_place.data(), 2, 2, 80));
    ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 2, 2, 80),
              Heads<float>::Dense(out.data(), 2, 2, 80));
    for (int64_t row = 0; row < 4; ++row) {
      bool rotated_changed = false;
      for (int64_t d = 0; d < 80; ++d) {
        const int64_t e = row * 80 + d;
        if (d >= 32) {
          EXPECT_EQ(in_place[e], x[e]) << e;
          EXPECT_EQ(out[e], x[e]) << e;  // copied by the out-of-place call
        } else {
          rotated_changed |= in_place[e] != x[e];
        }
      }
      EXPECT_TRUE(rotated_changed) << row;
    }
  }
}

TEST(RopeApply, StridedViewsMatchDense) {
  constexpr int64_t T = 6, H = 3, D = 12;
  constexpr float kSentinel = 12345.0f;
  for (RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(D, 10000.0, layout, 8);
    const std::vector<int64_t> positions{0, 9, 2, 70000, 4, 4};
    const std::vector<float> x = RandomNormal(T * H * D, 61);
    std::vector<float> dense = x;
    ApplyRope(rope, positions, Heads<float>::Dense(dense.data(), T, H, D));

    // Heads-outer, as Hugging Face's [heads, seq, dim].
    std::vector<float> hf(H * T * D);
    Heads<float> hf_view{hf.data(), T, H, D, D, T * D};
    // Padded: each row padded by 3, each token by 5 more.
    const int64_t hs = D + 3, ts = H * hs + 5;
    std::vector<float> padded(T * ts, kSentinel), padded_out(T * ts, kSentinel);
    Heads<float> pad_view{padded.data(), T, H, D, ts, hs};
    Heads<float> pad_out{padded_out.data(), T, H, D, ts, hs};
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        std::memcpy(hf_view.Row(t, h), &x[(t * H + h) * D], D * sizeof(float));
        std::memcpy(pad_view.Row(t, h), &x[(t * H + h) * D], D * sizeof(float));
      }
    }
    ApplyRope(rope, positions, hf_view);
    ApplyRope(rope, positions, Heads<const float>(pad_view), pad_out);
    ApplyRope(rope, positions, pad_view);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float* want = &dense[(t * H + h) * D];
        EXPECT_EQ(std::memcmp(hf_view.Row(t, h), want, D * sizeof(float)), 0) << t << "," << h;
        EXPECT_EQ(std::memcmp(pad_view.Row(t, h), want, D * sizeof(float)), 0) << t << "," << h;
        EXPECT_EQ(std::memcmp(pad_out.Row(t, h), want, D * sizeof(float)), 0) << t << "," << h;
      }
    }
    // Padding is never written.
    size_t untouched = 0;
    for (size_t e = 0; e < padded.size(); ++e) {
      untouched += padded[e] == kSentinel;
      EXPECT_EQ(padded[e] == kSentinel, padded_out[e] == kSentinel) << e;
    }
    EXPECT_EQ(untouched, padded.size() - T * H * D);
  }
}

TEST(RopeApply, FusedQkvSlicesRotateInPlace) {
  // One [tokens, 4 + 2 + 2 heads, dim] buffer: q, k and v are interleaved per token. Their hulls
  // overlap but no row is shared, so the in-place q, k call is accepted.
  constexpr int64_t T = 4, D = 8, QH = 4, KH = 2, W = (QH + 2 * KH) * D;
  const Rope rope = Rope::Default(D);
  const std::vector<int64_t> positions{10, 11, 12, 13};
  const std::vector<float> qkv0 = RandomNormal(T * W, 71);
  std::vector<float> qkv = qkv0;
  Heads<float> q{qkv.data(), T, QH, D, W, D};
  Heads<float> k{qkv.data() + QH * D, T, KH, D, W, D};
  ApplyRope(rope, positions, q, k);

  std::vector<float> q_dense(T * QH * D), k_dense(T * KH * D);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(&q_dense[t * QH * D], &qkv0[t * W], QH * D * sizeof(float));
    std::memcpy(&k_dense[t * KH * D], &qkv0[t * W + QH * D], KH * D * sizeof(float));
  }
  ApplyRope(rope, positions, Heads<float>::Dense(q_dense.data(), T, QH, D));
  ApplyRope(rope, positions, Heads<float>::Dense(k_dense.data(), T, KH, D));
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(std::memcmp(&qkv[t * W], &q_dense[t * QH * D], QH * D * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(&qkv[t * W + QH * D], &k_dense[t * KH * D], KH * D * sizeof(float)), 0);
    // v is untouched.
    EXPECT_EQ(std::memcmp(&qkv[t * W + (QH + KH) * D], &qkv0[t * W + (QH + KH) * D],
                          KH * D * sizeof(float)),
              0);
  }
}

// ---------------------------------------------------------------------------------------------
// Angles.

TEST(RopeAngle, AccurateAtPositionsInTheMillions) {
  // Against long double (64-bit significand). The one double product p * w is off by at most
  // half an ulp of the angle: for p * w < 2^24 that is <= 2^-30 = 9.3e-10 rad; cos and sin add
  // ~1e-16 and the long double reference ~1e-12. So 1e-9 holds for every angle below 2^24.
  // (A float32 product, as in Hugging Face, is off by up to 2^-24 * p * w: 1.0 rad at 2^24.)
  const double freqs[] = {1.0,  // the fastest plain-RoPE frequency, base^0
                          0.8146172165870667,
                          0.5,
                          0.1,
                          1e-4,
                          3.0517578125e-5,
                          pi / 4};
  std::vector<int64_t> positions{0,      1,       7,       4095,          4096,   32767,
                                 131071, 1000000, 9999991, (1 << 24) - 1, 1 << 24};
  std::mt19937 gen(99);
  std::uniform_int_distribution<int64_t> dist(0, 1 << 24);
  for (int i = 0; i < 200; ++i) positions.push_back(dist(gen));
  for (double w : freqs) {
    for (int64_t p : positions) {
      const long double angle = static_cast<long double>(p) * static_cast<long double>(w);
      const CosSin cs = RopeAngle(p, w);
      ASSERT_NEAR(cs.cos, static_cast<double>(std::cos(angle)), 1e-9) << p << " " << w;
      ASSERT_NEAR(cs.sin, static_cast<double>(std::sin(angle)), 1e-9) << p << " " << w;
    }
  }
}

TEST(RopeAngle, ExactAtZeroAndNotScaledByAttentionFactor) {
  const CosSin zero = RopeAngle(0, 0.5);
  EXPECT_EQ(zero.cos, 1.0);
  EXPECT_EQ(zero.sin, 0.0);
  const CosSin frozen = RopeAngle(123456789, 0.0);  // a zero frequency never turns
  EXPECT_EQ(frozen.cos, 1.0);
  EXPECT_EQ(frozen.sin, 0.0);
}

// ---------------------------------------------------------------------------------------------
// Frequencies and construction.

TEST(RopeDefault, InverseFrequenciesArePowersOfTheBase) {
  const std::vector<double> f = DefaultInvFreq(10000.0, 8);  // 10000^(-i/4)
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[1], 0.1);
  EXPECT_DOUBLE_EQ(f[2], 0.01);
  EXPECT_DOUBLE_EQ(f[3], 0.001);

  const Rope rope = Rope::Default(128, 500000.0, RopeLayout::kInterleaved);
  EXPECT_EQ(rope.head_dim, 128);
  EXPECT_EQ(rope.rotary_dim, 128);
  EXPECT_EQ(rope.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(rope.attention_factor, 1.0);
  ASSERT_EQ(rope.inv_freq.size(), 64u);
  EXPECT_DOUBLE_EQ(rope.inv_freq[32], 1.0 / std::sqrt(500000.0));  // 500000^(-64/128)

  const Rope partial = Rope::Default(80, 10000.0, RopeLayout::kHalfSplit, 32);
  EXPECT_EQ(partial.rotary_dim, 32);
  EXPECT_EQ(partial.inv_freq.size(), 16u);
  EXPECT_NO_THROW(partial.Validate());
}

// ---------------------------------------------------------------------------------------------
// Golden data from Hugging Face (tests/golden/apply, see its README).

struct Golden {
  nlohmann::json j;
  Rope rope;
  std::vector<int64_t> positions;
  std::vector<float> q;
  int64_t seq = 0, heads = 0;

  explicit Golden(const std::string& name) {
    std::ifstream file(std::string(POSENC_GOLDEN_DIR) + "/apply/" + name + ".json");
    EXPECT_TRUE(file.good()) << name;
    j = nlohmann::json::parse(file);
    rope.head_dim = j["head_dim"];
    rope.rotary_dim = j["rotary_dim"];
    rope.attention_factor = j["attention_factor"];
    rope.inv_freq = j["inv_freq_hf_f32"].get<std::vector<double>>();
    positions = j["positions"].get<std::vector<int64_t>>();
    seq = static_cast<int64_t>(j["q"].size());
    heads = static_cast<int64_t>(j["q"][0].size());
    q = Flatten(j["q"]);
  }

  // [seq][head][dim] -> dense floats.
  static std::vector<float> Flatten(const nlohmann::json& a) {
    std::vector<float> out;
    for (const auto& s : a)
      for (const auto& h : s)
        for (const auto& v : h) out.push_back(v.get<float>());
    return out;
  }
  static std::vector<double> FlattenDouble(const nlohmann::json& a) {
    std::vector<double> out;
    for (const auto& s : a)
      for (const auto& h : s)
        for (const auto& v : h) out.push_back(v.get<double>());
    return out;
  }

  std::vector<float> Apply(RopeLayout layout) {
    rope.layout = layout;
    std::vector<float> out(q.size());
    ApplyRope(rope, positions, Heads<const float>::Dense(q.data(), seq, heads, rope.head_dim),
              Heads<float>::Dense(out.data(), seq, heads, rope.head_dim));
    return out;
  }

  std::vector<float> ApplyTwin(RopeLayout layout) {
    rope.layout = layout;
    std::vector<float> out(q.size());
    ApplyRopeReference(
        rope, positions, Heads<const float>::Dense(q.data(), seq, heads, rope.head_dim),
        Heads<float>::Dense(out.data(), seq, heads, rope.head_dim), RopeDirection::kForward);
    return out;
  }

  // |x0| + |x1| of the pair that element e belongs to (e itself past rotary_dim).
  double PairScale(size_t e, RopeLayout layout) const {
    const auto d = static_cast<int64_t>(e % rope.head_dim), half = rope.rotary_dim / 2;
    if (d >= rope.rotary_dim) return std::abs(q[e]);
    const size_t partner = layout == RopeLayout::kInterleaved ? (e ^ 1)
                           : d < half                         ? e + half
                                                              : e - half;
    return std::abs(q[e]) + std::abs(q[partner]);
  }
};

void ExpectMatchesGolden(const std::string& name) {
  Golden g(name);
  ASSERT_EQ(g.positions.size(), 9u);
  ASSERT_EQ(g.positions.back(), 131071);
  const struct {
    RopeLayout layout;
    const char* column;
  } cases[] = {{RopeLayout::kHalfSplit, "out_neox_f64"},
               {RopeLayout::kInterleaved, "out_interleaved_f64"}};
  for (const auto& c : cases) {
    const std::vector<float> twin = g.ApplyTwin(c.layout);
    const std::vector<float> ours = g.Apply(c.layout);
    const std::vector<double> want = Golden::FlattenDouble(g.j[c.column]);
    ASSERT_EQ(ours.size(), want.size());
    for (size_t e = 0; e < want.size(); ++e) {
      // The twin's angles and arithmetic are double, the same computation as the float64 column
      // up to ~1e-15; what remains is rounding the result to float32, at most 2^-24 relative.
      // This is the tightest honest bound (a fixed 2e-6 would also pass; values reach about 3.5).
      const double tolerance = std::ldexp(std::abs(want[e]), -24) + 1e-12;
      ASSERT_NEAR(twin[e], want[e], tolerance) << name << " " << c.column << " element " << e;
      // The SIMD kernel rounds cos and sin to float32 and rotates in float32 (two roundings of
      // products of size |x0| and |x1|, and the FMA's): 2^-22 of the pair's size covers them.
      const double kernel_tolerance = tolerance + std::ldexp(g.PairScale(e, c.layout), -22);
      ASSERT_NEAR(ours[e], want[e], kernel_tolerance)
          << name << " " << c.column << " element " << e;
    }
  }
}

TEST(RopeGolden, Llama31MatchesFloat64Reference) { ExpectMatchesGolden("llama3_1_8b"); }
TEST(RopeGolden, Phi2PartialRotaryMatchesFloat64Reference) { ExpectMatchesGolden("phi_2"); }

TEST(RopeGolden, HuggingFaceFloat32AnglesDriftAtLongPositions) {
  // Why our angles are double: HF's float32 angle product is already off by more than 1e-4 at
  // position 131071 (rope-scaling.md §9), far beyond float32 output rounding.
  for (const char* name : {"llama3_1_8b", "phi_2"}) {
    Golden g(name);
    const std::vector<double> hf = Golden::FlattenDouble(g.j["out_neox_hf_f32"]);
    const std::vector<double> f64 = Golden::FlattenDouble(g.j["out_neox_f64"]);
    const std::vector<float> ours = g.Apply(RopeLayout::kHalfSplit);
    const size_t row = static_cast<size_t>(g.heads * g.rope.head_dim);
    const size_t last = (g.positions.size() - 1) * row;  // position 131071
    double hf_drift = 0, our_drift = 0;
    for (size_t e = last; e < last + row; ++e) {
      hf_drift = std::max(hf_drift, std::abs(hf[e] - f64[e]));
      our_drift = std::max(our_drift, std::abs(ours[e] - f64[e]));
    }
    EXPECT_GT(hf_drift, 1e-4) << name;
    EXPECT_LT(our_drift, 1e-6) << name;
  }
}

TEST(RopeGolden, DefaultFrequenciesMatchHuggingFaceToOneFloat32Ulp) {
  // Phi-2 uses plain RoPE (base 10000) over 32 of 80 features; HF computes in float32.
  Golden g("phi_2");
  const Rope ours = Rope::Default(80, 10000.0, RopeLayout::kHalfSplit, 32);
  ASSERT_EQ(ours.inv_freq.size(), g.rope.inv_freq.size());
  for (size_t i = 0; i < ours.inv_freq.size(); ++i) {
    const double ulp = std::ldexp(1.0, std::ilogb(g.rope.inv_freq[i]) - 23);
    EXPECT_NEAR(ours.inv_freq[i], g.rope.inv_freq[i], 1.5 * ulp) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input.

TEST(RopeValidate, RejectsBadRotaryDim) {
  Rope rope = Rope::Default(64);
  rope.rotary_dim = 65;
  ExpectError([&] { rope.Validate(); },
              "[rope] rotary_dim must be even and <= head_dim (64), got 65");
  rope.rotary_dim = 7;
  ExpectError([&] { rope.Validate(); },
              "[rope] rotary_dim must be even and <= head_dim (64), got 7");
  rope.rotary_dim = 66;
  ExpectError([&] { rope.Validate(); },
              "[rope] rotary_dim must be even and <= head_dim (64), got 66");
  rope.rotary_dim = 0;
  ExpectError([&] { rope.Validate(); }, "[rope] rotary_dim must be >= 2, got 0");
  ExpectError([&] { Rope::Default(64, 10000.0, RopeLayout::kHalfSplit, 65); },
              "[rope] rotary_dim must be even and <= head_dim (64), got 65");
  ExpectError([&] { Rope::Default(64, 10000.0, RopeLayout::kHalfSplit, -2); },
              "[rope] rotary_dim must be >= 2, got -2");
}

TEST(RopeValidate, RejectsBadHeadDim) {
  ExpectError([] { Rope::Default(0); }, "[rope] head_dim must be positive, got 0");
  Rope rope = Rope::Default(8);
  rope.head_dim = -8;
  ExpectError([&] { rope.Validate(); }, "[rope] head_dim must be positive, got -8");
}

TEST(RopeValidate, RejectsBadInvFreq) {
  Rope rope = Rope::Default(64);
  rope.inv_freq.pop_back();
  ExpectError([&] { rope.Validate(); },
              "[rope] inv_freq.size() must equal rotary_dim / 2 (32), got 31");
  rope = Rope::Default(64);
  rope.inv_freq[3] = std::numeric_limits<double>::quiet_NaN();
  ExpectError([&] { rope.Validate(); }, "[rope] inv_freq[3] must be finite and >= 0, got nan");
  rope.inv_freq[3] = -0.5;
  ExpectError([&] { rope.Validate(); }, "[rope] inv_freq[3] must be finite and >= 0, got -0.5");
  rope.inv_freq[3] = std::numeric_limits<double>::infinity();
  ExpectError([&] { rope.Validate(); }, "[rope] inv_freq[3] must be finite and >= 0, got inf");
  rope.inv_freq[3] = 0.0;
  EXPECT_NO_THROW(rope.Validate());
}

TEST(RopeValidate, RejectsBadAttentionFactor) {
  Rope rope = Rope::Default(8);
  // The kernels scale cos and sin by it in float32: it is checked there, so that 1e308 (finite
  // in double) cannot make every output inf, nor 1e-300 every output 0.
  const std::string rule =
      "[rope] attention_factor must be a positive normal float32, in [1.1754943508222875e-38, "
      "3.4028234663852886e+38], got ";
  for (const double bad :
       {0.0, -1.5, 1e308, 1e-300, 3.5e38, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN()}) {
    rope.attention_factor = bad;
    std::ostringstream shown;
    shown.precision(17);
    shown << bad;
    ExpectError([&] { rope.Validate(); }, rule + shown.str());
  }
  rope.attention_factor = 3.4e38;
  EXPECT_NO_THROW(rope.Validate());
}

TEST(RopeValidate, RejectsBadDefaultInvFreqArguments) {
  ExpectError([] { DefaultInvFreq(-1.0, 4); },
              "[default_inv_freq] base must be finite and > 0, got -1");
  ExpectError([] { DefaultInvFreq(0.0, 4); },
              "[default_inv_freq] base must be finite and > 0, got 0");
  EXPECT_THROW(DefaultInvFreq(std::numeric_limits<double>::quiet_NaN(), 4), Error);
  ExpectError([] { DefaultInvFreq(10000.0, 3); },
              "[default_inv_freq] rotary_dim must be even and > 0, got 3");
  ExpectError([] { DefaultInvFreq(10000.0, 0); },
              "[default_inv_freq] rotary_dim must be even and > 0, got 0");
  ExpectError([] { Rope::Default(8, -10000.0); },
              "[default_inv_freq] base must be finite and > 0, got -10000");
}

// A valid in-place setup whose buffers are checked after every failing call.
struct InPlaceFixture {
  Rope rope = Rope::Default(8);
  std::vector<int64_t> positions{0, 5, 9};
  std::vector<float> qbuf = RandomNormal(3 * 4 * 8, 81), kbuf = RandomNormal(3 * 2 * 8, 82);
  const std::vector<float> q0 = qbuf, k0 = kbuf;
  Heads<float> q() { return Heads<float>::Dense(qbuf.data(), 3, 4, 8); }
  Heads<float> k() { return Heads<float>::Dense(kbuf.data(), 3, 2, 8); }
  void ExpectUntouched() {
    EXPECT_TRUE(BitEqual(qbuf, q0));
    EXPECT_TRUE(BitEqual(kbuf, k0));
  }
};

TEST(RopeValidate, RejectsBadPositions) {
  InPlaceFixture f;
  f.positions = {0, 1, -4};
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q(), f.k()); },
              "[rope] positions[2] must be >= 0, got -4");
  f.ExpectUntouched();
  f.positions = {0, 1};
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q(), f.k()); },
              "[rope] positions.size() must equal the number of tokens (3), got 2");
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q()); },
              "[rope] positions.size() must equal the number of tokens (3), got 2");
  f.ExpectUntouched();
}

TEST(RopeValidate, RejectsViewsOfTheWrongShape) {
  InPlaceFixture f;
  // head_dim of the view differs from the rope's (the view itself is well formed).
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>::Dense(f.kbuf.data(), 3, 4, 4)); },
      "[rope] k.head_dim must equal rope.head_dim (8), got 4");
  f.ExpectUntouched();
  // k has fewer tokens than q.
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>::Dense(f.kbuf.data(), 2, 2, 8)); },
      "[rope] k.tokens must equal q.tokens (3), got 2");
  f.ExpectUntouched();
  // Negative sizes (zero sizes are an empty batch: RopeEmpty).
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>::Dense(f.kbuf.data(), 3, -1, 8)); },
      "[rope] k.num_heads must be >= 0, got -1");
  ExpectError([&] { ApplyRope(f.rope, f.positions, Heads<float>::Dense(f.qbuf.data(), -2, 4, 8)); },
              "[rope] x.tokens must be >= 0, got -2");
  ExpectError([&] { ApplyRope(f.rope, f.positions, Heads<float>::Dense(f.qbuf.data(), 3, 4, -8)); },
              "[rope] x.head_dim must be positive, got -8");
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>{nullptr, 3, 2, 8, 16, 8}); },
              "[rope] k.data must be non-null, got nullptr");
  f.ExpectUntouched();
  // Out-of-place: output shape must equal input shape.
  std::vector<float> out(f.qbuf.size());
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, Heads<const float>(f.q()),
                  Heads<float>::Dense(out.data(), 3, 2, 8));
      },
      "[rope] x_out.num_heads must equal x_in.num_heads (4), got 2");
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, Heads<const float>(f.q()),
                  Heads<float>::Dense(out.data(), 2, 4, 8));
      },
      "[rope] x_out.tokens must equal x_in.tokens (3), got 2");
  f.ExpectUntouched();
}

TEST(RopeValidate, RejectsAnInvalidRopeBeforeTouchingMemory) {
  InPlaceFixture f;
  f.rope.inv_freq[1] = std::numeric_limits<double>::quiet_NaN();
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q(), f.k()); },
              "[rope] inv_freq[1] must be finite and >= 0, got nan");
  f.ExpectUntouched();
}

TEST(RopeValidate, RejectsOverlappingMemory) {
  InPlaceFixture f;
  // In place: q and k are the same buffer.
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>::Dense(f.qbuf.data(), 3, 2, 8)); },
      "[rope] k must not share memory with q, got overlapping views");
  // In place: k's rows start half a row into q's rows.
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, f.q(), Heads<float>{f.qbuf.data() + 4, 3, 1, 8, 32, 8});
      },
      "[rope] k must not share memory with q, got overlapping views");
  f.ExpectUntouched();

  // Out of place: out is in, or shifted by one element.
  ExpectError([&] { ApplyRope(f.rope, f.positions, Heads<const float>(f.q()), f.q()); },
              "[rope] x_out must not share memory with x_in, got overlapping views");
  std::vector<float> big(f.qbuf.size() + 1);
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, Heads<const float>::Dense(big.data(), 3, 4, 8),
                  Heads<float>::Dense(big.data() + 1, 3, 4, 8));
      },
      "[rope] x_out must not share memory with x_in, got overlapping views");

  // Out of place, q and k: every output against every input and the other output.
  std::vector<float> qo(f.qbuf.size()), ko(f.kbuf.size());
  const Heads<const float> qi = f.q(), ki = f.k();
  const auto qov = Heads<float>::Dense(qo.data(), 3, 4, 8);
  const auto kov = Heads<float>::Dense(ko.data(), 3, 2, 8);
  EXPECT_NO_THROW(ApplyRope(f.rope, f.positions, qi, qov, ki, kov));
  f.ExpectUntouched();
  ExpectError([&] { ApplyRope(f.rope, f.positions, qi, f.q(), ki, kov); },
              "[rope] q_out must not share memory with q_in, got overlapping views");
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, qi, qov, ki, Heads<float>::Dense(qo.data(), 3, 2, 8)); },
      "[rope] k_out must not share memory with q_out, got overlapping views");
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, qi, qov, ki, Heads<float>::Dense(f.qbuf.data(), 3, 2, 8));
      },
      "[rope] k_out must not share memory with q_in, got overlapping views");
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, qi, Heads<float>::Dense(f.kbuf.data(), 3, 4, 4), ki, kov);
      },
      "[rope] q_out.head_dim must equal rope.head_dim (8), got 4");
  std::vector<float> kk(f.qbuf.size());
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, qi, Heads<float>::Dense(kk.data(), 3, 4, 8),
                  Heads<const float>::Dense(kk.data() + 8, 3, 2, 8), kov);
      },
      "[rope] q_out must not share memory with k_in, got overlapping views");
  f.ExpectUntouched();
}

TEST(RopeValidate, EveryFormThrowsBeforeWritingAnything) {
  InPlaceFixture f;
  const std::vector<int64_t> negative{0, 1, -4};
  Rope bad_rope = f.rope;
  bad_rope.inv_freq[1] = std::numeric_limits<double>::quiet_NaN();
  std::vector<float> qo(f.qbuf.size());
  const auto qov = Heads<float>::Dense(qo.data(), 3, 4, 8);
  std::vector<BFloat16> bf(3 * 4 * 8);
  // Each case is one ApplyRope form with one bad argument.
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { ApplyRope(f.rope, negative, f.q()); }, "[rope] positions[2] must be >= 0, got -4"},
      {[&] { ApplyRope(bad_rope, f.positions, f.q(), f.k()); },
       "[rope] inv_freq[1] must be finite and >= 0, got nan"},
      {[&] { ApplyRope(f.rope, f.positions, Heads<const float>(f.q()), f.q()); },
       "[rope] x_out must not share memory with x_in, got overlapping views"},
      {[&] {
         const Heads<const float> qi = f.q(), ki = f.k();
         ApplyRope(f.rope, f.positions, qi, qov, ki, f.k());
       },
       "[rope] k_out must not share memory with k_in, got overlapping views"},
      {[&] {
         const auto x = Heads<BFloat16>::Dense(bf.data(), 3, 8, 4);
         ApplyRope(f.rope, f.positions, x);
       },
       "[rope] x.head_dim must equal rope.head_dim (8), got 4"},
  };
  for (const auto& [run, message] : cases) {
    ExpectError(run, message);
    f.ExpectUntouched();
  }
  EXPECT_EQ(qo, std::vector<float>(qo.size(), 0.0f));
}

TEST(RopeValidate, AliasingCheckIsExactOnRandomStridedViews) {
  // The in-place q, k call must reject exactly the pairs of views that share a byte: compare
  // with a brute-force test over all pairs of rows, on random (valid) views of one buffer.
  constexpr int64_t D = 4;
  const Rope rope = Rope::Default(D);
  std::vector<float> buffer(4096);
  std::mt19937 gen(4242);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  int checked = 0, overlapping = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t tokens = pick(1, 4);
    auto random_view = [&](int64_t num_heads) {
      return Heads<float>{
          buffer.data() + pick(0, 40), tokens, num_heads, D, pick(0, 40), pick(0, 20)};
    };
    const Heads<float> q = random_view(pick(1, 3)), k = random_view(pick(1, 3));
    try {
      q.Validate("test", "q");
      k.Validate("test", "k");
    } catch (const Error&) {
      continue;  // only well-formed views
    }
    bool brute = false;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t u = 0; u < tokens; ++u)
        for (int64_t h = 0; h < q.num_heads; ++h)
          for (int64_t g = 0; g < k.num_heads; ++g)
            brute |= q.Row(t, h) < k.Row(u, g) + D && k.Row(u, g) < q.Row(t, h) + D;
    const std::vector<int64_t> positions(tokens, 1);
    bool rejected = false;
    try {
      ApplyRope(rope, positions, q, k);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "[rope] k must not share memory with q, got overlapping views");
      rejected = true;
    }
    ASSERT_EQ(rejected, brute) << "trial " << trial;
    ++checked;
    overlapping += brute;
  }
  // Both outcomes occur often enough to mean something.
  EXPECT_GT(checked, 500);
  EXPECT_GT(overlapping, 100);
  EXPECT_GT(checked - overlapping, 100);
}

TEST(RopeValidate, RejectsMalformedStrides) {
  InPlaceFixture f;
  // k's heads overlap each other.
  ExpectError(
      [&] { ApplyRope(f.rope, f.positions, f.q(), Heads<float>{f.kbuf.data(), 3, 2, 8, 16, 4}); },
      "[rope] k.head_stride must be >= head_dim (8) so that rows do not overlap, got 4");
  f.ExpectUntouched();
}

}  // namespace
}  // namespace posenc

namespace posenc {
namespace {

TEST(RopeReferenceDouble, Float64StorageKeepsTheDoubleResult) {
  // (2, 1) turned by 1 radian, worked by hand: (2 cos 1 - sin 1, 2 sin 1 + cos 1).
  Rope rope{.head_dim = 3, .rotary_dim = 2, .inv_freq = {1.0}};
  std::vector<double> x = {2.0, 1.0, 7.0}, y(3, 0.0);
  const std::vector<int64_t> positions = {1};
  ApplyRopeReference(rope, positions, Heads<const double>::Dense(x.data(), 1, 1, 3),
                     Heads<double>::Dense(y.data(), 1, 1, 3), RopeDirection::kForward);
  EXPECT_NEAR(y[0], 2 * 0.54030230586813977 - 0.84147098480789651, 1e-15);
  EXPECT_NEAR(y[1], 2 * 0.84147098480789651 + 0.54030230586813977, 1e-15);
  EXPECT_EQ(y[2], 7.0);  // past rotary_dim: copied
  // The inverse (the transpose) brings it back to double precision, not float32's.
  ApplyRopeReference(rope, positions, Heads<const double>::Dense(y.data(), 1, 1, 3),
                     Heads<double>::Dense(y.data(), 1, 1, 3), RopeDirection::kInverse);
  EXPECT_NEAR(y[0], 2.0, 1e-15);
  EXPECT_NEAR(y[1], 1.0, 1e-15);
}

TEST(RopeReferenceDouble, ApplyRopeOnFloat64IsValidatedAndUnrounded) {
  Rope rope{.head_dim = 3, .rotary_dim = 2, .inv_freq = {1.0}};
  std::vector<double> x = {2.0, 1.0, 7.0};
  const std::vector<int64_t> positions = {1};
  ApplyRope(rope, positions, Heads<double>::Dense(x.data(), 1, 1, 3));
  EXPECT_NEAR(x[0], 2 * 0.54030230586813977 - 0.84147098480789651, 1e-15);
  EXPECT_NEAR(x[1], 2 * 0.84147098480789651 + 0.54030230586813977, 1e-15);
  const std::vector<double> before = x;
  const std::vector<int64_t> negative = {-1};
  EXPECT_THROW(ApplyRope(rope, negative, Heads<double>::Dense(x.data(), 1, 1, 3)), Error);
  EXPECT_EQ(x, before);
}

// Positions: one rule for every storage type (posenc/positions.h). At kMaxPosition = 2^32 the
// kernels still agree with the double reference (whose own angle is off by up to 2^-21 rad
// there, hence the tolerance); one past it is refused before anything is written.
template <typename T>
void CheckPositionLimit(double tolerance) {
  const Rope rope = Rope::Default(64);
  const std::vector<int64_t> at_limit{0, kMaxPosition - 1, kMaxPosition};
  std::vector<float> widened(3 * 64);
  std::vector<T> x(3 * 64);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = FromFloat<T>(std::sin(0.37f * static_cast<float>(i)));
    widened[i] = ToFloat(x[i]);
  }
  std::vector<float> want(widened.size());
  ApplyRopeReference(rope, at_limit, Heads<const float>::Dense(widened.data(), 3, 1, 64),
                     Heads<float>::Dense(want.data(), 3, 1, 64), RopeDirection::kForward);
  ApplyRope(rope, at_limit, Heads<T>::Dense(x.data(), 3, 1, 64));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ToFloat(x[i]))) << i;
    ASSERT_NEAR(ToFloat(x[i]), want[i], tolerance) << i;
  }
  const std::vector<T> before = x;
  for (const int64_t bad :
       {kMaxPosition + 1, int64_t{1} << 60, std::numeric_limits<int64_t>::max()}) {
    const std::vector<int64_t> past{0, bad};
    ExpectError([&] { ApplyRope(rope, past, Heads<T>::Dense(x.data(), 2, 1, 64)); },
                "[rope] positions[1] must be <= 2^32 = 4294967296 (kMaxPosition, where float32 "
                "RoPE stops being accurate), got " +
                    std::to_string(bad));
  }
  EXPECT_EQ(std::memcmp(before.data(), x.data(), x.size() * sizeof(T)), 0);
}

TEST(RopePositionLimit, Float32) { CheckPositionLimit<float>(1e-6); }
TEST(RopePositionLimit, BFloat16) { CheckPositionLimit<BFloat16>(2e-2); }
TEST(RopePositionLimit, Float16) { CheckPositionLimit<Float16>(2e-3); }

TEST(RopePositionLimit, PositionRangeStaysWithinIt) {
  EXPECT_EQ(PositionRange(kMaxPosition, 1), std::vector<int64_t>{kMaxPosition});
  ExpectError([] { PositionRange(kMaxPosition, 2); },
              "[position_range] count must keep start + count - 1 <= 2^32 = 4294967296 "
              "(kMaxPosition), got 2");
  ExpectError([] { PositionRange(kMaxPosition + 1, 0); },
              "[position_range] start must be <= 2^32 = 4294967296 (kMaxPosition, where float32 "
              "RoPE stops being accurate), got 4294967297");
}

TEST(RopeEmpty, ZeroTokensOrHeadsAreANoOp) {
  // An empty batch is no error: nothing is read or written, whatever the data pointer.
  const Rope rope = Rope::Default(8);
  std::vector<float> k(2 * 3 * 8, 1.0f);
  const std::vector<float> k_before = k;
  const std::vector<int64_t> none, two{4, 5};
  EXPECT_NO_THROW(ApplyRope(rope, none, Heads<float>::Dense(nullptr, 0, 4, 8)));
  EXPECT_NO_THROW(ApplyRope(rope, two, Heads<float>::Dense(nullptr, 2, 0, 8)));
  EXPECT_NO_THROW(ApplyRope(rope, none, Heads<const float>::Dense(nullptr, 0, 4, 8),
                            Heads<float>::Dense(nullptr, 0, 4, 8)));
  std::vector<BFloat16> bf(8);
  EXPECT_NO_THROW(ApplyRope(rope, none, Heads<BFloat16>::Dense(bf.data(), 0, 1, 8)));
  // q without heads, k with three: k is rotated, q is not touched.
  ApplyRope(rope, two, Heads<float>::Dense(nullptr, 2, 0, 8),
            Heads<float>::Dense(k.data(), 2, 3, 8));
  EXPECT_NE(k, k_before);
  // Sizes must still be sizes.
  ExpectError([&] { ApplyRope(rope, none, Heads<float>::Dense(k.data(), -1, 3, 8)); },
              "[rope] x.tokens must be >= 0, got -1");
  ExpectError([&] { ApplyRope(rope, two, Heads<float>::Dense(k.data(), 2, 3, 0)); },
              "[rope] x.head_dim must be positive, got 0");
}

// ---------------------------------------------------------------------------------------------
// Rotary offset: the rotated block inside the head (DeepSeek V2/V3 MLA: 128 unrotated features,
// then 64 rotated, in a head of 192).

TEST(RopeOffset, LayoutsPairTheDocumentedFeaturesFromTheOffset) {
  // LayoutsPairTheDocumentedFeatures moved one (odd) feature in, with one feature after the
  // block: x = [9 | 1, 2, 3, 4 | 8], pair 0 a quarter turn, pair 1 a half turn.
  //   half-split pairs (x1, x3) = (1, 3) -> (-3, 1), (x2, x4) = (2, 4) -> (-2, -4)
  //   interleaved pairs (x1, x2) = (1, 2) -> (-2, 1), (x3, x4) = (3, 4) -> (-3, -4)
  const std::vector<int64_t> positions{1};
  for (const RopeLayout layout : kLayouts) {
    Rope rope = MakeRope(6, 4, {pi / 2, pi}, layout);
    rope.rotary_offset = 1;
    const std::vector<float> x{9, 1, 2, 3, 4, 8};
    std::vector<float> in_place = x, out(6, -7.0f);
    ApplyRope(rope, positions, Heads<float>::Dense(in_place.data(), 1, 1, 6));
    ApplyRope(rope, positions, Heads<const float>::Dense(x.data(), 1, 1, 6),
              Heads<float>::Dense(out.data(), 1, 1, 6));
    const std::vector<float> want = layout == RopeLayout::kHalfSplit
                                        ? std::vector<float>{9, -3, -2, 1, -4, 8}
                                        : std::vector<float>{9, -2, 1, -3, -4, 8};
    for (const auto* got : {&in_place, &out}) {
      EXPECT_EQ((*got)[0], 9.0f);
      EXPECT_EQ((*got)[5], 8.0f);
      for (int d = 1; d < 5; ++d) EXPECT_NEAR((*got)[d], want[d], 1e-6) << d;
    }
  }
}

TEST(RopeOffset, DefaultTakesTheFrequenciesOfTheBlock) {
  // DeepSeek V3: qk_nope_head_dim 128, qk_rope_head_dim 64; inv_freq = base^(-2i / 64).
  const Rope mla = Rope::Default(192, 10000.0, RopeLayout::kInterleaved, 64, 128);
  EXPECT_EQ(mla.head_dim, 192);
  EXPECT_EQ(mla.rotary_dim, 64);
  EXPECT_EQ(mla.rotary_offset, 128);
  EXPECT_EQ(mla.inv_freq, DefaultInvFreq(10000.0, 64));
  // rotary_dim 0: everything from the offset on.
  const Rope rest = Rope::Default(192, 10000.0, RopeLayout::kHalfSplit, 0, 128);
  EXPECT_EQ(rest.rotary_dim, 64);
  EXPECT_EQ(rest.rotary_offset, 128);
  EXPECT_EQ(Rope::Default(64).rotary_offset, 0);
}

// A stored value of any storage type, float64 included.
template <typename T>
T Stored(float f) {
  if constexpr (std::is_same_v<T, double>)
    return f;
  else
    return FromFloat<T>(f);
}

template <typename T>
std::vector<T> RandomStored(size_t n, uint32_t seed) {
  const std::vector<float> f = RandomNormal(n, seed);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Stored<T>(f[i]);
  return v;
}

template <typename T>
bool BitEqualStored(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Rotating features [offset, offset + rotary_dim) of every row inside the full head must give
// the same bits as rotating that block alone, as heads of their own (views of head_dim =
// rotary_dim over the same memory, rotated by a zero-offset Rope with the same frequencies):
// the same pairs, angles and arithmetic on the same values. Every feature outside the block keeps
// its bits. Both calls stay below the kernel's threading threshold (kernel_threads.h), so both
// form the angles of the consecutive positions on one thread, in the same order.
template <typename T>
void CheckOffsetEqualsTheBlockAlone() {
  struct Case {
    int64_t head_dim, rotary_dim, rotary_offset;
  };
  // MLA; odd offsets (the block starts misaligned) with features after it; no offset.
  constexpr Case kCases[] = {{192, 64, 128}, {13, 6, 3}, {3, 2, 1}, {45, 34, 9}, {36, 34, 0}};
  constexpr int64_t kTokens = 8, kQHeads = 4, kKHeads = 2;
  // Runs of consecutive positions (the kernel advances the angles of the previous token) and
  // jumps (it forms them afresh).
  const std::vector<int64_t> positions{0, 1, 2, 3, 4096, 900001, 900002, 17};
  constexpr RopeDirection kDirections[] = {RopeDirection::kForward, RopeDirection::kInverse};
  ForEachSimdTarget([&](int64_t) {
    uint32_t seed = 1;
    for (const Case c : kCases) {
      for (const RopeLayout layout : kLayouts) {
        for (const RopeDirection direction : kDirections) {
          SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " rotary_dim " +
                       std::to_string(c.rotary_dim) + " rotary_offset " +
                       std::to_string(c.rotary_offset) + " layout " +
                       std::to_string(static_cast<int>(layout)) + " direction " +
                       std::to_string(static_cast<int>(direction)));
          Rope rope = Rope::Default(c.head_dim, 10000.0, layout, c.rotary_dim, c.rotary_offset);
          rope.attention_factor = seed % 2 == 0 ? 1.25 : 1.0;
          Rope alone = MakeRope(c.rotary_dim, c.rotary_dim, rope.inv_freq, layout);
          alone.attention_factor = rope.attention_factor;

          const std::vector<T> q0 = RandomStored<T>(kTokens * kQHeads * c.head_dim, seed),
                               k0 = RandomStored<T>(kTokens * kKHeads * c.head_dim, seed + 100);
          ++seed;
          auto full = [&](auto* data, int64_t heads) {
            using U = std::remove_pointer_t<decltype(data)>;
            return Heads<U>::Dense(data, kTokens, heads, c.head_dim);
          };
          auto block = [&](auto* data, int64_t heads) {
            using U = std::remove_pointer_t<decltype(data)>;
            return Heads<U>{data + c.rotary_offset, kTokens,   heads, c.rotary_dim,
                            heads * c.head_dim,     c.head_dim};
          };

          // The block alone, rotated in place.
          std::vector<T> q_want = q0, k_want = k0;
          ApplyRope(alone, positions, block(q_want.data(), kQHeads), direction);
          ApplyRope(alone, positions, block(k_want.data(), kKHeads), direction);
          // The identity means something: the block changed, nothing else did.
          bool block_changed = false;
          for (size_t e = 0; e < q0.size(); ++e) {
            const int64_t d = static_cast<int64_t>(e) % c.head_dim;
            const bool same = std::memcmp(&q0[e], &q_want[e], sizeof(T)) == 0;
            if (d >= c.rotary_offset && d < c.rotary_offset + c.rotary_dim) {
              block_changed |= !same;
            } else {
              ASSERT_TRUE(same) << e;
            }
          }
          ASSERT_TRUE(block_changed);

          // In place, one tensor and q and k together.
          std::vector<T> q = q0, k = k0;
          ApplyRope(rope, positions, full(q.data(), kQHeads), direction);
          EXPECT_TRUE(BitEqualStored(q, q_want));
          q = q0;
          ApplyRope(rope, positions, full(q.data(), kQHeads), full(k.data(), kKHeads), direction);
          EXPECT_TRUE(BitEqualStored(q, q_want));
          EXPECT_TRUE(BitEqualStored(k, k_want));

          // Out of place, into buffers of sentinels: the features outside the block are copied.
          std::vector<T> q_out(q0.size(), Stored<T>(-7.0f)), k_out(k0.size(), Stored<T>(-7.0f));
          ApplyRope(rope, positions, full(q0.data(), kQHeads), full(q_out.data(), kQHeads),
                    direction);
          EXPECT_TRUE(BitEqualStored(q_out, q_want));
          std::fill(q_out.begin(), q_out.end(), Stored<T>(-7.0f));
          ApplyRope(rope, positions, full(q0.data(), kQHeads), full(q_out.data(), kQHeads),
                    full(k0.data(), kKHeads), full(k_out.data(), kKHeads), direction);
          EXPECT_TRUE(BitEqualStored(q_out, q_want));
          EXPECT_TRUE(BitEqualStored(k_out, k_want));

          // The scalar twin obeys the same identity, out of place and in place.
          std::vector<T> ref_want = q0, ref_out(q0.size(), Stored<T>(-7.0f)), ref_in_place = q0;
          ApplyRopeReference(alone, positions, block(q0.data(), kQHeads),
                             block(ref_want.data(), kQHeads), direction);
          ApplyRopeReference(rope, positions, full(q0.data(), kQHeads),
                             full(ref_out.data(), kQHeads), direction);
          ApplyRopeReference(rope, positions, full(ref_in_place.data(), kQHeads),
                             full(ref_in_place.data(), kQHeads), direction);
          EXPECT_TRUE(BitEqualStored(ref_out, ref_want));
          EXPECT_TRUE(BitEqualStored(ref_in_place, ref_want));
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  });
}

TEST(RopeOffset, Float32EqualsTheBlockAloneOnEveryTarget) {
  CheckOffsetEqualsTheBlockAlone<float>();
}
TEST(RopeOffset, BFloat16EqualsTheBlockAloneOnEveryTarget) {
  CheckOffsetEqualsTheBlockAlone<BFloat16>();
}
TEST(RopeOffset, Float16EqualsTheBlockAloneOnEveryTarget) {
  CheckOffsetEqualsTheBlockAlone<Float16>();
}
TEST(RopeOffset, Float64EqualsTheBlockAlone) { CheckOffsetEqualsTheBlockAlone<double>(); }

double Norm(const std::vector<float>& x) {
  return std::sqrt(Dot(x.data(), x.data(), static_cast<int64_t>(x.size())));
}

TEST(RopeOffset, AttentionDependsOnlyOnTheRelativePosition) {
  // MLA shapes: q and k heads of 192 = 128 unrotated + 64 rotated features, values of 128.
  // R(m) is a rotation on the block and the identity elsewhere, so |R(m) q| = |q| and
  // R(m) q . R(n) k = q . R(n - m) k: the score depends on m - n only, and the unrotated
  // features add their plain dot product at every position.
  for (const RopeLayout layout : kLayouts) {
    const Rope rope = Rope::Default(192, 10000.0, layout, 64, 128);
    const std::vector<float> q = RandomNormal(192, 61), k = RandomNormal(192, 62);
    // Each rotated output carries float32 rounding of a few 2^-24 of |q| or |k| (Cauchy-Schwarz
    // bounds its effect on a score by that times |q| |k|); two scores are compared.
    const double bound = std::ldexp(1.0, -20) * Norm(q) * Norm(k);
    const double s = Score(rope, q, k, 5, 2);
    EXPECT_NEAR(Score(rope, q, k, 105, 102), s, bound);
    EXPECT_NEAR(Score(rope, q, k, 1000005, 1000002), s, bound);
    EXPECT_GT(std::abs(Score(rope, q, k, 7, 2) - s), 1e-2);
    EXPECT_NEAR(Score(rope, q, k, 0, 0), Dot(q.data(), k.data(), 192), bound);
    // The unrotated features' share, plus the score of the blocks alone.
    const Rope alone = MakeRope(64, 64, rope.inv_freq, layout);
    const std::vector<float> q_block(q.begin() + 128, q.end()), k_block(k.begin() + 128, k.end());
    EXPECT_NEAR(s, Dot(q.data(), k.data(), 128) + Score(alone, q_block, k_block, 5, 2), bound);
    // The norm of the whole head is kept.
    std::vector<float> rotated(192);
    const std::vector<int64_t> far{123457};
    ApplyRope(rope, far, Heads<const float>::Dense(q.data(), 1, 1, 192),
              Heads<float>::Dense(rotated.data(), 1, 1, 192));
    EXPECT_NEAR(Norm(rotated), Norm(q), std::ldexp(1.0, -21) * Norm(q));

    // Through attention (causal, 4 query heads sharing 2 key/value heads): moving every query
    // and key by the same distance leaves the output as it was.
    constexpr int64_t kQ = 3, kKv = 6, kHeads = 4, kKvHeads = 2, kHeadDim = 192, kValueDim = 128;
    const std::vector<float> qs = RandomNormal(kQ * kHeads * kHeadDim, 63),
                             ks = RandomNormal(kKv * kKvHeads * kHeadDim, 64),
                             vs = RandomNormal(kKv * kKvHeads * kValueDim, 65);
    AttentionOptions options;
    options.causal = true;
    options.rope = rope;
    auto attend = [&](const AttentionOptions& o, int64_t shift) {
      std::vector<int64_t> query_pos{3 + shift, 4 + shift, 5 + shift}, key_pos(kKv);
      for (int64_t j = 0; j < kKv; ++j) key_pos[j] = j + shift;
      std::vector<float> out(kQ * kHeads * kValueDim);
      Attention(o, Heads<const float>::Dense(qs.data(), kQ, kHeads, kHeadDim),
                Heads<const float>::Dense(ks.data(), kKv, kKvHeads, kHeadDim),
                Heads<const float>::Dense(vs.data(), kKv, kKvHeads, kValueDim), query_pos, key_pos,
                Heads<float>::Dense(out.data(), kQ, kHeads, kValueDim));
      return out;
    };
    const std::vector<float> near = attend(options, 0), shifted = attend(options, 1000000);
    // Scores (scaled by 1/sqrt(192)) move by ~1e-6, weights and outputs (values of size ~1) by
    // about as much.
    for (size_t e = 0; e < near.size(); ++e) ASSERT_NEAR(shifted[e], near[e], 1e-5) << e;
    // The rotation does act on the scores: without it the output differs.
    AttentionOptions plain = options;
    plain.rope.reset();
    const std::vector<float> unrotated = attend(plain, 0);
    double largest = 0;
    for (size_t e = 0; e < near.size(); ++e) {
      largest = std::max(largest, std::abs(double{near[e]} - unrotated[e]));
    }
    EXPECT_GT(largest, 1e-2);
  }
}

TEST(RopeValidate, RejectsBadRotaryOffset) {
  Rope rope = Rope::Default(192, 10000.0, RopeLayout::kInterleaved, 64, 128);
  EXPECT_NO_THROW(rope.Validate());
  rope.rotary_offset = 127;  // odd is fine
  EXPECT_NO_THROW(rope.Validate());
  rope.rotary_offset = -1;
  ExpectError([&] { rope.Validate(); }, "[rope] rotary_offset must be >= 0, got -1");
  rope.rotary_offset = 129;
  ExpectError([&] { rope.Validate(); },
              "[rope] rotary_offset must be <= head_dim - rotary_dim (192 - 64 = 128), got 129");
  // rotary_offset + rotary_dim would overflow: still the same rule.
  rope.rotary_offset = std::numeric_limits<int64_t>::max();
  ExpectError([&] { rope.Validate(); },
              "[rope] rotary_offset must be <= head_dim - rotary_dim (192 - 64 = 128), got "
              "9223372036854775807");
  ExpectError([] { Rope::Default(192, 10000.0, RopeLayout::kHalfSplit, 64, 130); },
              "[rope] rotary_offset must be <= head_dim - rotary_dim (192 - 64 = 128), got 130");
  ExpectError([] { Rope::Default(192, 10000.0, RopeLayout::kHalfSplit, 0, -2); },
              "[rope] rotary_offset must be >= 0, got -2");

  // ApplyRope refuses it before writing anything.
  InPlaceFixture f;
  f.rope.rotary_offset = 1;
  const std::string message =
      "[rope] rotary_offset must be <= head_dim - rotary_dim (8 - 8 = 0), got 1";
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q(), f.k()); }, message);
  ExpectError([&] { ApplyRope(f.rope, f.positions, f.q()); }, message);
  std::vector<float> out(f.qbuf.size(), -7.0f);
  ExpectError(
      [&] {
        ApplyRope(f.rope, f.positions, Heads<const float>(f.q()),
                  Heads<float>::Dense(out.data(), 3, 4, 8));
      },
      message);
  EXPECT_EQ(out, std::vector<float>(f.qbuf.size(), -7.0f));
  f.ExpectUntouched();
}

}  // namespace
}  // namespace posenc
