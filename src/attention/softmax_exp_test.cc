// ExpOfNonPositive (attention_softmax-inl.h), the softmax's exp, against exp in double on every
// SIMD target this binary has: within 1 float32 ulp down to ln(2^-126) and up to 1 (rounding may
// take the backward pass's s - lse a little above 0), 0 below ln(2^-126) and at -inf,
// NaN at NaN (the softmax carries a NaN score through it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/softmax_exp_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

// After highway.h: the function under test is written against its per-target namespace.
#include "attention/attention_softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

// out[i] = ExpOfNonPositive(x[i]) for `count` floats, a multiple of every target's lanes.
void ExpOfNonPositiveArray(const float* x, float* out, size_t count) {
  const hn::ScalableTag<float> df;
  for (size_t i = 0; i < count; i += hn::Lanes(df)) {
    hn::StoreU(ExpOfNonPositive(df, hn::LoadU(df, x + i)), df, out + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "simd/simd_targets_for_test.h"

namespace posenc {
namespace {

HWY_EXPORT(ExpOfNonPositiveArray);

constexpr float kLowest = -87.33654f;  // ln(2^-126), where float32's normal range ends

// The inputs: a dense grid over [-90, 0] (both sides of kLowest) and a coarser one over (0, 1],
// the points where the range reduction changes n (k ln 2 and halfway between, a float either
// side), tiny and zero inputs, -inf and NaN; padded with zeros to whole vectors of every target.
std::vector<float> Inputs() {
  std::vector<float> x;
  constexpr int kGrid = 1 << 18;
  for (int i = 0; i <= kGrid; ++i) x.push_back(static_cast<float>(-90.0 * i / kGrid));
  for (int i = 1; i <= 4096; ++i) x.push_back(static_cast<float>(i / 4096.0));
  for (int k = 0; k <= 126; ++k) {
    for (const double at : {k * std::log(2.0), (k + 0.5) * std::log(2.0)}) {
      const auto f = static_cast<float>(-at);
      x.push_back(f);
      x.push_back(std::nextafter(f, 0.0f));
      x.push_back(std::nextafter(f, -1.0f));
    }
  }
  for (const float f :
       {0.0f, -0.0f, -1e-45f, -1e-30f, -1e-7f, kLowest, std::nextafter(kLowest, 0.0f),
        std::nextafter(kLowest, -100.0f), -1000.0f, -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(f);
  }
  while (x.size() % 64 != 0) x.push_back(0.0f);
  return x;
}

TEST(SoftmaxExp, WithinOneUlpOfExpInDoubleOnEveryTarget) {
  const std::vector<float> x = Inputs();
  testing_support::ForEachSimdTarget([&](int64_t) {
    std::vector<float> out(x.size(), -1.0f);
    HWY_DYNAMIC_DISPATCH(ExpOfNonPositiveArray)(x.data(), out.data(), x.size());
    int checked = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(out[i])) << "exp(NaN) = " << out[i];
        continue;
      }
      if (x[i] < kLowest) {
        ASSERT_EQ(out[i], 0.0f) << "x = " << x[i];
        continue;
      }
      const double exact = std::exp(static_cast<double>(x[i]));
      const auto nearest = static_cast<float>(exact);
      const double ulp = std::nextafter(nearest, 4.0f) - nearest;
      ASSERT_LE(std::abs(out[i] - exact), 1.0 * ulp) << "x = " << x[i] << ", exp(x) = " << exact;
      ++checked;
    }
    EXPECT_GT(checked, 1 << 17);  // most of the grid lies above kLowest
  });
}

}  // namespace
}  // namespace posenc
#endif  // HWY_ONCE
