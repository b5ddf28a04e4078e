// The double path (RopeAngle) at long positions, for the frequencies of every golden config:
// the claims of docs/PRECISION.md. Expected values are computed in 64-bit-significand long
// double, where the product of a position below 2^40 and a float32 frequency is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "posenc/hf_config.h"
#include "posenc/rope.h"

namespace posenc {
namespace {

struct GoldenConfig {
  const char* file;
  const char* model_type;
};
constexpr GoldenConfig kConfigs[] = {
    {"llama2_7b", "llama"},
    {"gpt_neox_20b", "gpt_neox"},
    {"llama2_7b_linear4", "llama"},
    {"llama3_1_8b", "llama"},
    {"nomic_embed_v1_5_dynamic2__seq8192", "nomic_bert"},
    {"qwen2_5_7b_instruct_yarn4", "qwen2"},
    {"deepseek_v3_yarn", "deepseek_v3"},
    {"phi3_128k_longrope__seq4096", "phi3"},
    {"phi3_128k_longrope__seq4097", "phi3"},
};

// Around every power of two up to 2^24 (float32's exact integers), 10^6, and past 2^24.
std::vector<int64_t> LongPositions() {
  std::vector<int64_t> positions = {1'000'000, (int64_t{1} << 29) - 1};
  for (int k = 1; k <= 24; ++k) {
    positions.push_back((int64_t{1} << k) - 1);
    positions.push_back(int64_t{1} << k);
  }
  return positions;
}

std::vector<std::pair<std::string, RopeFrequencies>> Frequencies(RopePrecision precision) {
  std::vector<std::pair<std::string, RopeFrequencies>> out;
  for (const GoldenConfig& c : kConfigs) {
    std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/hf_rope/" + c.file + ".json");
    const nlohmann::json golden = nlohmann::json::parse(in);
    nlohmann::json config = golden["config_input"];
    config["model_type"] = c.model_type;
    const RopeScheme scheme = std::get<RopeScheme>(ParseHfConfig(config.dump()));
    RopeFrequencyOptions options{.precision = precision};
    if (!golden["seq_len"].is_null()) options.seq_len = golden["seq_len"].get<int64_t>();
    out.emplace_back(c.file, ComputeRopeFrequencies(scheme.layers[0], options));
  }
  return out;
}

TEST(RopePrecision, ReferenceFrequenciesGiveExactAnglesToTwoToThe29) {
  if (std::numeric_limits<long double>::digits < 64) GTEST_SKIP() << "needs 64-bit long double";
  // A float32 frequency has 24 significant bits and a position below 2^29 at most 29, so their
  // double product is exact; only cos and sin round (half a double ulp, about 1.1e-16).
  for (const auto& [file, frequencies] : Frequencies(RopePrecision::kReference)) {
    for (const int64_t pos : LongPositions()) {
      for (const double w : frequencies.inv_freq) {
        const long double angle = static_cast<long double>(pos) * static_cast<long double>(w);
        const CosSin ours = RopeAngle(pos, w);
        ASSERT_NEAR(ours.cos, static_cast<double>(cosl(angle)), 2e-16) << file << " " << pos;
        ASSERT_NEAR(ours.sin, static_cast<double>(sinl(angle)), 2e-16) << file << " " << pos;
      }
    }
  }
}

TEST(RopePrecision, ExactFrequenciesLoseAtMostHalfAnUlpOfTheAngle) {
  if (std::numeric_limits<long double>::digits < 64) GTEST_SKIP() << "needs 64-bit long double";
  // A double frequency times a position rounds once: |error| <= angle * 2^-53, which is
  // 2^-30 = 9.3e-10 rad below 2^24 (float32 resolves 6e-8 near 1).
  for (const auto& [file, frequencies] : Frequencies(RopePrecision::kExact)) {
    for (const int64_t pos : LongPositions()) {
      for (const double w : frequencies.inv_freq) {
        const long double angle = static_cast<long double>(pos) * static_cast<long double>(w);
        const double bound = std::ldexp(static_cast<double>(angle), -53) + 2e-16;
        const CosSin ours = RopeAngle(pos, w);
        ASSERT_NEAR(ours.cos, static_cast<double>(cosl(angle)), bound) << file << " " << pos;
        ASSERT_NEAR(ours.sin, static_cast<double>(sinl(angle)), bound) << file << " " << pos;
      }
    }
  }
}

TEST(RopePrecision, HuggingFacesFloat32ForwardDriftsWhereWeDoNot) {
  // index.json: HF's float32 forward against float64 cos from the same frequencies. Its error
  // grows about like pos * 2^-24; ours (previous tests) stays at double rounding.
  std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/hf_rope/index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  const auto positions = index["positions"].get<std::vector<int64_t>>();
  ASSERT_EQ(positions.back(), 1'000'000);
  double worst_at_1e6 = 0, worst_at_4096 = 0;
  for (const auto& file : index["files"]) {
    const auto error = file["cos_abs_err_f32_forward_by_position"].get<std::vector<double>>();
    worst_at_1e6 = std::max(worst_at_1e6, error.back());
    worst_at_4096 = std::max(worst_at_4096, error[6]);  // position 4096, a power of two
  }
  EXPECT_GT(worst_at_1e6, 1e-2);
  EXPECT_LT(worst_at_4096, 2e-7);
}

}  // namespace
}  // namespace posenc
