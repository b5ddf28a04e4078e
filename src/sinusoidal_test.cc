#include "posenc/sinusoidal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <set>
#include <utility>
#include <vector>

#include "posenc/error.h"

namespace posenc {
namespace {

// The expected values below are sin and cos of the literal angles, evaluated outside posenc.
TEST(Sinusoidal, FourColumnsAtPositionsZeroOneTwo) {
  // d = 4: pair 0 turns at 1 rad per position, pair 1 at 10000^(-2/4) = 0.01.
  const Sinusoidal spec{.dim = 4};
  std::vector<float> out(3 * 4);
  FillSinusoidalTable(spec, 3, out);
  const double expected[3][4] = {
      {0.0, 1.0, 0.0, 1.0},
      {0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653},
      {0.9092974268256817, -0.4161468365471424, 0.01999866669333308, 0.9998000066665778},
  };
  for (int p = 0; p < 3; ++p) {
    for (int j = 0; j < 4; ++j) {
      SCOPED_TRACE(testing::Message() << "pos " << p << " column " << j);
      EXPECT_FLOAT_EQ(out[p * 4 + j], static_cast<float>(expected[p][j]));
      EXPECT_NEAR(SinusoidalValue(spec, p, j), expected[p][j], 1e-15);
    }
  }
}

TEST(Sinusoidal, LargePositionsKeepDoublePrecisionAngles) {
  // At position 10^6 a float32 angle is a multiple of 1/16 rad; the double angle is exact here.
  const Sinusoidal spec{.dim = 4};
  const std::vector<int64_t> positions{1000000, 3};
  std::vector<float> out(2 * 4);
  FillSinusoidal(spec, positions, out);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(-0.34999350217129294));  // sin(10^6)
  EXPECT_FLOAT_EQ(out[2], static_cast<float>(-0.30561438888825215));  // sin(10^6 * 0.01)
  EXPECT_FLOAT_EQ(out[3], static_cast<float>(-0.9521553682590148));   // cos(10^6 * 0.01)
  EXPECT_NEAR(SinusoidalValue(spec, 1000000, 0), -0.34999350217129294, 1e-12);
  // Arbitrary, unordered positions give the same values as the table rows.
  EXPECT_FLOAT_EQ(out[4], static_cast<float>(std::sin(3.0)));
  EXPECT_FLOAT_EQ(out[7], static_cast<float>(std::cos(0.03)));
}

TEST(Sinusoidal, OddDimensionEndsWithALoneSine) {
  // d = 5: column 4 is sin(p * 10000^(-4/5)), 10000^(-0.8) = 0.000630957344480193.
  const Sinusoidal spec{.dim = 5};
  std::vector<float> out(4 * 5);
  FillSinusoidalTable(spec, 4, out);
  EXPECT_NEAR(SinusoidalValue(spec, 3, 4), 0.0018928709030918874, 1e-15);
  EXPECT_FLOAT_EQ(out[3 * 5 + 4], static_cast<float>(0.0018928709030918874));
  EXPECT_NEAR(spec.Frequency(4), 0.000630957344480193, 1e-17);
  // Columns 2 and 3 are a (sin, cos) pair at 10000^(-2/5).
  EXPECT_DOUBLE_EQ(spec.Frequency(2), spec.Frequency(3));
  EXPECT_NEAR(spec.Frequency(2), std::pow(10000.0, -0.4), 1e-15);
}

TEST(Sinusoidal, CustomBase) {
  // base 100, d = 4: pair 1 turns at 100^(-1/2) = 0.1 rad per position.
  const Sinusoidal spec{.dim = 4, .base = 100.0};
  EXPECT_NEAR(spec.Frequency(2), 0.1, 1e-16);
  EXPECT_NEAR(SinusoidalValue(spec, 5, 2), 0.479425538604203, 1e-15);  // sin(0.5)
}

TEST(Sinusoidal, WavelengthsFormAGeometricProgression) {
  // d = 32: pair i has wavelength 2 pi * 10000^(2i / 32); pairs 0, 4, 12 give 2 pi * 1, 10, 1000.
  const Sinusoidal spec{.dim = 32};
  const double two_pi = 2.0 * std::numbers::pi;
  EXPECT_NEAR(spec.Wavelength(0), two_pi, 1e-12);
  EXPECT_NEAR(spec.Wavelength(8), 10.0 * two_pi, 1e-11);
  EXPECT_NEAR(spec.Wavelength(24), 1000.0 * two_pi, 1e-9);
  EXPECT_NEAR(spec.Wavelength(24), 6283.185307179586, 1e-9);
  EXPECT_DOUBLE_EQ(spec.Wavelength(9), spec.Wavelength(8));  // sin and cos of one pair
  EXPECT_EQ(spec.Frequency(0), 1.0);                         // base^0
}

class SinusoidalTable64x32 : public testing::Test {
 protected:
  static constexpr int64_t kTokens = 64;
  static constexpr int64_t kDim = 32;

  SinusoidalTable64x32() : table_(kTokens * kDim) {
    FillSinusoidalTable(Sinusoidal{.dim = kDim}, kTokens, table_);
  }

  float At(int64_t pos, int64_t column) const { return table_[pos * kDim + column]; }

  double Dot(int64_t p, int64_t q) const {
    double sum = 0.0;
    for (int64_t j = 0; j < kDim; ++j) sum += double{At(p, j)} * double{At(q, j)};
    return sum;
  }

  std::vector<float> table_;
};

TEST_F(SinusoidalTable64x32, EveryRowHasSquaredNormHalfTheDimension) {
  // sin^2 + cos^2 = 1 for each of the 16 pairs.
  for (int64_t p = 0; p < kTokens; ++p) EXPECT_NEAR(Dot(p, p), 16.0, 1e-5) << "row " << p;
}

TEST_F(SinusoidalTable64x32, SimilarityDependsOnlyOnDistance) {
  // PE(p) . PE(q) = sum_i cos((p - q) w_i), a function of |p - q| alone.
  EXPECT_NEAR(Dot(20, 19), Dot(20, 21), 1e-5);
  EXPECT_NEAR(Dot(20, 18), Dot(20, 22), 1e-5);
  EXPECT_NEAR(Dot(20, 10), Dot(20, 30), 1e-5);
  EXPECT_NEAR(Dot(5, 9), Dot(40, 44), 1e-5);
  EXPECT_GT(Dot(20, 19), Dot(20, 18) + 0.1);

  std::vector<std::pair<double, int64_t>> ranked;
  for (int64_t q = 0; q < kTokens; ++q) ranked.emplace_back(Dot(20, q), q);
  std::sort(ranked.begin(), ranked.end(), std::greater<>());
  EXPECT_EQ(ranked[0].second, 20);
  EXPECT_EQ((std::set<int64_t>{ranked[1].second, ranked[2].second}), (std::set<int64_t>{19, 21}));
  EXPECT_EQ((std::set<int64_t>{ranked[3].second, ranked[4].second}), (std::set<int64_t>{18, 22}));
}

TEST_F(SinusoidalTable64x32, ShiftingByKRotatesEveryPairByKTimesItsFrequency) {
  // sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b with
  // a = p w_i, b = k w_i: PE(p + k) is a fixed rotation of PE(p), independent of p.
  for (int64_t i = 0; i < kDim / 2; ++i) {
    const double w = std::pow(10000.0, -2.0 * static_cast<double>(i) / kDim);
    for (int64_t k = 0; k < 24; ++k) {
      const double c = std::cos(k * w), s = std::sin(k * w);
      for (int64_t p = 0; p + k < kTokens; p += 3) {
        const double sin_p = At(p, 2 * i), cos_p = At(p, 2 * i + 1);
        ASSERT_NEAR(At(p + k, 2 * i), sin_p * c + cos_p * s, 1e-5) << "i " << i << " p " << p;
        ASSERT_NEAR(At(p + k, 2 * i + 1), cos_p * c - sin_p * s, 1e-5) << "i " << i << " p " << p;
      }
    }
  }
}

TEST(Sinusoidal, InvalidSpecsAreRejected) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const Sinusoidal& bad :
       {Sinusoidal{.dim = 0}, Sinusoidal{.dim = -4}, Sinusoidal{.dim = 4, .base = nan},
        Sinusoidal{.dim = 4, .base = inf}, Sinusoidal{.dim = 4, .base = 1.0},
        Sinusoidal{.dim = 4, .base = 0.5}, Sinusoidal{.dim = 4, .base = -10000.0}}) {
    SCOPED_TRACE(testing::Message() << "dim " << bad.dim << " base " << bad.base);
    EXPECT_THROW(bad.Validate(), Error);
    EXPECT_THROW(bad.Frequency(0), Error);
    EXPECT_THROW(SinusoidalValue(bad, 0, 0), Error);
    std::vector<float> out(4, -7.0f);
    EXPECT_THROW(FillSinusoidalTable(bad, 1, out), Error);
    EXPECT_EQ(out, std::vector<float>(4, -7.0f));
  }
  try {
    Sinusoidal{.dim = 4, .base = 1.0}.Validate();
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[sinusoidal] base must be finite and > 1, got 1");
  }
  try {
    Sinusoidal{.dim = 0}.Validate();
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[sinusoidal] dim must be > 0, got 0");
  }
}

TEST(Sinusoidal, ColumnAndPositionOutOfRangeAreRejected) {
  const Sinusoidal spec{.dim = 4};
  EXPECT_THROW(spec.Frequency(4), Error);
  EXPECT_THROW(spec.Frequency(-1), Error);
  EXPECT_THROW(spec.Wavelength(4), Error);
  EXPECT_THROW(SinusoidalValue(spec, 0, 4), Error);
  EXPECT_THROW(SinusoidalValue(spec, -1, 0), Error);
  try {
    SinusoidalValue(spec, 0, 4);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[sinusoidal] column must be in [0, dim) = [0, 4), got 4");
  }
}

TEST(Sinusoidal, BadPositionsOrSizesLeaveOutUntouched) {
  const Sinusoidal spec{.dim = 4};
  const std::vector<float> sentinel(3 * 4, -7.0f);
  std::vector<float> out = sentinel;
  const std::vector<int64_t> negative{0, -3, 1};
  try {
    FillSinusoidal(spec, negative, out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[sinusoidal] positions[1] must be >= 0, got -3");
  }
  EXPECT_EQ(out, sentinel);

  const std::vector<int64_t> two{0, 1};
  try {
    FillSinusoidal(spec, two, out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[sinusoidal] out.size() must equal tokens (2) * dim (4), got 12");
  }
  EXPECT_EQ(out, sentinel);
  EXPECT_THROW(FillSinusoidalTable(spec, 4, out), Error);
  EXPECT_THROW(FillSinusoidalTable(spec, -1, out), Error);
  EXPECT_EQ(out, sentinel);

  // A dim so large that tokens * dim wraps around to 0 must not pass for an empty out.
  const Sinusoidal huge{.dim = int64_t{1} << 62};
  const std::vector<int64_t> four{0, 1, 2, 3};
  EXPECT_THROW(FillSinusoidal(huge, four, std::span<float>()), Error);
}

TEST(Sinusoidal, NoTokensIsAnEmptyTable) {
  const Sinusoidal spec{.dim = 8};
  EXPECT_NO_THROW(FillSinusoidalTable(spec, 0, std::span<float>()));
  EXPECT_NO_THROW(FillSinusoidal(spec, std::span<const int64_t>(), std::span<float>()));
}

}  // namespace
}  // namespace posenc
