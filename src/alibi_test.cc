#include "posenc/alibi.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/positions.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;

// 2^(-k/2) for odd k, to 20 digits (sqrt(2)/2^((k+1)/2)).
constexpr double kTwoToMinusHalf = 0.70710678118654752440;
constexpr double kTwoToMinus1_5 = 0.35355339059327376220;
constexpr double kTwoToMinus2_5 = 0.17677669529663688110;
constexpr double kTwoToMinus3_5 = 0.08838834764831844055;

Alibi Make(int64_t num_heads, double max_bias = 8.0, int64_t head_offset = 0,
           int64_t shard_heads = 0) {
  Alibi alibi;
  alibi.num_heads = num_heads;
  alibi.max_bias = max_bias;
  alibi.head_offset = head_offset;
  alibi.shard_heads = shard_heads;
  return alibi;
}

TEST(AlibiSlopes, EightHeadsArePaperSlopesExactly) {
  // Press et al.: 1/2, 1/4, ..., 1/256.
  const std::vector<double> want{0.5,     0.25,     0.125,     0.0625,
                                 0.03125, 0.015625, 0.0078125, 0.00390625};
  EXPECT_EQ(AlibiSlopes(Make(8)), want);
}

TEST(AlibiSlopes, PowerOfTwoCountsFormAGeometricSequence) {
  // 16 heads: 2^(-k/2), k = 1..16; 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; 1 head: 2^-8.
  const std::vector<double> s16 = AlibiSlopes(Make(16));
  ASSERT_EQ(s16.size(), 16u);
  EXPECT_DOUBLE_EQ(s16[0], kTwoToMinusHalf);
  EXPECT_EQ(s16[1], 0.5);
  EXPECT_DOUBLE_EQ(s16[2], kTwoToMinus1_5);
  EXPECT_EQ(s16[15], 0.00390625);
  EXPECT_EQ(AlibiSlopes(Make(4)), (std::vector<double>{0.25, 0.0625, 0.015625, 0.00390625}));
  EXPECT_EQ(AlibiSlopes(Make(1)), std::vector<double>{0.00390625});
}

TEST(AlibiSlopes, TwelveHeadsTakeTheOddSlopesOfSixteen) {
  // n0 = 8: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (every other slope of the
  // 16-head sequence, starting with the first).
  const std::vector<double> s = AlibiSlopes(Make(12));
  ASSERT_EQ(s.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], 1.0 / (2 << h)) << h;  // 2^-(h+1)
  EXPECT_DOUBLE_EQ(s[8], kTwoToMinusHalf);
  EXPECT_DOUBLE_EQ(s[9], kTwoToMinus1_5);
  EXPECT_DOUBLE_EQ(s[10], kTwoToMinus2_5);
  EXPECT_DOUBLE_EQ(s[11], kTwoToMinus3_5);
}

TEST(AlibiSlopes, SixAndThreeHeads) {
  // 6: n0 = 4 gives 2^-2, 2^-4, 2^-6, 2^-8; then the 8-head slopes 2^-1, 2^-3.
  EXPECT_EQ(AlibiSlopes(Make(6)),
            (std::vector<double>{0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}));
  // 3: n0 = 2 gives 2^-4, 2^-8; then the 4-head slope 2^-2 (as BLOOM's get_slopes(3)).
  EXPECT_EQ(AlibiSlopes(Make(3)), (std::vector<double>{0.0625, 0.00390625, 0.25}));
}

TEST(AlibiSlopes, LlamaCppMaxBias) {
  // MPT-style alibi_bias_max = 16 with 4 heads: 2^-4, 2^-8, 2^-12, 2^-16.
  EXPECT_EQ(AlibiSlopes(Make(4, 16.0)),
            (std::vector<double>{0.0625, 0.00390625, 0.000244140625, 0.0000152587890625}));
}

TEST(AlibiSlopes, MatchLlamaCppPowerFormulaForManyCounts) {
  // llama.cpp: m0 = 2^(-max_bias / n0), m1 = 2^(-max_bias / 2 / n0); head h < n0 gets
  // m0^(h + 1), later heads m1^(2 (h - n0) + 1).
  for (double max_bias : {8.0, 16.0, 5.5}) {
    for (int64_t n = 1; n <= 40; ++n) {
      int64_t n0 = 1;
      while (n0 * 2 <= n) n0 *= 2;
      const double m0 = std::pow(2.0, -max_bias / static_cast<double>(n0));
      const double m1 = std::pow(2.0, -max_bias / 2.0 / static_cast<double>(n0));
      const std::vector<double> s = AlibiSlopes(Make(n, max_bias));
      ASSERT_EQ(static_cast<int64_t>(s.size()), n);
      for (int64_t h = 0; h < n; ++h) {
        const double want = h < n0 ? std::pow(m0, static_cast<double>(h + 1))
                                   : std::pow(m1, static_cast<double>(2 * (h - n0) + 1));
        EXPECT_NEAR(s[h], want, 1e-14 * want) << "n " << n << " h " << h << " bias " << max_bias;
      }
    }
  }
}

TEST(AlibiSlopes, ShardIsASliceOfTheFullList) {
  const std::vector<double> full8 = AlibiSlopes(Make(8));
  EXPECT_EQ(AlibiSlopes(Make(8, 8.0, 4, 4)), std::vector<double>(full8.begin() + 4, full8.end()));
  EXPECT_EQ(AlibiSlopes(Make(8, 8.0, 4)), std::vector<double>(full8.begin() + 4, full8.end()));
  EXPECT_EQ(AlibiSlopes(Make(8, 8.0, 2, 3)),
            (std::vector<double>{0.125, 0.0625, 0.03125}));  // heads 2, 3, 4
  // Across the power-of-two boundary of 12 heads: heads 6..9.
  const std::vector<double> shard = AlibiSlopes(Make(12, 8.0, 6, 4));
  ASSERT_EQ(shard.size(), 4u);
  EXPECT_EQ(shard[0], 0.0078125);
  EXPECT_EQ(shard[1], 0.00390625);
  EXPECT_DOUBLE_EQ(shard[2], kTwoToMinusHalf);
  EXPECT_DOUBLE_EQ(shard[3], kTwoToMinus1_5);
  EXPECT_EQ(Make(12, 8.0, 6, 4).LocalHeads(), 4);
  EXPECT_EQ(Make(12, 8.0, 6).LocalHeads(), 6);
}

TEST(AlibiBias, IsMinusSlopeTimesDistance) {
  EXPECT_EQ(AlibiBias(0.5, 5, 2), -1.5);
  EXPECT_EQ(AlibiBias(0.5, 2, 2), 0.0);
  EXPECT_EQ(AlibiBias(0.25, 2, 5), 0.75);  // a key after the query (non-causal)
  EXPECT_EQ(AlibiBias(0.00390625, 1'000'000, 0), -3906.25);
  // The largest distances, both ways, exact and with the right sign.
  EXPECT_EQ(AlibiBias(0.5, kMaxPosition, 0), -0.5 * 4294967296.0);
  EXPECT_EQ(AlibiBias(0.5, 0, kMaxPosition), 0.5 * 4294967296.0);
}

TEST(AlibiValidate, AcceptsValidShards) {
  EXPECT_NO_THROW(Make(8).Validate());
  EXPECT_NO_THROW(Make(8, 8.0, 7).Validate());
  EXPECT_NO_THROW(Make(8, 8.0, 0, 8).Validate());
  EXPECT_NO_THROW(Make(8, 8.0, 7, 1).Validate());
}

TEST(AlibiValidate, RejectsBadFields) {
  ExpectError([] { Make(0).Validate(); }, "[alibi] num_heads must be positive, got 0");
  ExpectError([] { AlibiSlopes(Make(-3)); }, "[alibi] num_heads must be positive, got -3");
  ExpectError([] { Make(8, 0.0).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got 0");
  ExpectError([] { Make(8, -8.0).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got -8");
  ExpectError([] { Make(8, std::numeric_limits<double>::quiet_NaN()).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got nan");
  ExpectError([] { Make(8, std::numeric_limits<double>::infinity()).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got inf");
  // Past 126 the last slope is no normal float32; 1e308 made it 0, ALiBi silently off.
  ExpectError([] { Make(8, 127.0).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got 127");
  ExpectError([] { Make(8, 1e308).Validate(); },
              "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
              "normal float32), got 1e+308");
  EXPECT_NO_THROW(Make(8, 126.0).Validate());
  ExpectError([] { Make(8, 8.0, -1).Validate(); },
              "[alibi] head_offset must be >= 0 and < num_heads (8), got -1");
  ExpectError([] { Make(8, 8.0, 8).Validate(); },
              "[alibi] head_offset must be >= 0 and < num_heads (8), got 8");
  ExpectError([] { Make(8, 8.0, 0, -2).Validate(); },
              "[alibi] shard_heads must be >= 0 and <= num_heads - head_offset (8), got -2");
  ExpectError([] { AlibiSlopes(Make(8, 8.0, 4, 5)); },
              "[alibi] shard_heads must be >= 0 and <= num_heads - head_offset (4), got 5");
  ExpectError([] { Make(8, 8.0, 1, std::numeric_limits<int64_t>::max()).Validate(); },
              "[alibi] shard_heads must be >= 0 and <= num_heads - head_offset (7), got "
              "9223372036854775807");
}

TEST(AlibiBias, PositionsFollowTheRuleOfEveryApi) {
  // Positions in [0, 2^32], as RoPE and attention take them: 2^62 and -2^62 once overflowed
  // int64 in the distance and gave a bias of the wrong sign.
  testing_support::ExpectError([] { AlibiBias(0.5, int64_t{1} << 62, -(int64_t{1} << 62)); },
                               "[alibi_bias] query_pos must be <= 2^32 = 4294967296 (kMaxPosition, "
                               "where float32 RoPE stops being accurate), got 4611686018427387904");
  testing_support::ExpectError([] { AlibiBias(0.5, 3, -1); },
                               "[alibi_bias] key_pos must be >= 0, got -1");
  testing_support::ExpectError([] { AlibiBias(std::numeric_limits<double>::infinity(), 3, 1); },
                               "[alibi_bias] slope must be finite, got inf");
}

}  // namespace
}  // namespace posenc
