// The AVX512-BF16 narrowing and rotation of bfloat16 rows (rope_bf16.h) against the portable
// rounding, bit for bit: directly on values chosen for their rounding, and through ApplyRope on
// every compiled SIMD target (the AVX-512 targets take the native rotation on CPUs with
// AVX512-BF16, the others the portable one).
#include "rope_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "posenc/heads.h"
#include "posenc/rope.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"

namespace posenc {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Every bfloat16 (every upper half: both signs, zeros, denormals, normals, the largest finite
// value, inf and NaNs) with lower halves that round down, tie (to an even and an odd upper half),
// round up (past the largest finite value: to inf) or carry into the exponent, plus random bits.
std::vector<float> NarrowingCases() {
  std::vector<float> values;
  constexpr uint32_t kLowerHalves[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
  for (uint32_t upper = 0; upper <= 0xFFFF; ++upper) {
    for (const uint32_t lower : kLowerHalves) values.push_back(FromBits(upper << 16 | lower));
  }
  std::mt19937 gen(7);
  for (int i = 0; i < (1 << 20); ++i) values.push_back(FromBits(gen()));
  return values;
}

void ExpectSameBitsAsFromFloat(const std::vector<float>& in, const std::string& what) {
  std::vector<uint16_t> out(in.size() + 1, 0xABCD);
  internal::NarrowToBf16Native(in.data(), in.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], BFloat16::FromFloat(in[i]).bits)
        << what << ": float32 bits 0x" << std::hex << Bits(in[i]) << " at " << std::dec << i;
  }
  EXPECT_EQ(out[in.size()], 0xABCD) << what << ": wrote past the end";
}

TEST(RopeBf16, NativeNarrowingGivesThePortableBits) {
  if (!internal::HasBf16Narrowing()) {
    GTEST_SKIP() << "this CPU (or compiler) has no AVX512-BF16: the native narrowing is never "
                    "used here, so there is nothing to compare";
  }
  std::vector<float> values = NarrowingCases();
  // In order, a denormal's vector is all denormals; shuffled, denormals, NaNs and ties share
  // vectors with ordinary values.
  ExpectSameBitsAsFromFloat(values, "in order");
  std::shuffle(values.begin(), values.end(), std::mt19937(11));
  ExpectSameBitsAsFromFloat(values, "shuffled");
  // Every length up to two steps, for the masked tail.
  for (size_t n = 0; n <= 65; ++n) {
    ExpectSameBitsAsFromFloat(
        std::vector<float>(values.begin() + 1000 * n, values.begin() + 1000 * n + n),
        "length " + std::to_string(n));
  }
}

// A bfloat16 that is often special: denormals (whose products are denormal too), zeros, inf,
// NaN, values near the largest finite one (whose rotation overflows or rounds up to inf),
// otherwise a normal value of moderate size.
BFloat16 AwkwardValue(std::mt19937& gen) {
  const uint32_t r = gen();
  const uint16_t sign = (r & 1) != 0 ? 0x8000 : 0;
  const uint16_t mantissa = static_cast<uint16_t>((r >> 1) & 0x7F);
  const uint16_t kinds[] = {
      static_cast<uint16_t>(sign | mantissa),           // a denormal or zero
      static_cast<uint16_t>(sign | 0x0080 | mantissa),  // among the smallest normals
      static_cast<uint16_t>(sign | 0x7F80),             // inf
      static_cast<uint16_t>(sign | 0x7FC0 | mantissa),  // NaN
      static_cast<uint16_t>(sign | 0x7F40 | mantissa),  // near the largest finite value
      static_cast<uint16_t>(sign | (0x3C00 + ((r >> 12) & 0x7FF))),  // ordinary
  };
  const uint32_t kind = (r >> 8) % 16;
  return {kinds[std::min<uint32_t>(kind, 5)]};
}

// The bfloat16 kernel rotates in float32 and rounds once, so on every target its result is the
// float32 kernel's result on the same (widened) values, rounded by BFloat16::FromFloat: the
// native narrowing on the AVX-512 targets of a CPU with AVX512-BF16, the portable one elsewhere.
void CheckAgainstFloat32(RopeLayout layout, int64_t tokens, int64_t heads, int64_t head_dim,
                         int64_t rotary_dim, int64_t rotary_offset, uint32_t seed) {
  Rope rope = Rope::Default(head_dim, 10000.0, layout, rotary_dim, rotary_offset);
  rope.attention_factor = seed % 2 == 0 ? 1.0 : 1.25;
  std::mt19937 gen(seed);
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[t] = t % 7 == 6 ? t * 31 : t;  // runs and jumps
  const size_t size = static_cast<size_t>(tokens * heads * head_dim);
  std::vector<BFloat16> x(size);
  for (auto& v : x) v = AwkwardValue(gen);
  std::vector<float> wide(size);
  for (size_t j = 0; j < size; ++j) wide[j] = x[j].ToFloat();
  std::vector<BFloat16> out(size, BFloat16{0x1234});

  ApplyRope(rope, positions, Heads<float>::Dense(wide.data(), tokens, heads, head_dim));
  std::vector<BFloat16> in_place = x;
  ApplyRope(rope, positions, Heads<BFloat16>::Dense(in_place.data(), tokens, heads, head_dim));
  ApplyRope(rope, positions, Heads<const BFloat16>::Dense(x.data(), tokens, heads, head_dim),
            Heads<BFloat16>::Dense(out.data(), tokens, heads, head_dim));
  for (size_t j = 0; j < size; ++j) {
    if (std::isnan(wide[j])) {
      // NaN stays NaN; its payload is not part of the contract (which operand's payload an x86
      // operation keeps depends on the order the compiler gives them, e.g. without optimisation).
      ASSERT_TRUE(std::isnan(in_place[j].ToFloat())) << "in place, element " << j;
      ASSERT_TRUE(std::isnan(out[j].ToFloat())) << "out of place, element " << j;
      continue;
    }
    const uint16_t want = BFloat16::FromFloat(wide[j]).bits;
    ASSERT_EQ(in_place[j].bits, want) << "in place, element " << j << ", input 0x" << std::hex
                                      << x[j].bits << ", float32 result " << wide[j];
    ASSERT_EQ(out[j].bits, want) << "out of place, element " << j << ", input 0x" << std::hex
                                 << x[j].bits << ", float32 result " << wide[j];
  }
}

TEST(RopeBf16, KernelRoundsTheFloat32ResultOnEveryTarget) {
  testing_support::ForEachSimdTarget([](int64_t) {
    uint32_t seed = 1;
    for (const RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
      // Pair counts with no whole step of 32, one, two, and every tail length.
      for (int64_t pairs = 1; pairs <= 70; ++pairs) {
        const int64_t offset = pairs % 3;
        SCOPED_TRACE("pairs " + std::to_string(pairs));
        CheckAgainstFloat32(layout, 3, 2, offset + 2 * pairs + pairs % 2, 2 * pairs, offset,
                            seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
      // Llama's head, large enough for threads.
      CheckAgainstFloat32(layout, 300, 8, 128, 128, 0, seed++);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

}  // namespace
}  // namespace posenc
