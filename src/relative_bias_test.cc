#include "posenc/relative_bias.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;

RelativeBuckets Make(int64_t num_buckets, int64_t max_distance, bool bidirectional) {
  RelativeBuckets buckets;
  buckets.num_buckets = num_buckets;
  buckets.max_distance = max_distance;
  buckets.bidirectional = bidirectional;
  return buckets;
}

// Worked by hand from the definition (relative = key_pos - query_pos).
TEST(RelativePositionBucket, T5DefaultsWorkedByHand) {
  const RelativeBuckets encoder = Make(32, 128, true);  // 16 buckets a side, max_exact 8
  EXPECT_EQ(RelativePositionBucket(encoder, 0), 0);
  EXPECT_EQ(RelativePositionBucket(encoder, -1), 1);
  EXPECT_EQ(RelativePositionBucket(encoder, 1), 16 + 1);  // keys after: the upper half
  EXPECT_EQ(RelativePositionBucket(encoder, -7), 7);      // the last exact bucket
  EXPECT_EQ(RelativePositionBucket(encoder, -8), 8);      // log(8 / 8) = 0: 8 + 0
  // 8 + trunc(ln(12 / 8) / ln(128 / 8) * 8) = 8 + trunc(0.4055 / 2.7726 * 8 = 1.17) = 9.
  EXPECT_EQ(RelativePositionBucket(encoder, -12), 9);
  EXPECT_EQ(RelativePositionBucket(encoder, 12), 16 + 9);
  // At max_distance: 8 + 8 = 16, clamped to the side's last bucket 15.
  EXPECT_EQ(RelativePositionBucket(encoder, -128), 15);
  EXPECT_EQ(RelativePositionBucket(encoder, 128), 31);
  EXPECT_EQ(RelativePositionBucket(encoder, int64_t{1} << 32), 31);

  const RelativeBuckets decoder = Make(32, 128, false);  // 32 buckets, max_exact 16
  EXPECT_EQ(RelativePositionBucket(decoder, 0), 0);
  EXPECT_EQ(RelativePositionBucket(decoder, -1), 1);
  EXPECT_EQ(RelativePositionBucket(decoder, 5), 0);  // keys after the query: bucket 0
  EXPECT_EQ(RelativePositionBucket(decoder, -15), 15);
  EXPECT_EQ(RelativePositionBucket(decoder, -16), 16);
  // 16 + trunc(ln(20 / 16) / ln(128 / 16) * 16) = 16 + trunc(0.2231 / 2.0794 * 16 = 1.72) = 17.
  EXPECT_EQ(RelativePositionBucket(decoder, -20), 17);
  // ln(127 / 16) / ln(8) * 16 = 15.94: 16 + 15 = 31, the last bucket already.
  EXPECT_EQ(RelativePositionBucket(decoder, -127), 31);
  EXPECT_EQ(RelativePositionBucket(decoder, -(int64_t{1} << 32)), 31);
}

// Hugging Face's own function, run on -5000..5000 and around powers of two up to 2^32
// (tests/golden/t5_buckets/README.md): every bucket must match exactly.
TEST(RelativePositionBucket, MatchesHuggingFaceGolden) {
  const std::vector<std::string> files = {
      "t5_bidirectional",      "t5_causal",      "b64_d256_bidirectional", "b64_d256_causal",
      "b16_d64_bidirectional", "b16_d64_causal", "b8_d20_bidirectional",   "b8_d20_causal"};
  for (const std::string& name : files) {
    const nlohmann::json golden = testing_support::GoldenJson("t5_buckets/" + name + ".json");
    ASSERT_TRUE(golden.is_object()) << name;
    const RelativeBuckets buckets =
        Make(golden["num_buckets"].get<int64_t>(), golden["max_distance"].get<int64_t>(),
             golden["bidirectional"].get<bool>());
    const auto relative = golden["relative_position"].get<std::vector<int64_t>>();
    const auto want = golden["bucket"].get<std::vector<int64_t>>();
    ASSERT_EQ(relative.size(), want.size()) << name;
    ASSERT_GT(relative.size(), 10000u) << name;
    for (size_t i = 0; i < relative.size(); ++i) {
      ASSERT_EQ(RelativePositionBucket(buckets, relative[i]), want[i])
          << name << " relative_position " << relative[i];
    }
  }
}

TEST(RelativePositionBucket, MonotoneInDistanceOnEachSide) {
  for (const bool bidirectional : {true, false}) {
    const RelativeBuckets buckets = Make(32, 128, bidirectional);
    for (int64_t n = 1; n < 1000; ++n) {
      EXPECT_LE(RelativePositionBucket(buckets, -n), RelativePositionBucket(buckets, -n - 1));
      EXPECT_LE(RelativePositionBucket(buckets, n), RelativePositionBucket(buckets, n + 1));
    }
  }
}

TEST(RelativeBucketsErrors, EachRuleNamesItsKey) {
  ExpectError([] { RelativePositionBucket(Make(0, 128, true), 0); },
              "[relative_buckets] num_buckets must be > 0, got 0");
  ExpectError([] { RelativePositionBucket(Make(-4, 128, false), 0); },
              "[relative_buckets] num_buckets must be > 0, got -4");
  // Bidirectional: 3 / 2 / 2 = 0 exact buckets.
  ExpectError([] { Make(3, 128, true).Validate(); },
              "[relative_buckets] num_buckets must give max_exact = num_buckets / 4 >= 1 "
              "(bidirectional), got 3");
  ExpectError([] { Make(1, 128, false).Validate(); },
              "[relative_buckets] num_buckets must give max_exact = num_buckets / 2 >= 1 "
              "(causal), got 1");
  ExpectError([] { Make(32, 8, true).Validate(); },
              "[relative_buckets] max_distance must be > max_exact (8), got 8");
  ExpectError([] { Make(32, -5, false).Validate(); },
              "[relative_buckets] max_distance must be > max_exact (16), got -5");
  ExpectError([] { RelativePositionBucket(Make(32, 128, true), (int64_t{1} << 32) + 1); },
              "[relative_position_bucket] relative_position must be in [-2^32, 2^32] (a "
              "difference of two positions), got 4294967297");
  Make(4, 2, true).Validate();  // the smallest: one exact bucket a side
}

TEST(RelativeBiasErrors, TableHeadsAndValues) {
  std::vector<float> table(32 * 4, 0.0f);
  RelativeBias bias;
  bias.num_heads = 4;
  bias.table = table;
  bias.Validate();
  bias.num_heads = 0;
  ExpectError([&] { bias.Validate(); }, "[relative_bias] num_heads must be > 0, got 0");
  bias.num_heads = 3;
  ExpectError([&] { bias.Validate(); },
              "[relative_bias] table.size() must equal num_buckets * num_heads (32 * 3), got 128");
  bias.num_heads = 4;
  bias.table = std::span<const float>(table).first(127);
  ExpectError([&] { bias.Validate(); },
              "[relative_bias] table.size() must equal num_buckets * num_heads (32 * 4), got 127");
  table[77] = std::numeric_limits<float>::quiet_NaN();
  bias.table = table;
  ExpectError([&] { bias.Validate(); }, "[relative_bias] table[77] must be finite, got nan");
  bias.buckets.max_distance = 3;
  ExpectError([&] { bias.Validate(); },
              "[relative_buckets] max_distance must be > max_exact (8), got 3");
}

}  // namespace
}  // namespace posenc
