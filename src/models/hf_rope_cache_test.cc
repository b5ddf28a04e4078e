#include "posenc/hf_rope_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "posenc/error.h"

namespace posenc {
namespace {

// nomic-embed-text-v1.5 with dynamic s = 2 (reference §11): theta 1000, d 64, M 2048.
constexpr DynamicNtkScaling kNomic{.factor = 2.0, .max_positions = 2048};

std::vector<double> AtLength(int64_t length) {
  return ComputeRopeFrequencies(1000.0, 64, kNomic, {.seq_len = length}).inv_freq;
}

std::vector<int64_t> Range(int64_t first, int64_t last) {
  std::vector<int64_t> positions;
  for (int64_t p = first; p <= last; ++p) positions.push_back(p);
  return positions;
}

TEST(HfRopeCache, DynamicGrowsAndResetsOnlyBelowM) {
  // Reference §3: growth when L > cached, reset when L < M strictly and cached > M.
  HfRopeCache cache(1000.0, 64, kNomic);
  EXPECT_EQ(cache.cached_length(), 2048);
  const std::vector<double> original = AtLength(2048);
  EXPECT_EQ(cache.Forward(Range(0, 99)).inv_freq, original);
  EXPECT_EQ(cache.Forward(Range(0, 4095)).inv_freq, AtLength(4096));  // growth
  EXPECT_EQ(cache.cached_length(), 4096);
  EXPECT_EQ(cache.Forward(Range(0, 3000)).inv_freq, AtLength(4096));  // shorter, not below M
  EXPECT_EQ(cache.Forward(Range(0, 2047)).inv_freq, AtLength(4096));  // exactly M: kept (§3 b)
  EXPECT_EQ(cache.Forward(Range(0, 2046)).inv_freq, original);        // below M: reset
  EXPECT_EQ(cache.cached_length(), 2048);
}

TEST(HfRopeCache, DynamicLengthIsTheLargestPositionPlusOne) {
  // Two tokens at positions 4000 and 4095 (decode with a KV cache): L = 4096, not 2 (§3 c).
  HfRopeCache cache(1000.0, 64, kNomic);
  EXPECT_EQ(cache.Forward(std::vector<int64_t>{4000, 4095}).inv_freq, AtLength(4096));
  // Decoding past M changes the frequencies at every step (§3 a).
  EXPECT_EQ(cache.Forward(std::vector<int64_t>{4096}).inv_freq, AtLength(4097));
  EXPECT_THROW(cache.Forward(std::vector<int64_t>{}), Error);
}

TEST(HfRopeCache, LongRopeSwitchesBothWaysAndKeepsTheAttentionFactor) {
  const LongRopeScaling rule{.short_factor = std::vector<double>(4, 1.0),
                             .long_factor = std::vector<double>(4, 8.0),
                             .original_max_positions = 4096,
                             .max_positions = 131072};
  HfRopeCache cache(10000.0, 8, rule);
  const double a = cache.current().attention_factor;
  const double w1 = cache.current().inv_freq[1];
  EXPECT_EQ(cache.Forward(Range(4090, 4095)).inv_freq[1], w1);  // L = 4096 = L0: short
  const RopeFrequencies& long_regime = cache.Forward(std::vector<int64_t>{4096});  // L = 4097
  EXPECT_FLOAT_EQ(long_regime.inv_freq[1], static_cast<float>(w1 / 8));
  EXPECT_EQ(long_regime.attention_factor, a);
  EXPECT_EQ(cache.Forward(std::vector<int64_t>{0}).inv_freq[1], w1);  // back to short
}

TEST(HfRopeCache, StaticRulesNeverChange) {
  HfRopeCache cache(10000.0, 8, LinearScaling{4.0});
  const std::vector<double> original = cache.current().inv_freq;
  EXPECT_EQ(cache.Forward(std::vector<int64_t>{1'000'000}).inv_freq, original);
  EXPECT_EQ(cache.cached_length(), 0);
}

}  // namespace
}  // namespace posenc
