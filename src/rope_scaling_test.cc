#include "posenc/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "posenc/error.h"

namespace posenc {
namespace {

constexpr RopeFrequencyOptions kExact{.precision = RopePrecision::kExact};

nlohmann::json Golden(const std::string& name) {
  std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/hf_rope/" + name);
  return nlohmann::json::parse(in);
}

// Exact mode against the golden float64 evaluation of the same formulas.
void ExpectFrequencies(const RopeFrequencies& got, const nlohmann::json& golden) {
  const auto expected = golden["inv_freq_f64"].get<std::vector<double>>();
  ASSERT_EQ(got.inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(got.inv_freq[i], expected[i], 1e-12 * expected[i]) << "pair " << i;
  }
  EXPECT_NEAR(got.attention_factor, golden["attention_factor"].get<double>(), 1e-12);
}

void ExpectError(const std::function<void()>& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error, expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(RopeScaling, NoScalingIsTheLlama2Default) {
  ExpectFrequencies(ComputeRopeFrequencies(10000.0, 128, NoScaling{}, kExact),
                    Golden("llama2_7b.json"));
}

TEST(RopeScaling, LinearMatchesHuggingFace) {
  ExpectFrequencies(ComputeRopeFrequencies(10000.0, 128, LinearScaling{4.0}, kExact),
                    Golden("llama2_7b_linear4.json"));
}

TEST(RopeScaling, YarnMatchesQwen25) {
  // Qwen2.5-7B-Instruct with its model card's YaRN snippet: factor 4, L0 32768, theta 1e6.
  YarnScaling yarn{.factor = 4.0, .original_max_positions = 32768};
  ExpectFrequencies(ComputeRopeFrequencies(1e6, 128, yarn, kExact),
                    Golden("qwen2_5_7b_instruct_yarn4.json"));
}

TEST(RopeScaling, YarnWithDeepSeekMscaleHasUnitAttentionFactor) {
  // ref §11: DeepSeek-V3, s 40, L0 4096, mscale = mscale_all_dim = 1 -> a = 1.
  YarnScaling yarn{
      .factor = 40.0, .original_max_positions = 4096, .mscale = 1.0, .mscale_all_dim = 1.0};
  ExpectFrequencies(ComputeRopeFrequencies(10000.0, 64, yarn, kExact),
                    Golden("deepseek_v3_yarn.json"));
  // Unequal mscales: g(40, 1) / g(40, 0.707), by hand.
  yarn.mscale_all_dim = 0.707;
  EXPECT_NEAR(ComputeRopeFrequencies(10000.0, 64, yarn).attention_factor,
              (0.1 * std::log(40.0) + 1) / (0.0707 * std::log(40.0) + 1), 1e-15);
  // An explicit attention_factor wins over the mscale rule.
  yarn.attention_factor = 1.25;
  EXPECT_EQ(ComputeRopeFrequencies(10000.0, 64, yarn).attention_factor, 1.25);
}

TEST(RopeScaling, YarnKeepsFastPairsAndInterpolatesSlowOnes) {
  YarnScaling yarn{.factor = 8.0, .original_max_positions = 4096};
  const auto plain = ComputeRopeFrequencies(10000.0, 128, NoScaling{}, kExact);
  const auto scaled = ComputeRopeFrequencies(10000.0, 128, yarn, kExact);
  EXPECT_DOUBLE_EQ(scaled.inv_freq[0], plain.inv_freq[0]);
  EXPECT_DOUBLE_EQ(scaled.inv_freq[63], plain.inv_freq[63] / 8.0);
  EXPECT_NEAR(scaled.attention_factor, 0.1 * std::log(8.0) + 1.0, 1e-15);
}

TEST(RopeScaling, YarnTruncateRoundsTheRampBoundsOutwards) {
  // GPT-OSS (ref §4): d 64, theta 150000, L0 4096, s 32. Untruncated bounds by hand:
  // c(r) = 64 ln(4096 / (2 pi r)) / (2 ln 150000): lo = c(32) = 8.093, hi = c(1) = 17.398.
  const double lo = 64 * std::log(4096 / (2 * std::numbers::pi * 32)) / (2 * std::log(150000.0));
  const double hi = 64 * std::log(4096 / (2 * std::numbers::pi)) / (2 * std::log(150000.0));
  EXPECT_NEAR(lo, 8.093, 5e-4);
  EXPECT_NEAR(hi, 17.398, 5e-4);
  YarnScaling yarn{.factor = 32.0, .original_max_positions = 4096, .truncate = false};
  const auto plain = ComputeRopeFrequencies(150000.0, 64, NoScaling{}, kExact).inv_freq;
  const auto fractional = ComputeRopeFrequencies(150000.0, 64, yarn, kExact).inv_freq;
  yarn.truncate = true;
  const auto whole = ComputeRopeFrequencies(150000.0, 64, yarn, kExact).inv_freq;
  for (int i : {9, 12, 17}) {
    const double ramp = (i - lo) / (hi - lo);  // fraction of the way to full interpolation
    EXPECT_NEAR(fractional[i], plain[i] / 32 * ramp + plain[i] * (1 - ramp), 1e-15) << i;
    const double whole_ramp = (i - 8.0) / (18.0 - 8.0);
    EXPECT_NEAR(whole[i], plain[i] / 32 * whole_ramp + plain[i] * (1 - whole_ramp), 1e-15) << i;
  }
  EXPECT_DOUBLE_EQ(fractional[8], plain[8]);
  EXPECT_DOUBLE_EQ(whole[18], plain[18] / 32);
}

TEST(RopeScaling, DynamicIsTheDefaultUpToMaxPositions) {
  // ref §3: L = max(seq_len, M); L <= M leaves the bracket at 1.
  const DynamicNtkScaling dynamic{.factor = 2.0, .max_positions = 2048};
  const auto plain = ComputeRopeFrequencies(1000.0, 64, NoScaling{});
  for (std::optional<int64_t> seq_len :
       {std::optional<int64_t>{}, std::optional<int64_t>{1}, std::optional<int64_t>{1000},
        std::optional<int64_t>{2048}}) {
    EXPECT_EQ(ComputeRopeFrequencies(1000.0, 64, dynamic, {.seq_len = seq_len}).inv_freq,
              plain.inv_freq);
  }
  // L = 4096: theta' = 1000 (2 * 4096 / 2048 - 1)^(64/62) = 1000 * 3^(32/31), by hand.
  const auto grown = ComputeRopeFrequencies(1000.0, 64, dynamic,
                                            {.precision = RopePrecision::kExact, .seq_len = 4096});
  EXPECT_NEAR(grown.inv_freq[1], std::pow(1000.0 * std::pow(3.0, 32.0 / 31.0), -2.0 / 64), 1e-16);
  ExpectFrequencies(grown, Golden("nomic_embed_v1_5_dynamic2__seq4096.json"));
  ExpectFrequencies(ComputeRopeFrequencies(1000.0, 64, dynamic,
                                           {.precision = RopePrecision::kExact, .seq_len = 8192}),
                    Golden("nomic_embed_v1_5_dynamic2__seq8192.json"));
}

TEST(RopeScaling, LongRopeSwitchesToLongFactorsStrictlyPastL0) {
  const auto golden = Golden("phi3_128k_longrope__seq4096.json");
  const auto& params = golden["rope_parameters_standardized"];
  const LongRopeScaling phi3{.short_factor = params["short_factor"].get<std::vector<double>>(),
                             .long_factor = params["long_factor"].get<std::vector<double>>(),
                             .original_max_positions = 4096,
                             .max_positions = 131072};
  const auto at = [&](std::optional<int64_t> seq_len) {
    return ComputeRopeFrequencies(10000.0, 96, phi3, {.seq_len = seq_len});
  };
  const auto short_regime = at(4096), long_regime = at(4097);
  EXPECT_EQ(at(std::nullopt).inv_freq, short_regime.inv_freq);  // construction time: short
  // Plain frequency / lambda, with lambda rounded to float32 (ref §5).
  const auto plain = ComputeRopeFrequencies(10000.0, 96, NoScaling{}, kExact).inv_freq;
  EXPECT_NEAR(long_regime.inv_freq[47], plain[47] / static_cast<float>(64.81001281738281),
              1e-7 * plain[47]);
  EXPECT_EQ(short_regime.inv_freq[0], 1.0f / static_cast<float>(1.05));
  // a = sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12), the same in both regimes.
  EXPECT_NEAR(short_regime.attention_factor, std::sqrt(1.0 + 5.0 / 12.0), 1e-15);
  EXPECT_EQ(long_regime.attention_factor, short_regime.attention_factor);
}

TEST(RopeScaling, Llama3BandsMatchTheReference) {
  // ref §6: Llama-3.1-8B, pairs 0-28 unchanged, 29-34 smoothed, 35-63 divided by 8.
  const Llama3Scaling llama3{.factor = 8.0,
                             .low_freq_factor = 1.0,
                             .high_freq_factor = 4.0,
                             .original_max_positions = 8192};
  const auto plain = ComputeRopeFrequencies(500000.0, 128, NoScaling{}, kExact).inv_freq;
  const auto scaled = ComputeRopeFrequencies(500000.0, 128, llama3, kExact).inv_freq;
  for (int i = 0; i <= 28; ++i) EXPECT_EQ(scaled[i], plain[i]) << i;
  for (int i = 29; i <= 34; ++i) {
    EXPECT_LT(scaled[i], plain[i]) << i;
    EXPECT_GT(scaled[i], plain[i] / 8) << i;
  }
  for (int i = 35; i < 64; ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
  ExpectFrequencies(ComputeRopeFrequencies(500000.0, 128, llama3, kExact),
                    Golden("llama3_1_8b.json"));
}

TEST(RopeScaling, ProportionalRotatesAQuarterOfTheHeadWithHeadDimExponent) {
  // ref §7, Gemma 4 global layers: h 512, p 0.25 -> k = 64 rotated pairs of 256.
  const auto got =
      ComputeRopeFrequencies(1e6, 512, ProportionalScaling{.partial_rotary_factor = 0.25}, kExact);
  ASSERT_EQ(got.inv_freq.size(), 256u);
  EXPECT_EQ(got.inv_freq[0], 1.0);
  EXPECT_NEAR(got.inv_freq[63], std::pow(1e6, -126.0 / 512), 1e-17);
  EXPECT_EQ(got.inv_freq[64], 0.0);
  EXPECT_EQ(got.inv_freq[255], 0.0);
  const auto halved = ComputeRopeFrequencies(
      1e6, 512, ProportionalScaling{.factor = 2.0, .partial_rotary_factor = 0.25}, kExact);
  EXPECT_DOUBLE_EQ(halved.inv_freq[63], got.inv_freq[63] / 2);
  EXPECT_EQ(got.attention_factor, 1.0);
}

TEST(RopeScaling, ReferencePrecisionRoundsToFloat32) {
  const auto reference = ComputeRopeFrequencies(10000.0, 128, LinearScaling{4.0});
  for (double w : reference.inv_freq) EXPECT_EQ(w, static_cast<double>(static_cast<float>(w)));
  // fl32(1 / fl32(10000^fl32(2/128))): 0.8659643530845642 in the golden file, and by hand
  // 10000^(-1/64) = 0.86596432336...
  const auto plain = ComputeRopeFrequencies(10000.0, 128, NoScaling{});
  EXPECT_EQ(plain.inv_freq[1], 0.8659643530845642);
  EXPECT_NE(ComputeRopeFrequencies(10000.0, 128, NoScaling{}, kExact).inv_freq[1],
            plain.inv_freq[1]);
}

TEST(RopeScaling, SeqLenIsMaxPositionPlusOne) {
  EXPECT_EQ(SeqLenOf(std::vector<int64_t>{0, 1, 2}), 3);
  EXPECT_EQ(SeqLenOf(std::vector<int64_t>{4000, 4095}), 4096);  // two tokens, length 4096
  EXPECT_THROW(SeqLenOf(std::vector<int64_t>{}), Error);
  EXPECT_THROW(SeqLenOf(std::vector<int64_t>{-1}), Error);
}

TEST(RopeScaling, TypeNamesAreHuggingFaces) {
  EXPECT_EQ(RopeTypeName(NoScaling{}), "default");
  EXPECT_EQ(RopeTypeName(DynamicNtkScaling{}), "dynamic");
  EXPECT_EQ(RopeTypeName(LongRopeScaling{}), "longrope");
  EXPECT_EQ(RopeTypeName(ProportionalScaling{}), "proportional");
}

// Llama 4 Scout: llama3 with low_freq_factor == high_freq_factor == 1, an empty smoothing band.
// Every wavelength 2 pi / w above L0 = 8192 is divided by the factor 16, the rest kept, and
// nothing is NaN (the band's formula would divide by high - low = 0).
TEST(RopeScaling, Llama3WithEqualBandFactorsIsAHardCutoff) {
  const Llama3Scaling scout{.factor = 16.0,
                            .low_freq_factor = 1.0,
                            .high_freq_factor = 1.0,
                            .original_max_positions = 8192};
  const auto scaled = ComputeRopeFrequencies(500000.0, 128, scout, kExact).inv_freq;
  ASSERT_EQ(scaled.size(), 64u);
  int divided = 0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    const double w = std::pow(500000.0, -2.0 * static_cast<double>(i) / 128.0);
    const bool long_wave = 2.0 * std::numbers::pi / w > 8192.0;
    divided += long_wave;
    EXPECT_DOUBLE_EQ(scaled[i], long_wave ? w / 16.0 : w) << i;
  }
  // 2 pi 500000^(2i/128) > 8192 from i = 35 on (i = 34: 6695; i = 35: 8219).
  EXPECT_EQ(divided, 29);
}

TEST(RopeScaling, BadFieldsAreClearErrors) {
  ExpectError([] { ComputeRopeFrequencies(10000.0, 64, LinearScaling{0.5}); },
              "[rope_scaling] factor must be finite and >= 1, got 0.5");
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 64, LinearScaling{NAN}), Error);
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 64, YarnScaling{.factor = 2.0}), Error);
  EXPECT_THROW(ComputeRopeFrequencies(10000.0, 63, NoScaling{}), Error);
  ExpectError([] { ComputeRopeFrequencies(10000.0, 2, DynamicNtkScaling{2.0, 2048}); },
              "[rope_scaling] rotary_dim must be >= 4 for dynamic scaling, got 2");
  ExpectError([] { ComputeRopeFrequencies(10000.0, 64, Llama3Scaling{8.0, 4.0, 3.0, 8192}); },
              "[rope_scaling] high_freq_factor must be finite and >= low_freq_factor, got 3");
  ExpectError(
      [] {
        ComputeRopeFrequencies(10000.0, 8, LongRopeScaling{{1, 1, 1, 1}, {1, 1, 1}, 4096, 131072});
      },
      "[rope_scaling] long_factor.size() must equal rotary_dim / 2 (4), got 3");
  ExpectError([] { ComputeRopeFrequencies(1.0, 8, YarnScaling{2.0, 4096}); },
              "[rope_scaling] base must be > 1 for yarn, got 1");
  ExpectError([] { ComputeRopeFrequencies(10000.0, 8, NoScaling{}, {.seq_len = 0}); },
              "[rope_scaling] seq_len must be > 0, got 0");
  // 1e-300 is a valid double base but 0 in float32: 1 / 0^(1/4) overflows in reference mode.
  ExpectError([] { ComputeRopeFrequencies(1e-300, 8, NoScaling{}); },
              "[rope_scaling] inv_freq[1] must be finite and >= 0 (the base or a factor "
              "overflows this precision), got inf");
  EXPECT_NO_THROW(ComputeRopeFrequencies(1e-300, 8, NoScaling{}, kExact));
}

}  // namespace
}  // namespace posenc
