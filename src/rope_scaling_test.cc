#include "posenc/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "posenc/error.h"

namespace posenc {
namespace {

nlohmann::json Golden(const std::string& name) {
  std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/hf_rope/" + name);
  return nlohmann::json::parse(in);
}

void ExpectFrequencies(const RopeFrequencies& got, const nlohmann::json& golden) {
  const auto expected = golden["inv_freq_f64"].get<std::vector<double>>();
  ASSERT_EQ(got.inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(got.inv_freq[i], expected[i], 1e-12 * expected[i]) << "pair " << i;
  }
  EXPECT_NEAR(got.attention_factor, golden["attention_factor"].get<double>(), 1e-12);
}

TEST(RopeScaling, NoScalingIsTheLlama2Default) {
  ExpectFrequencies(ComputeRopeFrequencies(10000.0, 128, NoScaling{}), Golden("llama2_7b.json"));
}

TEST(RopeScaling, LinearMatchesHuggingFace) {
  ExpectFrequencies(ComputeRopeFrequencies(10000.0, 128, LinearScaling{4.0}),
                    Golden("llama2_7b_linear4.json"));
}

TEST(RopeScaling, YarnMatchesQwen25) {
  // Qwen2.5-7B-Instruct with its model card's YaRN snippet: factor 4, L0 32768, theta 1e6.
  YarnScaling yarn{.factor = 4.0, .original_max_positions = 32768};
  ExpectFrequencies(ComputeRopeFrequencies(1e6, 128, yarn), Golden("qwen2_5_7b_instruct_yarn4.json"));
}

TEST(RopeScaling, YarnKeepsFastPairsAndInterpolatesSlowOnes) {
  YarnScaling yarn{.factor = 8.0, .original_max_positions = 4096};
  const auto plain = ComputeRopeFrequencies(10000.0, 128, NoScaling{});
  const auto scaled = ComputeRopeFrequencies(10000.0, 128, yarn);
  EXPECT_DOUBLE_EQ(scaled.inv_freq[0], plain.inv_freq[0]);
  EXPECT_DOUBLE_EQ(scaled.inv_freq[63], plain.inv_freq[63] / 8.0);
  EXPECT_NEAR(scaled.attention_factor, 0.1 * std::log(8.0) + 1.0, 1e-15);
}

TEST(RopeScaling, BadFieldsAreClearErrors) {
  try {
    ComputeRopeFrequencies(10000.0, 64, LinearScaling{0.5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[rope_scaling] factor must be finite and >= 1, got 0.5");
  }
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 64, LinearScaling{NAN}), Error);
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 64, YarnScaling{.factor = 2.0}), Error);
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 63, NoScaling{}), Error);
}

}  // namespace
}  // namespace posenc
