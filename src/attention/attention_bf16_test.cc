// The AVX512-BF16 blocks of the attention kernel (attention_bf16.h) against plain double
// arithmetic on the same bfloat16 values. Skipped on CPUs without AVX512-BF16, where the kernel
// never calls them (attention_kernels_test.cc covers the kernel on every CPU and target).
#include "attention_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "posenc/storage.h"
#include "simd/cpu_features.h"

namespace posenc::internal {
namespace {

constexpr uint16_t kNaNBits = 0x7FC0;  // a bfloat16 quiet NaN

uint16_t Bits(float f) {
  const BFloat16 b = BFloat16::FromFloat(f);
  uint16_t bits;
  std::memcpy(&bits, &b, sizeof(bits));
  return bits;
}
float Value(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

// `rows` rows of `dim` random bfloat16 values in [-1, 1], `stride` apart; the gap after each
// row holds NaN, so that reading past a row poisons the result.
std::vector<uint16_t> RandomRows(size_t rows, size_t dim, size_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint16_t> out(rows * stride, kNaNBits);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t d = 0; d < dim; ++d) out[r * stride + d] = Bits(uniform(rng));
  }
  return out;
}

// n rounded up to a multiple of `vector` (elements per vector).
size_t RoundUp(size_t n, size_t vector) { return (n + vector - 1) / vector * vector; }

#define SKIP_WITHOUT_BF16() \
  if (!HasBf16DotProducts()) GTEST_SKIP() << "this CPU has no AVX512-BF16"

// Every dim around the 32-element vectors (partial last vectors read with masks), every key
// count of a tile.
// The bfloat16 dot products are chosen by microarchitecture, as measured, not by vendor: Zen 4
// and Zen 5 (two vdpbf16ps pipes), not Intel's Xeons (one port), nor an AMD core not measured.
TEST(AttentionBf16, DotProductsAreChosenByMeasuredMicroarchitecture) {
  EXPECT_TRUE(Bf16DotProductsDoubleFmas("Zen 4"));
  EXPECT_TRUE(Bf16DotProductsDoubleFmas("Zen 5"));
  EXPECT_FALSE(Bf16DotProductsDoubleFmas("Sapphire Rapids"));
  EXPECT_FALSE(Bf16DotProductsDoubleFmas("Emerald Rapids"));
  EXPECT_FALSE(Bf16DotProductsDoubleFmas("Zen 3"));
  EXPECT_FALSE(Bf16DotProductsDoubleFmas("Zen 6"));
  EXPECT_FALSE(Bf16DotProductsDoubleFmas("unknown"));
}

TEST(AttentionBf16, ScoresAreScaledDotProducts) {
  SKIP_WITHOUT_BF16();
  for (const size_t dim :
       {size_t{1}, size_t{31}, size_t{32}, size_t{40}, size_t{72}, size_t{128}, size_t{256}}) {
    const size_t q_stride = RoundUp(dim, kBf16PerVector);
    std::vector<uint16_t> q = RandomRows(4, dim, q_stride, 1 + static_cast<uint32_t>(dim));
    for (size_t r = 0; r < 4; ++r) {  // ScoresBf16 takes q zero-padded
      std::fill(q.begin() + static_cast<std::ptrdiff_t>(r * q_stride + dim),
                q.begin() + static_cast<std::ptrdiff_t>((r + 1) * q_stride), uint16_t{0});
    }
    for (const size_t keys : {size_t{1}, size_t{17}, size_t{64}}) {
      const size_t k_stride = dim + 3;
      const std::vector<uint16_t> k =
          RandomRows(keys, dim, k_stride, 100 + static_cast<uint32_t>(keys));
      constexpr size_t kStride = 70;
      std::vector<float> s(4 * kStride, std::numeric_limits<float>::quiet_NaN());
      const float scale = 0.125f;
      ScoresBf16(q.data(), q_stride, k.data(), k_stride, keys, dim, scale, s.data(), kStride);
      for (size_t r = 0; r < 4; ++r) {
        for (size_t j = 0; j < keys; ++j) {
          double want = 0.0, magnitude = 0.0;
          for (size_t d = 0; d < dim; ++d) {
            const double product =
                double{Value(q[r * q_stride + d])} * double{Value(k[j * k_stride + d])};
            want += product;
            magnitude += std::fabs(product);
          }
          want *= scale;
          // float32 sums: a few ulps of the sum of magnitudes.
          ASSERT_NEAR(s[r * kStride + j], want, 4e-7 * scale * magnitude + 1e-30)
              << "dim " << dim << " keys " << keys << " row " << r << " key " << j;
        }
      }
    }
  }
}

// Per-row query scales (Llama 4's temperature, AttentionOptions::query_scale): the kernel asks
// ScoresBf16 for unit-scale scores and multiplies each row by its own scale c_r afterwards, which
// must equal c_r (q_r . k_j) up to float32 rounding, whatever the rows' scales.
TEST(AttentionBf16, UnitScaleScoresTimesEachRowsScale) {
  SKIP_WITHOUT_BF16();
  constexpr size_t kDim = 72, kKeys = 37, kStride = 64;
  const size_t q_stride = RoundUp(kDim, kBf16PerVector);
  std::vector<uint16_t> q = RandomRows(4, kDim, q_stride, 7);
  for (size_t r = 0; r < 4; ++r) {
    std::fill(q.begin() + static_cast<std::ptrdiff_t>(r * q_stride + kDim),
              q.begin() + static_cast<std::ptrdiff_t>((r + 1) * q_stride), uint16_t{0});
  }
  const std::vector<uint16_t> k = RandomRows(kKeys, kDim, kDim, 8);
  std::vector<float> s(4 * kStride, std::numeric_limits<float>::quiet_NaN());
  ScoresBf16(q.data(), q_stride, k.data(), kDim, kKeys, kDim, 1.0f, s.data(), kStride);
  const float row_scale[4] = {0.125f, 0.1403f, 0.3f, 1.7f};
  for (size_t r = 0; r < 4; ++r) {
    for (size_t j = 0; j < kKeys; ++j) {
      double want = 0.0, magnitude = 0.0;
      for (size_t d = 0; d < kDim; ++d) {
        const double product = double{Value(q[r * q_stride + d])} * double{Value(k[j * kDim + d])};
        want += product;
        magnitude += std::fabs(product);
      }
      ASSERT_NEAR(s[r * kStride + j] * row_scale[r], want * row_scale[r],
                  4e-7 * row_scale[r] * magnitude + 1e-30)
          << "row " << r << " key " << j;
    }
  }
}

TEST(AttentionBf16, ValuePairsInterleaveConsecutiveKeys) {
  SKIP_WITHOUT_BF16();
  for (const size_t value_dim : {size_t{5}, size_t{16}, size_t{40}, size_t{128}}) {
    const size_t value_stride = RoundUp(value_dim, kFloatsPerVector);
    for (const size_t keys : {size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
      const size_t v_stride = value_dim + 2;
      const std::vector<uint16_t> v = RandomRows(keys, value_dim, v_stride, 7);
      const size_t pair_rows = (keys + 1) / 2;
      std::vector<uint32_t> out(pair_rows * value_stride, 0xDEADBEEF);
      PairValueRowsBf16(v.data(), v_stride, keys, value_dim, value_stride, out.data());
      for (size_t jp = 0; jp < pair_rows; ++jp) {
        for (size_t e = 0; e < value_stride; ++e) {
          const uint32_t low = e < value_dim ? v[2 * jp * v_stride + e] : 0;
          const uint32_t high =
              e < value_dim && 2 * jp + 1 < keys ? v[(2 * jp + 1) * v_stride + e] : 0;
          ASSERT_EQ(out[jp * value_stride + e], low | (high << 16))
              << "value_dim " << value_dim << " keys " << keys << " pair " << jp << " e " << e;
        }
      }
    }
  }
}

// o_r = o_r c_r + sum_j bf16(p_rj) v_j, with the weights rounded to nearest even.
// Both forms, value pairs packed (prefill) and value rows read in place (decode); rows with NaN
// after them, and NaN weights past `keys`, which neither may read.
TEST(AttentionBf16, WeightedValuesRoundWeightsToBFloat16) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (const size_t value_dim : {size_t{16}, size_t{40}, size_t{128}, size_t{256}}) {
    const size_t value_stride = RoundUp(value_dim, kFloatsPerVector);
    for (const size_t keys : {size_t{1}, size_t{8}, size_t{33}, size_t{64}}) {
      const size_t v_stride = value_dim + 3;
      const std::vector<uint16_t> v = RandomRows(keys, value_dim, v_stride, 11);
      std::vector<uint32_t> pairs((keys + 1) / 2 * value_stride);
      PairValueRowsBf16(v.data(), v_stride, keys, value_dim, value_stride, pairs.data());
      constexpr size_t kPStride = 64;
      std::vector<float> p(4 * kPStride, std::numeric_limits<float>::quiet_NaN());
      for (size_t r = 0; r < 4; ++r) {
        for (size_t j = 0; j < keys; ++j) p[r * kPStride + j] = unit(rng);
      }
      const float correction[4] = {1.0f, 0.5f, 0.0f, 0.25f};
      std::vector<float> before(4 * value_stride);
      for (float& x : before) x = unit(rng);
      std::vector<float> from_pairs = before, from_rows = before;
      WeightedValuesBf16(p.data(), kPStride, keys, pairs.data(), value_stride, correction,
                         from_pairs.data(), value_stride);
      WeightedValueRowsBf16(p.data(), kPStride, keys, v.data(), v_stride, value_dim, value_stride,
                            correction, from_rows.data(), value_stride);
      for (size_t r = 0; r < 4; ++r) {
        for (size_t e = 0; e < value_dim; ++e) {
          double want = double{before[r * value_stride + e]} * correction[r];
          double magnitude = std::fabs(want);
          for (size_t j = 0; j < keys; ++j) {
            const double weight = BFloat16::FromFloat(p[r * kPStride + j]).ToFloat();
            want += weight * double{Value(v[j * v_stride + e])};
            magnitude += std::fabs(weight * double{Value(v[j * v_stride + e])});
          }
          // float32 sums: a few ulps of the sum of magnitudes (float32 weights instead of
          // rounded ones would be off by up to 2^-9 of each term).
          const double tolerance = 1e-6 * magnitude + 1e-30;
          const std::string where = "value_dim " + std::to_string(value_dim) + " keys " +
                                    std::to_string(keys) + " row " + std::to_string(r) + " e " +
                                    std::to_string(e);
          ASSERT_NEAR(from_pairs[r * value_stride + e], want, tolerance) << "pairs, " << where;
          ASSERT_NEAR(from_rows[r * value_stride + e], want, tolerance) << "rows, " << where;
        }
      }
    }
  }
}

// Worked values of the rounding: bfloat16 keeps 8 significant bits, so 1 + 2^-8 lies halfway
// between 1 and 1 + 2^-7 and goes to the even 1; 1 + 3 2^-8 goes to the even 1 + 2^-6; and
// 1 + 2^-8 + 2^-20 is past halfway and goes up.
TEST(AttentionBf16, WeightsRoundToNearestEven) {
  SKIP_WITHOUT_BF16();
  const float weights[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, 0.5f};
  const float expected[4] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, 0.5f};
  std::vector<uint16_t> one(kFloatsPerVector, Bits(1.0f));
  std::vector<uint32_t> pairs(kFloatsPerVector);
  PairValueRowsBf16(one.data(), 0, 1, kFloatsPerVector, kFloatsPerVector, pairs.data());
  std::vector<float> p(4 * 64, 0.0f);
  for (size_t r = 0; r < 4; ++r) p[r * 64] = weights[r];
  const float correction[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> o(4 * kFloatsPerVector, 0.0f);
  WeightedValuesBf16(p.data(), 64, 1, pairs.data(), kFloatsPerVector, correction, o.data(),
                     kFloatsPerVector);
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(o[r * kFloatsPerVector], expected[r]) << "row " << r;
}

}  // namespace
}  // namespace posenc::internal
