#include "posenc/hf_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "posenc/alibi.h"
#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using Json = nlohmann::json;

using testing_support::ConfigPath;
using testing_support::GoldenJson;

Json HfRopeGolden(const std::string& name) { return GoldenJson("hf_rope/" + name + ".json"); }

RopeScheme AsRope(PositionScheme scheme) {
  EXPECT_TRUE(std::holds_alternative<RopeScheme>(scheme));
  return std::get<RopeScheme>(std::move(scheme));
}

RopeScheme ParseRope(const Json& config) { return AsRope(ParseHfConfig(config.dump())); }

void ExpectError(const std::string& text, const std::string& message) {
  try {
    ParseHfConfig(text);
    ADD_FAILURE() << "no error for " << text.substr(0, 200) << "\nexpected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

void ExpectErrorContaining(const std::string& text, const std::string& part) {
  try {
    ParseHfConfig(text);
    ADD_FAILURE() << "no error for " << text.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

double Float32Ulp(double value) { return std::ldexp(1.0, std::ilogb(value) - 23); }

// ---------------------------------------------------------------------------------------------
// Every golden file (tests/golden/hf_rope): the golden config_input is what Hugging Face was
// given; the model_type is the model the file names (the inputs were plain attribute objects).

struct GoldenCase {
  const char* file;
  const char* model_type;
};
constexpr GoldenCase kGoldenCases[] = {
    {"llama2_7b", "llama"},
    {"gpt_neox_20b", "gpt_neox"},
    {"llama2_7b_linear4", "llama"},
    {"llama3_1_8b", "llama"},
    {"nomic_embed_v1_5_dynamic2", "nomic_bert"},
    {"nomic_embed_v1_5_dynamic2__seq4096", "nomic_bert"},
    {"nomic_embed_v1_5_dynamic2__seq8192", "nomic_bert"},
    {"qwen2_5_7b_instruct_yarn4", "qwen2"},
    {"deepseek_v3_yarn", "deepseek_v3"},
    {"phi3_128k_longrope__seq4096", "phi3"},
    {"phi3_128k_longrope__seq4097", "phi3"},
};

struct GoldenRun {
  Json golden;
  RopeLayerScheme layer;
  RopeFrequencies frequencies;
};

GoldenRun RunGolden(const GoldenCase& c, RopePrecision precision) {
  GoldenRun run{.golden = HfRopeGolden(c.file), .layer = {}, .frequencies = {}};
  Json config = run.golden["config_input"];
  config["model_type"] = c.model_type;
  const RopeScheme scheme = ParseRope(config);
  EXPECT_EQ(scheme.layers.size(), 1u);
  run.layer = scheme.layers.at(0);
  RopeFrequencyOptions options{.precision = precision};
  if (!run.golden["seq_len"].is_null()) options.seq_len = run.golden["seq_len"].get<int64_t>();
  run.frequencies = ComputeRopeFrequencies(run.layer, options);
  EXPECT_EQ(run.layer.head_dim, run.golden["head_dim"].get<int64_t>()) << c.file;
  EXPECT_EQ(run.layer.rotary_dim, run.golden["rotary_dim"].get<int64_t>()) << c.file;
  EXPECT_EQ(RopeTypeName(run.layer.scaling), run.golden["rope_type"].get<std::string>());
  EXPECT_EQ(run.frequencies.inv_freq.size(), run.golden["n_freq"].get<size_t>()) << c.file;
  EXPECT_NEAR(run.frequencies.attention_factor, run.golden["attention_factor"].get<double>(), 1e-12)
      << c.file;
  return run;
}

// cos and sin at the golden positions, in double from int64 positions (RopeAngle), against a
// float64 column. The column's frequencies may differ from ours by `inv_freq_gap` (zero when the
// bits agree); the angle then differs by at most pos * gap, which is added to 1e-12, as is the
// rounding of the angle itself.
void ExpectCosSin(const GoldenRun& run, const char* suffix, const std::vector<double>& theirs,
                  const std::string& file) {
  const auto positions = run.golden["positions"].get<std::vector<int64_t>>();
  const Json& cos = run.golden[std::string("cos_f64_") + suffix];
  const Json& sin = run.golden[std::string("sin_f64_") + suffix];
  for (size_t p = 0; p < positions.size(); ++p) {
    for (size_t i = 0; i < theirs.size(); ++i) {
      // Plus half a double ulp of the angle for each side's rounding of the product pos * w.
      const double angle = static_cast<double>(positions[p]) * theirs[i];
      const double gap = std::abs(run.frequencies.inv_freq[i] - theirs[i]);
      const double tolerance =
          1e-12 + static_cast<double>(positions[p]) * gap + std::ldexp(angle, -52);
      const CosSin ours = RopeAngle(positions[p], run.frequencies.inv_freq[i]);
      ASSERT_NEAR(ours.cos, cos[p][i].get<double>(), tolerance)
          << file << " pos " << positions[p] << " pair " << i;
      ASSERT_NEAR(ours.sin, sin[p][i].get<double>(), tolerance)
          << file << " pos " << positions[p] << " pair " << i;
    }
  }
}

TEST(HfConfigGolden, ReferencePrecisionMatchesHuggingFaceFloat32Bits) {
  int exact_bits = 0, total = 0;
  for (const GoldenCase& c : kGoldenCases) {
    const GoldenRun run = RunGolden(c, RopePrecision::kReference);
    std::vector<double> hf;
    for (const Json& hex : run.golden["inv_freq_hf_f32_bits"]) {
      const auto bits = static_cast<uint32_t>(std::stoul(hex.get<std::string>(), nullptr, 16));
      float value;
      std::memcpy(&value, &bits, sizeof value);
      hf.push_back(value);
    }
    ASSERT_EQ(run.frequencies.inv_freq.size(), hf.size()) << c.file;
    for (size_t i = 0; i < hf.size(); ++i) {
      const double ours = run.frequencies.inv_freq[i];
      EXPECT_EQ(ours, static_cast<double>(static_cast<float>(ours)));  // a float32 value
      EXPECT_LE(std::abs(ours - hf[i]), Float32Ulp(hf[i])) << c.file << " pair " << i;
      exact_bits += ours == hf[i];
      ++total;
    }
    ExpectCosSin(run, "from_hf_inv_freq", hf, c.file);
  }
  // With torch's pow (SLEEF) all 492 are bit-equal (docs/PRECISION.md). A build that lets the
  // compiler fuse float32 multiply-adds (-march with FMA) loses llama3_1_8b pair 29 by one ulp.
  EXPECT_EQ(exact_bits, total);
}

TEST(HfConfigGolden, ExactPrecisionMatchesTheFloat64Columns) {
  for (const GoldenCase& c : kGoldenCases) {
    const GoldenRun run = RunGolden(c, RopePrecision::kExact);
    const auto f64 = run.golden["inv_freq_f64"].get<std::vector<double>>();
    ASSERT_EQ(run.frequencies.inv_freq.size(), f64.size());
    for (size_t i = 0; i < f64.size(); ++i) {
      // Two libm pows, each within an ulp: a few double ulps apart at most.
      EXPECT_NEAR(run.frequencies.inv_freq[i], f64[i], 1e-15 * f64[i]) << c.file << " " << i;
    }
    ExpectCosSin(run, "from_f64_inv_freq", f64, c.file);
  }
}

TEST(HfConfigGolden, DeepSeekSoftmaxScaleMultiplier) {
  const Json golden = HfRopeGolden("deepseek_v3_yarn");
  Json config = golden["config_input"];
  config["model_type"] = "deepseek_v3";
  const RopeScheme scheme = ParseRope(config);
  ASSERT_TRUE(scheme.softmax_scale_multiplier.has_value());
  EXPECT_NEAR(
      *scheme.softmax_scale_multiplier,
      golden["softmax_scale_hf"].get<double>() / golden["softmax_scale_plain"].get<double>(),
      1e-12);
  // With qk_nope_head_dim 128 + qk_rope_head_dim 64, the golden softmax scale itself.
  config["qk_nope_head_dim"] = 128;
  config["qk_rope_head_dim"] = 64;
  EXPECT_NEAR(*ParseRope(config).softmax_scale, golden["softmax_scale_hf"].get<double>(), 1e-12);
  EXPECT_EQ(scheme.layout, RopeLayout::kInterleaved);
}

// The apply golden files, end to end: config -> frequencies -> ApplyRope in both layouts.
void ExpectApplyMatchesGolden(const std::string& apply_name, const Json& config) {
  const Json g = GoldenJson("apply/" + apply_name + ".json");
  const RopeScheme scheme = ParseRope(config);
  const auto positions = g["positions"].get<std::vector<int64_t>>();
  const auto hf_freq = g["inv_freq_hf_f32"].get<std::vector<double>>();
  std::vector<float> q;
  for (const auto& token : g["q"])
    for (const auto& head : token)
      for (const auto& v : head) q.push_back(v.get<float>());
  const auto tokens = static_cast<int64_t>(g["q"].size());
  const auto heads = static_cast<int64_t>(g["q"][0].size());
  for (const auto& [layout, column] :
       {std::pair{RopeLayout::kHalfSplit, "out_neox_f64"},
        std::pair{RopeLayout::kInterleaved, "out_interleaved_f64"}}) {
    RopeScheme with_layout = scheme;
    with_layout.layout = layout;
    const Rope rope = MakeRope(with_layout, with_layout.layers[0]);
    ASSERT_EQ(rope.inv_freq, hf_freq) << apply_name;  // bit-equal for both models
    EXPECT_EQ(rope.attention_factor, g["attention_factor"].get<double>());
    std::vector<float> out(q.size());
    // The double reference twin: the kernels' own float32 tolerance is tested in rope_test.cc.
    ApplyRopeReference(
        rope, positions, Heads<const float>::Dense(q.data(), tokens, heads, rope.head_dim),
        Heads<float>::Dense(out.data(), tokens, heads, rope.head_dim), RopeDirection::kForward);
    size_t e = 0;
    for (const auto& token : g[column])
      for (const auto& head : token)
        for (const auto& v : head) {
          // Double angles and arithmetic, then one rounding to float32.
          const double want = v.get<double>();
          ASSERT_NEAR(out[e], want, std::ldexp(std::abs(want), -24) + 1e-12)
              << apply_name << " " << column << " element " << e;
          ++e;
        }
  }
}

TEST(HfConfigGolden, ApplyFilesInBothLayouts) {
  Json llama = HfRopeGolden("llama3_1_8b")["config_input"];
  llama["model_type"] = "llama";
  ExpectApplyMatchesGolden("llama3_1_8b", llama);
  // Phi-2 (reference §11): 2560 / 32 = 80 per head, partial 0.4 -> 32 rotated.
  ExpectApplyMatchesGolden("phi_2", Json{{"model_type", "phi"},
                                         {"hidden_size", 2560},
                                         {"num_attention_heads", 32},
                                         {"max_position_embeddings", 2048},
                                         {"partial_rotary_factor", 0.4},
                                         {"rope_theta", 10000.0}});
}

// ---------------------------------------------------------------------------------------------
// Real model configs (tests/configs, written from the reference's §11).

TEST(HfConfigModels, RopeModelsGiveTheReferenceDimensions) {
  const struct {
    const char* file;
    const char* rope_type;
    int64_t head_dim, rotary_dim;
    double theta, attention_factor;
  } cases[] = {
      {"llama2-7b.json", "default", 128, 128, 1e4, 1.0},
      {"llama3.1-8b.json", "llama3", 128, 128, 5e5, 1.0},
      {"qwen2.5-7b-instruct-yarn.json", "yarn", 128, 128, 1e6, 0.1 * std::log(4.0) + 1},
      {"phi3-128k-longrope.json", "longrope", 96, 96, 1e4,
       std::sqrt(1 + std::log(32.0) / std::log(4096.0))},
      {"deepseek-v3.json", "yarn", 192, 64, 1e4, 1.0},  // 128 unrotated + 64 rotated
      {"gpt-neox-20b.json", "default", 96, 24, 1e4, 1.0},
      {"phi-2.json", "default", 80, 32, 1e4, 1.0},
      {"gpt-oss-20b.json", "yarn", 64, 64, 1.5e5, 0.1 * std::log(32.0) + 1},
      {"nomic-embed-text-v1.5-dynamic.json", "dynamic", 64, 64, 1e3, 1.0},
  };
  for (const auto& c : cases) {
    const RopeScheme scheme = AsRope(LoadHfConfig(ConfigPath(c.file)));
    ASSERT_EQ(scheme.layers.size(), 1u) << c.file;
    const RopeLayerScheme& layer = scheme.layers[0];
    EXPECT_EQ(RopeTypeName(layer.scaling), c.rope_type) << c.file;
    EXPECT_EQ(layer.head_dim, c.head_dim) << c.file;
    EXPECT_EQ(layer.rotary_dim, c.rotary_dim) << c.file;
    EXPECT_EQ(layer.rope_theta, c.theta) << c.file;
    EXPECT_NEAR(ComputeRopeFrequencies(layer).attention_factor, c.attention_factor, 1e-12)
        << c.file;
  }
  // DeepSeek-V3: softmax x (1 + 0.1 ln 40)^2 = 1.8739 (reference §11), over sqrt(128 + 64).
  const RopeScheme deepseek = AsRope(LoadHfConfig(ConfigPath("deepseek-v3.json")));
  EXPECT_NEAR(*deepseek.softmax_scale_multiplier, std::pow(1 + 0.1 * std::log(40.0), 2), 1e-12);
  EXPECT_NEAR(*deepseek.softmax_scale, 1.8739 / std::sqrt(192.0), 1e-5);
}

// A family read from its record alone (src/models/families.cc): ERNIE 4.5 on Ernie4_5Config's
// own defaults, against Ernie4_5RotaryEmbedding's numbers (tests/golden/families).
TEST(HfConfigModels, ErnieFourFiveMatchesItsRotaryEmbedding) {
  const Json golden = GoldenJson("families/ernie4_5-defaults.json");
  const auto expected = golden["inv_freq_f32"].get<std::vector<double>>();
  const auto check = [&](const RopeScheme& scheme, const std::string& what) {
    EXPECT_EQ(scheme.layout, RopeLayout::kInterleaved) << what;  // golden "layout": interleaved
    ASSERT_EQ(scheme.layers.size(), 1u) << what;
    const RopeLayerScheme& layer = scheme.layers[0];
    EXPECT_EQ(RopeTypeName(layer.scaling), "default") << what;
    EXPECT_EQ(layer.head_dim, golden["head_dim"].get<int64_t>()) << what;
    EXPECT_EQ(layer.rotary_dim, golden["rotary_dim"].get<int64_t>()) << what;
    EXPECT_EQ(layer.rope_theta, golden["rope_theta"].get<double>()) << what;
    const RopeFrequencies frequencies = ComputeRopeFrequencies(layer);
    EXPECT_EQ(frequencies.attention_factor, golden["attention_scaling"].get<double>()) << what;
    ASSERT_EQ(frequencies.inv_freq.size(), expected.size()) << what;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(frequencies.inv_freq[i], expected[i]) << what << " pair " << i;
    }
  };
  const std::string path = ConfigPath(golden["config_file"].get<std::string>());
  check(AsRope(LoadHfConfig(path)), "the file");
  // The golden numbers are the class's without rope arguments: theta from its default_theta.
  Json config = testing_support::ReadJsonFile(path);
  config.erase("rope_parameters");
  check(ParseRope(config), "without rope_parameters");
  // Its default rotary embedding takes the whole head whatever partial_rotary_factor says.
  config["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 500000.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_EQ(ParseRope(config).layers[0].rotary_dim,
            golden["partial_rotary_factor_0.5_default_rotary_dim"].get<int64_t>());
}

TEST(HfConfigModels, AlibiLearnedAndNone) {
  const auto bloom = std::get<AlibiScheme>(LoadHfConfig(ConfigPath("bloom.json")));
  EXPECT_EQ(bloom.num_heads, 112);
  EXPECT_EQ(bloom.max_bias, 8.0);
  // 112 heads: 64 base slopes 2^(-8k/64) plus 48 extra 2^(-4k/64) for odd k (reference §8).
  const auto slopes = AlibiSlopes(Alibi{.num_heads = bloom.num_heads, .max_bias = bloom.max_bias});
  ASSERT_EQ(slopes.size(), 112u);
  EXPECT_DOUBLE_EQ(slopes[0], std::pow(2.0, -8.0 / 64));
  EXPECT_DOUBLE_EQ(slopes[64], std::pow(2.0, -4.0 / 64));
  const auto mpt = std::get<AlibiScheme>(LoadHfConfig(ConfigPath("mpt-7b.json")));
  EXPECT_EQ(mpt.num_heads, 32);
  EXPECT_EQ(mpt.max_bias, 8.0);
  const auto gpt2 = std::get<LearnedPositionScheme>(LoadHfConfig(ConfigPath("gpt2.json")));
  EXPECT_EQ(gpt2.max_positions, 1024);
  EXPECT_EQ(gpt2.dim, 768);
  const auto mamba = ParseHfConfig(R"({"model_type": "mamba", "hidden_size": 768})");
  EXPECT_TRUE(std::holds_alternative<NoPositionScheme>(mamba));
}

// ---------------------------------------------------------------------------------------------
// Standardization rules and the reference's §10 edge cases.

Json Llama(Json rope_scaling = nullptr) {
  return Json{{"model_type", "llama"},     {"hidden_size", 4096},
              {"num_attention_heads", 32}, {"max_position_embeddings", 4096},
              {"rope_theta", 10000.0},     {"rope_scaling", std::move(rope_scaling)}};
}

TEST(HfConfigRules, LegacyRopeScalingReplacesRopeParameters) {
  Json config = Llama({{"type", "linear"}, {"factor", 4.0}});
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  const RopeLayerScheme layer = ParseRope(config).layers[0];
  EXPECT_EQ(RopeTypeName(layer.scaling), "linear");
  EXPECT_EQ(layer.parameters_key, "rope_scaling");
  EXPECT_EQ(layer.rope_theta, 10000.0);  // not in rope_scaling: the top level's
  // rope_type wins over type; rope_theta in the dict wins over the top level.
  config = Llama(nullptr);
  config.erase("rope_scaling");
  config["rope_parameters"] = {
      {"rope_type", "linear"}, {"type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 500000.0}};
  const RopeLayerScheme newer = ParseRope(config).layers[0];
  EXPECT_EQ(RopeTypeName(newer.scaling), "linear");
  EXPECT_EQ(newer.rope_theta, 500000.0);
}

// Qwen2.5-1M's dual_chunk_attention_config as vLLM reads it: the published file's values, vLLM's
// defaults for keys left out (each noted), and a chunk length below 1 refused.
TEST(HfConfigRules, DualChunkAttentionConfig) {
  const RopeScheme qwen =
      AsRope(LoadHfConfig(ConfigPath("real/qwen2-qwen2.5-7b-instruct-1m.json")));
  ASSERT_TRUE(qwen.dual_chunk.has_value());
  EXPECT_EQ(qwen.dual_chunk->chunk_size, 262144);
  EXPECT_EQ(qwen.dual_chunk->local_size, 8192);
  EXPECT_EQ(qwen.dual_chunk->original_max_position_embeddings, 262144);
  EXPECT_FALSE(ParseRope(Llama()).dual_chunk.has_value());
  Json config = Llama();
  config["dual_chunk_attention_config"] = Json::object();
  const RopeScheme defaults = ParseRope(config);
  ASSERT_TRUE(defaults.dual_chunk.has_value());
  EXPECT_EQ(defaults.dual_chunk->chunk_size, 8192);
  EXPECT_EQ(defaults.dual_chunk->local_size, 1024);
  EXPECT_EQ(defaults.dual_chunk->original_max_position_embeddings, 0);
  for (const char* note : {"dual_chunk_attention_config.chunk_size absent: 8192 (vLLM's default)",
                           "dual_chunk_attention_config.local_size absent: 1024 (vLLM's default)",
                           "dual_chunk_attention_config.original_max_position_embeddings absent: "
                           "0 (vLLM's default)"}) {
    EXPECT_NE(std::find(defaults.notes.begin(), defaults.notes.end(), note), defaults.notes.end())
        << note;
  }
  config["dual_chunk_attention_config"] = {{"local_size", 8192}};
  ExpectError(config.dump(),
              "[hf_config] dual_chunk_attention_config.chunk_size must be > local_size (8192): "
              "the chunk length chunk_size - local_size must be >= 1, got 8192");
  config["dual_chunk_attention_config"] = {{"chunk_size", 1024}, {"local_size", 0}};
  ExpectError(config.dump(),
              "[hf_config] dual_chunk_attention_config.local_size must be an integer in [1, "
              "4294967296], got 0");
  config["dual_chunk_attention_config"] = 4;
  ExpectError(config.dump(), "[hf_config] dual_chunk_attention_config must be an object, got 4");
}

TEST(HfConfigRules, MissingThetaTakesTheClassDefaultAndSaysSo) {
  Json config = Llama();
  config.erase("rope_theta");
  const RopeScheme scheme = ParseRope(config);
  EXPECT_EQ(scheme.layers[0].rope_theta, 10000.0);
  ASSERT_FALSE(scheme.notes.empty());
  EXPECT_NE(scheme.notes[0].find("rope_theta absent"), std::string::npos);
  config["model_type"] = "gpt_oss";
  EXPECT_EQ(ParseRope(config).layers[0].rope_theta, 150000.0);
}

TEST(HfConfigRules, LlamaDefaultIgnoresPartialRotaryButScaledTypesApplyIt) {
  // ref §0.1 and §10.8: the same config, two rotary widths.
  Json config = Llama();
  config["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(ParseRope(config).layers[0].rotary_dim, 128);
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(ParseRope(config).layers[0].rotary_dim, 64);
  // GPT-NeoX's own default applies it; the top level overrides the dict.
  config = Json{{"model_type", "gpt_neox"},
                {"hidden_size", 6144},
                {"num_attention_heads", 64},
                {"rope_parameters", {{"partial_rotary_factor", 0.5}}},
                {"partial_rotary_factor", 0.25}};
  EXPECT_EQ(ParseRope(config).layers[0].rotary_dim, 24);
  // A model posenc cannot classify: refusing beats guessing.
  config["model_type"] = "";
  ExpectErrorContaining(config.dump(), "[hf_config] partial_rotary_factor must be 1 with");
}

TEST(HfConfigRules, OriginalMaxPositionsTopLevelWinsThenDictThenM) {
  Json config =
      Llama({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2048}});
  EXPECT_EQ(*ParseRope(config).original_max_position_embeddings, 2048);
  config["original_max_position_embeddings"] = 1024;
  EXPECT_EQ(*ParseRope(config).original_max_position_embeddings, 1024);
  config.erase("original_max_position_embeddings");
  config["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_EQ(*ParseRope(config).original_max_position_embeddings, 4096);
}

TEST(HfConfigRules, YarnFactorExplicitNullAndBetaFalsyDefaults) {
  // ref §4 and §10.4: Qwen2.5's snippet (M = L0 = 32768, factor 4) uses the explicit 4.
  Json qwen = testing_support::ReadJsonFile(ConfigPath("qwen2.5-7b-instruct-yarn.json"));
  const YarnScaling yarn = std::get<YarnScaling>(ParseRope(qwen).layers[0].scaling);
  EXPECT_EQ(yarn.factor, 4.0);
  EXPECT_EQ(yarn.beta_fast, 32.0);
  EXPECT_EQ(yarn.beta_slow, 1.0);
  // Explicit null: M / L0.
  Json config = Llama(
      {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 1024}});
  EXPECT_EQ(std::get<YarnScaling>(ParseRope(config).layers[0].scaling).factor, 4.0);
  // 0 is falsy: the defaults.
  config["rope_scaling"]["beta_fast"] = 0;
  config["rope_scaling"]["beta_slow"] = 0;
  const YarnScaling falsy = std::get<YarnScaling>(ParseRope(config).layers[0].scaling);
  EXPECT_EQ(falsy.beta_fast, 32.0);
  EXPECT_EQ(falsy.beta_slow, 1.0);
  // The key itself is required.
  config["rope_scaling"].erase("factor");
  ExpectErrorContaining(config.dump(), "[hf_config] rope_scaling.factor must be a number >= 1");
  // A mismatch between M / L0 and the factor is used as written but noted.
  config["rope_scaling"]["factor"] = 2.0;
  EXPECT_NE(ParseRope(config).notes.back().find("differs from rope_scaling.factor"),
            std::string::npos);
}

TEST(HfConfigRules, NestedTruncateIsIgnoredLikeHuggingFace) {
  // ref §10.1: truncate is read from the top level of rope_parameters only.
  const Json yarn = {{"rope_type", "yarn"},
                     {"factor", 32.0},
                     {"rope_theta", 150000.0},
                     {"original_max_position_embeddings", 4096},
                     {"truncate", false}};
  Json flat = {{"model_type", "gpt_oss"},
               {"head_dim", 64},
               {"num_attention_heads", 64},
               {"max_position_embeddings", 131072},
               {"rope_parameters", yarn}};
  Json nested = flat;
  nested["rope_parameters"] = {{"full_attention", yarn}, {"sliding_attention", yarn}};
  const RopeScheme flat_scheme = ParseRope(flat), nested_scheme = ParseRope(nested);
  ASSERT_EQ(nested_scheme.layers.size(), 2u);
  EXPECT_EQ(nested_scheme.layers[0].layer_type, "full_attention");
  EXPECT_EQ(nested_scheme.layers[0].parameters_key, "rope_parameters.full_attention");
  EXPECT_FALSE(std::get<YarnScaling>(flat_scheme.layers[0].scaling).truncate);
  EXPECT_TRUE(std::get<YarnScaling>(nested_scheme.layers[0].scaling).truncate);
  EXPECT_NE(ComputeRopeFrequencies(flat_scheme.layers[0]).inv_freq,
            ComputeRopeFrequencies(nested_scheme.layers[0]).inv_freq);
  flat["rope_parameters"]["truncate"] = true;
  EXPECT_EQ(ComputeRopeFrequencies(ParseRope(flat).layers[0]).inv_freq,
            ComputeRopeFrequencies(nested_scheme.layers[0]).inv_freq);
}

TEST(HfConfigRules, PerLayerLongRopeComputesTheLongFactorsEveryTime) {
  // ref §10.2: HF raises UnboundLocalError on the second long batch; here it is a pure function.
  Json phi3 = testing_support::ReadJsonFile(ConfigPath("phi3-128k-longrope.json"));
  Json layer = phi3["rope_scaling"];
  phi3.erase("rope_scaling");
  phi3["rope_parameters"] = {{"full_attention", layer}};
  const RopeLayerScheme nested = ParseRope(phi3).layers[0];
  const auto first = ComputeRopeFrequencies(nested, {.seq_len = 8192});
  const auto second = ComputeRopeFrequencies(nested, {.seq_len = 8192});
  EXPECT_EQ(first.inv_freq, second.inv_freq);
  EXPECT_NE(first.inv_freq, ComputeRopeFrequencies(nested, {.seq_len = 4096}).inv_freq);
}

TEST(HfConfigRules, LegacySuIsLongRopeWithTopLevelL0) {
  // ref §10.3: HF fails on "su" at this commit; Phi3Config means longrope.
  const RopeScheme scheme = AsRope(LoadHfConfig(ConfigPath("phi3-128k-longrope.json")));
  const auto& rule = std::get<LongRopeScaling>(scheme.layers[0].scaling);
  EXPECT_EQ(rule.original_max_positions, 4096);
  EXPECT_EQ(rule.max_positions, 131072);
  // Compared with the golden file, which gives the same arrays as "longrope".
  const Json golden = HfRopeGolden("phi3_128k_longrope__seq4097");
  const auto ours = ComputeRopeFrequencies(scheme.layers[0], {.seq_len = 4097});
  const auto hf = golden["inv_freq_hf_f32"].get<std::vector<double>>();
  for (size_t i = 0; i < hf.size(); ++i) {
    EXPECT_LE(std::abs(ours.inv_freq[i] - hf[i]), Float32Ulp(hf[i])) << i;
  }
  // In a phi3 config, "yarn" is the other legacy name.
  Json config = testing_support::ReadJsonFile(ConfigPath("phi3-128k-longrope.json"));
  config["rope_scaling"]["type"] = "yarn";
  EXPECT_EQ(RopeTypeName(ParseRope(config).layers[0].scaling), "longrope");
}

TEST(HfConfigRules, DynamicUsesMNotL0AndIsTheDefaultAtExactlyM) {
  // ref §3 (b), §10.5, §10.11.
  Json config = testing_support::ReadJsonFile(ConfigPath("nomic-embed-text-v1.5-dynamic.json"));
  config["rope_scaling"]["original_max_position_embeddings"] = 512;
  const RopeScheme scheme = ParseRope(config);
  EXPECT_EQ(std::get<DynamicNtkScaling>(scheme.layers[0].scaling).max_positions, 2048);
  EXPECT_NE(scheme.notes.back().find("ignored by rope_type \"dynamic\""), std::string::npos);
  const auto plain = ComputeRopeFrequencies(1000.0, 64, NoScaling{});
  EXPECT_EQ(ComputeRopeFrequencies(scheme.layers[0], {.seq_len = 2048}).inv_freq, plain.inv_freq);
  EXPECT_NE(ComputeRopeFrequencies(scheme.layers[0], {.seq_len = 2049}).inv_freq, plain.inv_freq);
}

TEST(HfConfigRules, TypesContainingDynamicAreNotDynamic) {
  // ref §10.6: the substring test only picks the runtime wrapper; the type must still exist.
  ExpectError(Llama({{"rope_type", "my_dynamic"}, {"factor", 2.0}}).dump(),
              "[hf_config] rope_scaling.rope_type must be one of default, linear, dynamic, yarn, "
              "longrope, llama3, proportional, got \"my_dynamic\"");
}

TEST(HfConfigRules, NullHeadDimFallsBackForEveryType) {
  // ref §10.7: some HF types crash on head_dim: null; the config classes mean "absent".
  for (const Json& rope : {Json{{"rope_type", "linear"}, {"factor", 2.0}},
                           Json{{"rope_type", "dynamic"}, {"factor", 2.0}},
                           Json{{"rope_type", "yarn"}, {"factor", 2.0}}}) {
    Json config = Llama(rope);
    config["head_dim"] = nullptr;
    EXPECT_EQ(ParseRope(config).layers[0].head_dim, 128) << rope.dump();
  }
}

TEST(HfConfigRules, MptAlibiBiasMaxIsReadAndHuggingFacesIgnoringNoted) {
  // ref §8, §10.10.
  Json mpt = testing_support::ReadJsonFile(ConfigPath("mpt-7b.json"));
  mpt["attn_config"]["alibi_bias_max"] = 16;
  const auto scheme = std::get<AlibiScheme>(ParseHfConfig(mpt.dump()));
  EXPECT_EQ(scheme.max_bias, 16.0);
  ASSERT_EQ(scheme.notes.size(), 1u);
  EXPECT_NE(scheme.notes[0].find("ignores alibi_bias_max"), std::string::npos);
}

TEST(HfConfigRules, GptJRotatesItsRotaryDimInterleaved) {
  // GPT-J-6B: n_embd 4096 / n_head 16 = 256 per head, rotary_dim 64, pairs (2i, 2i+1).
  const RopeScheme scheme = ParseRope(Json{{"model_type", "gptj"},
                                           {"n_embd", 4096},
                                           {"n_head", 16},
                                           {"n_positions", 2048},
                                           {"rotary_dim", 64}});
  EXPECT_EQ(scheme.layers[0].head_dim, 256);
  EXPECT_EQ(scheme.layers[0].rotary_dim, 64);
  EXPECT_EQ(scheme.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(*scheme.max_position_embeddings, 2048);
  EXPECT_EQ(scheme.layers[0].rope_theta, 10000.0);
}

TEST(HfConfigRules, GemmaThreeLocalBaseGivesTwoLayerTypes) {
  const Json gemma3 = {{"model_type", "gemma3_text"},
                       {"head_dim", 256},
                       {"num_attention_heads", 8},
                       {"max_position_embeddings", 131072},
                       {"rope_theta", 1e6},
                       {"rope_local_base_freq", 1e4},
                       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  const RopeScheme scheme = ParseRope(gemma3);
  ASSERT_EQ(scheme.layers.size(), 2u);
  EXPECT_EQ(RopeTypeName(scheme.layers[0].scaling), "linear");
  EXPECT_EQ(scheme.layers[0].rope_theta, 1e6);
  EXPECT_EQ(RopeTypeName(scheme.layers[1].scaling), "default");
  EXPECT_EQ(scheme.layers[1].rope_theta, 1e4);
}

TEST(HfConfigRules, ProportionalPerLayerGemma4) {
  // ref §7: full attention: proportional, p 0.25, theta 1e6; sliding: default, theta 1e4.
  const Json gemma4 = {
      {"model_type", "gemma4_text"},
      {"head_dim", 512},
      {"num_attention_heads", 8},
      {"max_position_embeddings", 131072},
      {"rope_parameters",
       {{"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}}}};
  const RopeScheme scheme = ParseRope(gemma4);
  ASSERT_EQ(scheme.layers.size(), 2u);
  const auto full = ComputeRopeFrequencies(scheme.layers[0]);
  EXPECT_EQ(scheme.layers[0].rotary_dim, 512);
  ASSERT_EQ(full.inv_freq.size(), 256u);
  EXPECT_GT(full.inv_freq[63], 0.0);
  EXPECT_EQ(full.inv_freq[64], 0.0);
}

// ---------------------------------------------------------------------------------------------
// Malformed and hostile configs: always a posenc::Error naming the key, never a crash.

TEST(HfConfigErrors, WrongTypesNameTheKey) {
  ExpectError(Llama({{"rope_type", "linear"}, {"factor", "4"}}).dump(),
              "[hf_config] rope_scaling.factor must be a number >= 1 (required by rope_type "
              "\"linear\"), got \"4\"");
  ExpectError(Llama({{"rope_type", "linear"}, {"factor", "NaN"}}).dump(),
              "[hf_config] rope_scaling.factor must be a number >= 1 (required by rope_type "
              "\"linear\"), got \"NaN\"");
  ExpectError(Llama({{"rope_type", "linear"}, {"factor", 0.5}}).dump(),
              "[hf_config] rope_scaling.factor must be a number >= 1 (required by rope_type "
              "\"linear\"), got 0.5");
  ExpectError(Llama({{"rope_type", "linear"}}).dump(),
              "[hf_config] rope_scaling.factor must be a number >= 1 (required by rope_type "
              "\"linear\"), got nothing (the key is missing)");
  ExpectError(Llama({{"rope_type", 3}}).dump(),
              "[hf_config] rope_scaling.rope_type must be a string, got 3");
  ExpectError(Llama("linear").dump(), "[hf_config] rope_scaling must be an object, got \"linear\"");
  Json config = Llama();
  config["num_attention_heads"] = true;
  ExpectError(config.dump(),
              "[hf_config] num_attention_heads must be an integer in [1, 1048576], got true");
  config = Llama();
  config["head_dim"] = 1e30;
  ExpectError(config.dump(), "[hf_config] head_dim must be an integer in [2, 65536], got 1e+30");
  config = Llama({{"rope_type", "llama3"},
                  {"factor", 8.0},
                  {"low_freq_factor", 4.0},
                  {"high_freq_factor", 1.0}});
  ExpectError(config.dump(),
              "[hf_config] rope_scaling.high_freq_factor must be a number >= "
              "low_freq_factor (4) (required by rope_type \"llama3\"), got 1.0");
  config = testing_support::ReadJsonFile(ConfigPath("phi3-128k-longrope.json"));
  config["rope_scaling"]["short_factor"].erase(0);
  ExpectErrorContaining(config.dump(),
                        "[hf_config] rope_scaling.short_factor must be a list of "
                        "rotary_dim / 2 = 48 numbers > 0");
  config = testing_support::ReadJsonFile(ConfigPath("phi3-128k-longrope.json"));
  config["rope_scaling"]["long_factor"][3] = -1;
  ExpectError(config.dump(),
              "[hf_config] rope_scaling.long_factor[3] must be a number > 0, "
              "got -1");
  config = testing_support::ReadJsonFile(ConfigPath("gpt2.json"));
  config.erase("n_positions");
  ExpectError(config.dump(),
              "[hf_config] n_positions must be an integer in [1, "
              "9007199254740992], got nothing (the key is missing)");
  config = Llama({{"rope_type", "dynamic"}, {"factor", 2.0}});
  config.erase("max_position_embeddings");
  ExpectErrorContaining(config.dump(), "[hf_config] max_position_embeddings must be an integer");
}

TEST(HfConfigErrors, UnknownModelsAndShapes) {
  ExpectError(R"({"model_type": "xlnet", "d_model": 512})",
              "[hf_config] model_type must name a model whose position scheme posenc knows "
              "(docs/MODELS.md lists them); for another RoPE model, rope_theta (or "
              "rope_parameters) says how it rotates, got \"xlnet\"");
  ExpectError(R"({"hidden_size": 512})",
              "[hf_config] model_type must be present (or the config must have rope_theta, "
              "rope_scaling or rope_parameters), got nothing (the key is missing)");
  ExpectError("[1, 2]", "[hf_config] config must be a JSON object, got [1,2]");
  ExpectError("\"config\"", "[hf_config] config must be a JSON object, got \"config\"");
}

TEST(HfConfigErrors, HostileInputIsAnErrorNotACrash) {
  ExpectErrorContaining("", "[hf_config] config must be valid JSON");
  ExpectErrorContaining("{\"model_type\": \"llama\"", "[hf_config] config must be valid JSON");
  ExpectErrorContaining(std::string("\x00\xff\xfe{\x01garbage", 12),
                        "[hf_config] config must be valid JSON");
  ExpectErrorContaining("{\"model_type\": \"\xc3\x28\"}", "[hf_config] config must be valid JSON");
  ExpectErrorContaining(std::string(100000, '[') + std::string(100000, ']'),
                        "[hf_config] config must nest at most 64 levels deep");
  ExpectErrorContaining(R"({"model_type": "llama", "rope_theta": 1e400})",
                        "[hf_config] config must be valid JSON");
  Json config = Llama({{"rope_type", "linear"}, {"factor", 1e308}});
  EXPECT_NO_THROW(ParseHfConfig(config.dump()));  // a legal factor: tiny frequencies
  config = Llama();
  config["max_position_embeddings"] = 18446744073709551615u;
  ExpectErrorContaining(config.dump(), "[hf_config] max_position_embeddings must be an integer");
  config = Llama();
  config["hidden_size"] = -4096;
  ExpectErrorContaining(config.dump(), "[hf_config] hidden_size must be an integer");
  EXPECT_THROW(LoadHfConfig("/nonexistent/config.json"), Error);
}

TEST(HfConfigErrors, FuzzCorpusAndRegressionsLoadOrFailCleanly) {
  // Every input the fuzzer was seeded with or ever crashed on: a scheme or a posenc::Error.
  const std::filesystem::path fuzz = std::filesystem::path(POSENC_GOLDEN_DIR) / "../../fuzz";
  int inputs = 0;
  for (const char* dir : {"corpus", "regressions"}) {
    for (const auto& entry : std::filesystem::directory_iterator(fuzz / dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      try {
        const PositionScheme scheme = ParseHfConfig(text);
        if (const auto* rope = std::get_if<RopeScheme>(&scheme)) {
          for (const RopeLayerScheme& layer : rope->layers) {
            MakeRope(*rope, layer, {.seq_len = int64_t{1} << 40});
          }
        }
      } catch (const Error&) {
      }
      ++inputs;
    }
  }
  EXPECT_GE(inputs, 12);
}

TEST(HfConfigErrors, AttentionFactorsAreCheckedInTheFloat32TheyAreUsedIn) {
  // Finite in double, inf in float32, where cos and sin are scaled by it: once every output was
  // inf and the CLI exited 0.
  const std::string rule =
      "[rope_scaling] attention_factor must be a positive normal float32, in "
      "[1.1754943508222875e-38, 3.4028234663852886e+38] (mscale or attention_factor is out of "
      "range), got ";
  for (const Json& yarn :
       {Json{{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1e308}},
        Json{{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 1e308}, {"mscale_all_dim", 1.0}}}) {
    SCOPED_TRACE(yarn.dump());
    const RopeScheme scheme = ParseRope(Llama(yarn));
    try {
      MakeRope(scheme, scheme.layers.at(0));
      ADD_FAILURE() << "expected posenc::Error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(rule, 0), 0u) << e.what();
    }
  }
}

TEST(HfConfigErrors, OddHeadDimIsBlamedOnTheHead) {
  Json config = Llama();
  config["hidden_size"] = 65 * 32;  // head_dim 65, no partial_rotary_factor anywhere
  ExpectError(config.dump(),
              "[hf_config] head_dim must be even: RoPE rotates pairs of features, and without "
              "partial_rotary_factor every feature of the head rotates, got 65");
}

TEST(HfConfigErrors, NestedConfigsNameTheInnerKey) {
  // Qwen2-VL style: the language model's keys sit under text_config; a missing one is named
  // with its path.
  const Json wrapper{{"model_type", "qwen2_vl"},
                     {"text_config", {{"model_type", "qwen2_vl_text"}, {"hidden_size", 3584}}}};
  ExpectError(wrapper.dump(),
              "[hf_config] text_config.num_attention_heads must be an integer in [1, 1048576], "
              "got nothing (the key is missing)");
  ExpectError(R"({"model_type": "llama4", "text_config": [1]})",
              "[hf_config] text_config must be an object, got [1]");
}

// ---------------------------------------------------------------------------------------------
// Multimodal RoPE: the language model's position streams (MakeMRope) and the vision tower's 2-D
// RoPE (vision_config, MakeVisionRope).

RopeScheme LoadRope(const std::string& real_config) {
  return AsRope(LoadHfConfig(ConfigPath("real/" + real_config)));
}

// The notes that name a vision_config key.
std::vector<std::string> VisionNotes(const RopeScheme& scheme) {
  std::vector<std::string> notes;
  for (const std::string& note : scheme.notes) {
    if (note.find("vision_config") != std::string::npos) notes.push_back(note);
  }
  return notes;
}

void ExpectSameMRope(const MRope& got, const MRope& want) {
  EXPECT_EQ(got.num_streams, want.num_streams);
  EXPECT_EQ(got.pair_stream, want.pair_stream);
  EXPECT_EQ(got.rope.head_dim, want.rope.head_dim);
  EXPECT_EQ(got.rope.rotary_dim, want.rope.rotary_dim);
  EXPECT_EQ(got.rope.layout, want.rope.layout);
  EXPECT_EQ(got.rope.inv_freq, want.rope.inv_freq);
}

TEST(HfConfigVision, RealConfigsReadTheirTowers) {
  // Qwen2-VL-7B: embed_dim 1280 / 16 heads (its vision hidden_size 3584 is the merger's output).
  const RopeScheme qwen2 = LoadRope("qwen2_vl-qwen2-vl-7b-instruct.json");
  ASSERT_TRUE(qwen2.vision.has_value());
  EXPECT_EQ(qwen2.vision->kind, VisionRopeKind::kQwen2Vl);
  EXPECT_EQ(qwen2.vision->model_type, "");
  EXPECT_EQ(qwen2.vision->head_dim, 80);
  EXPECT_EQ(qwen2.vision->num_heads, 16);
  EXPECT_EQ(qwen2.vision->theta, 10000.0);
  EXPECT_EQ(qwen2.vision->patch_size, 14);
  EXPECT_EQ(qwen2.vision->spatial_merge_size, 2);
  EXPECT_EQ(qwen2.vision->temporal_patch_size, 2);
  EXPECT_EQ(qwen2.vision->PatchesPerSide(), 0);
  EXPECT_EQ(VisionNotes(qwen2), std::vector<std::string>{});
  EXPECT_EQ(qwen2.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(qwen2.mrope_interleaved);

  const RopeScheme qwen25 = LoadRope("qwen2_5_vl-qwen2.5-vl-7b-instruct.json");
  ASSERT_TRUE(qwen25.vision.has_value());
  EXPECT_EQ(qwen25.vision->kind, VisionRopeKind::kQwen25Vl);
  EXPECT_EQ(qwen25.vision->head_dim, 80);  // hidden_size 1280 / 16
  EXPECT_EQ(qwen25.vision->window_size, 112);
  EXPECT_EQ(qwen25.vision->WindowUnits(), 4);  // 112 / 2 / 14, get_window_index's
  EXPECT_EQ(qwen25.vision->fullatt_block_indexes, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(qwen25.vision->tokens_per_second, 2.0);
  EXPECT_EQ(VisionNotes(qwen25), std::vector<std::string>{});

  const RopeScheme qwen3 = LoadRope("qwen3_vl-qwen3-vl-8b-instruct.json");
  ASSERT_TRUE(qwen3.vision.has_value());
  EXPECT_EQ(qwen3.vision->kind, VisionRopeKind::kQwen3Vl);
  EXPECT_EQ(qwen3.vision->model_type, "qwen3_vl");
  EXPECT_EQ(qwen3.vision->head_dim, 72);  // 1152 / 16
  EXPECT_EQ(qwen3.vision->patch_size, 16);
  EXPECT_EQ(qwen3.vision->spatial_merge_size, 2);
  EXPECT_EQ(qwen3.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  EXPECT_TRUE(qwen3.mrope_interleaved);
  EXPECT_EQ(qwen3.layers[0].rope_theta, 5e6);

  // Mistral-Small-3.1: a Pixtral tower of 1024 / 16, images up to 1540 px in 14 px patches.
  const RopeScheme mistral = LoadRope("mistral3-mistral-small-3.1-24b-instruct-2503.json");
  ASSERT_TRUE(mistral.vision.has_value());
  EXPECT_EQ(mistral.vision->kind, VisionRopeKind::kPixtral);
  EXPECT_EQ(mistral.vision->head_dim, 64);
  EXPECT_EQ(mistral.vision->theta, 10000.0);
  EXPECT_EQ(mistral.vision->image_size, 1540);
  EXPECT_EQ(mistral.vision->patch_size, 14);
  EXPECT_EQ(mistral.vision->PatchesPerSide(), 110);
  EXPECT_EQ(VisionNotes(mistral), std::vector<std::string>{});
  EXPECT_TRUE(mistral.mrope_section.empty());

  // Llama 4 Scout: 1408 / 16 = 88, images of 336 px in 14 px patches: 24 a side.
  const RopeScheme scout = LoadRope("llama4-scout-17b-16e.json");
  ASSERT_TRUE(scout.vision.has_value());
  EXPECT_EQ(scout.vision->kind, VisionRopeKind::kLlama4);
  EXPECT_EQ(scout.vision->model_type, "llama4_vision_model");
  EXPECT_EQ(scout.vision->head_dim, 88);
  EXPECT_EQ(scout.vision->theta, 10000.0);
  EXPECT_EQ(scout.vision->PatchesPerSide(), 24);
  EXPECT_EQ(VisionNotes(scout), std::vector<std::string>{});
}

TEST(HfConfigVision, TransformersFiveQwenTowers) {
  // Qwen2-VL's vision_config as transformers 5.23.0's to_dict() writes it: model_type
  // "qwen2_vl_vision" and rope_parameters with rope_type "axial"; the base is read from there.
  auto qwen2_vl = [](Json rope_parameters) {
    return Json{{"model_type", "qwen2_vl"},
                {"text_config",
                 {{"model_type", "qwen2_vl_text"},
                  {"num_attention_heads", 4},
                  {"hidden_size", 64},
                  {"rope_parameters", {{"rope_type", "default"}}}}},
                {"vision_config",
                 {{"model_type", "qwen2_vl_vision"},
                  {"embed_dim", 32},
                  {"num_heads", 2},
                  {"hidden_size", 64},
                  {"patch_size", 14},
                  {"spatial_merge_size", 2},
                  {"temporal_patch_size", 2},
                  {"rope_parameters", std::move(rope_parameters)}}}};
  };
  const RopeScheme qwen2 = ParseRope(qwen2_vl({{"rope_type", "axial"}, {"rope_theta", 5000.0}}));
  ASSERT_TRUE(qwen2.vision.has_value());
  EXPECT_EQ(qwen2.vision->kind, VisionRopeKind::kQwen2Vl);
  EXPECT_EQ(qwen2.vision->model_type, "qwen2_vl_vision");
  EXPECT_EQ(qwen2.vision->head_dim, 16);
  EXPECT_EQ(qwen2.vision->theta, 5000.0);
  EXPECT_EQ(VisionNotes(qwen2), std::vector<std::string>{});
  // The quarter's frequencies 5000^(-2j / 8), j = 0 .. 3, in each half.
  const MRope mrope = MakeVisionRope(*qwen2.vision);
  for (int j = 0; j < 4; ++j) {
    EXPECT_DOUBLE_EQ(mrope.rope.inv_freq[j], std::pow(5000.0, -2.0 * j / 8.0)) << j;
  }
  // The config class turns "default" into "axial"; its module refuses any other type.
  EXPECT_EQ(ParseRope(qwen2_vl({{"rope_type", "default"}})).vision->theta, 10000.0);
  ExpectError(qwen2_vl({{"rope_type", "linear"}, {"factor", 2.0}}).dump(),
              "[hf_config] vision_config.rope_parameters.rope_type must be \"axial\" or "
              "\"default\" (the vision tower's 2-D RoPE has no scaling rule), got \"linear\"");

  for (const auto& [model_type, kind] : {std::pair{"qwen2_5_vl", VisionRopeKind::kQwen25Vl},
                                         std::pair{"qwen3_vl", VisionRopeKind::kQwen3Vl}}) {
    const Json config = {{"model_type", model_type},
                         {"num_attention_heads", 4},
                         {"hidden_size", 64},
                         {"vision_config",
                          {{"model_type", std::string(model_type) + "_vision"},
                           {"hidden_size", 32},
                           {"num_heads", 2}}}};
    const RopeScheme scheme = ParseRope(config);
    ASSERT_TRUE(scheme.vision.has_value()) << model_type;
    EXPECT_EQ(scheme.vision->kind, kind) << model_type;
    EXPECT_EQ(scheme.vision->head_dim, 16) << model_type;
  }
}

TEST(HfConfigVision, MissingKeysTakeTheConfigClassDefaults) {
  // Pixtral-12B's vision_config as transformers' test_pixtral_reload quotes it: no hidden_size
  // and no heads, so PixtralVisionConfig's 1024 and 16 give head_dim 64.
  const Json pixtral12b = {{"model_type", "llava"},
                           {"text_config",
                            {{"model_type", "mistral"},
                             {"hidden_size", 5120},
                             {"head_dim", 128},
                             {"num_attention_heads", 32},
                             {"num_key_value_heads", 8},
                             {"num_hidden_layers", 40},
                             {"max_position_embeddings", 1024000},
                             {"rope_theta", 1e9}}},
                           {"vision_config",
                            {{"model_type", "pixtral"},
                             {"head_dim", 64},
                             {"hidden_act", "silu"},
                             {"image_size", 1024},
                             {"is_composition", true},
                             {"patch_size", 16},
                             {"rope_theta", 10000.0},
                             {"tie_word_embeddings", false}}}};
  const RopeScheme pixtral = ParseRope(pixtral12b);
  ASSERT_TRUE(pixtral.vision.has_value());
  EXPECT_EQ(pixtral.vision->head_dim, 64);
  EXPECT_EQ(pixtral.vision->PatchesPerSide(), 64);
  EXPECT_EQ(VisionNotes(pixtral),
            (std::vector<std::string>{
                "vision_config.hidden_size absent: 1024 (PixtralVisionConfig's default)",
                "vision_config.num_attention_heads absent: 16 (PixtralVisionConfig's default)"}));

  struct Case {
    const char* wrapper;
    Json vision_config;
    VisionRopeKind kind;
    int64_t head_dim, patch_size, image_size;
    double theta;
  };
  const Case cases[] = {
      {"qwen2_vl", Json::object(), VisionRopeKind::kQwen2Vl, 1280 / 16, 14, 0, 1e4},
      {"qwen2_5_vl", Json::object(), VisionRopeKind::kQwen25Vl, 3584 / 16, 14, 0, 1e4},
      {"qwen3_vl", Json::object(), VisionRopeKind::kQwen3Vl, 1152 / 16, 16, 0, 1e4},
      {"mistral3", Json::object(), VisionRopeKind::kPixtral, 1024 / 16, 16, 1024, 1e4},
      {"llama4", Json::object(), VisionRopeKind::kLlama4, 768 / 16, 14, 448, 1e4},
      {"llava",
       {{"model_type", "pixtral"}, {"rope_parameters", {{"rope_theta", 2e4}}}},
       VisionRopeKind::kPixtral,
       64,
       16,
       1024,
       2e4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.wrapper);
    Json config = {{"model_type", c.wrapper},
                   {"num_attention_heads", 4},
                   {"hidden_size", 64},
                   {"rope_theta", 1e4},
                   {"vision_config", c.vision_config}};
    if (std::string(c.wrapper) == "llama4") config["text_config"] = {{"head_dim", 16}};
    const RopeScheme scheme = ParseRope(config);
    ASSERT_TRUE(scheme.vision.has_value());
    EXPECT_EQ(scheme.vision->kind, c.kind);
    EXPECT_EQ(scheme.vision->head_dim, c.head_dim);
    EXPECT_EQ(scheme.vision->patch_size, c.patch_size);
    EXPECT_EQ(scheme.vision->image_size, c.image_size);
    EXPECT_EQ(scheme.vision->theta, c.theta);
    EXPECT_FALSE(VisionNotes(scheme).empty());
  }
  const RopeScheme qwen25 = ParseRope({{"model_type", "qwen2_5_vl"},
                                       {"num_attention_heads", 4},
                                       {"hidden_size", 64},
                                       {"vision_config", Json::object()}});
  EXPECT_EQ(qwen25.vision->window_size, 112);
  EXPECT_EQ(qwen25.vision->fullatt_block_indexes, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_EQ(qwen25.vision->tokens_per_second, 4.0);
}

TEST(HfConfigVision, PixtralHeadDimComesFromTheWidth) {
  // PixtralVisionConfig.__init__ sets head_dim = hidden_size // num_attention_heads over the key.
  const RopeScheme scheme = ParseRope(
      {{"model_type", "mistral3"},
       {"text_config", {{"num_attention_heads", 4}, {"hidden_size", 64}}},
       {"vision_config", {{"hidden_size", 1024}, {"num_attention_heads", 16}, {"head_dim", 32}}}});
  EXPECT_EQ(scheme.vision->head_dim, 64);
  EXPECT_NE(std::find(scheme.notes.begin(), scheme.notes.end(),
                      "vision_config.head_dim = 32 is replaced by hidden_size // "
                      "num_attention_heads = 64, as PixtralVisionConfig does"),
            scheme.notes.end());
}

TEST(HfConfigVision, OtherTowersAreNotRead) {
  // LLaVA with a CLIP tower: learned absolute positions, no 2-D RoPE.
  const RopeScheme llava =
      ParseRope({{"model_type", "llava"},
                 {"text_config",
                  {{"model_type", "llama"}, {"num_attention_heads", 32}, {"hidden_size", 4096}}},
                 {"vision_config", {{"model_type", "clip_vision_model"}, {"hidden_size", 1024}}}});
  EXPECT_FALSE(llava.vision.has_value());
  EXPECT_EQ(VisionNotes(llava),
            std::vector<std::string>{
                "vision_config (model_type \"clip_vision_model\") is not read: posenc knows the "
                "2-D RoPE of the Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Pixtral and Llama 4 vision "
                "towers"});
  // No vision_config: no tower, no note.
  const RopeScheme text_only = LoadRope("smollm3-3b-base.json");
  EXPECT_FALSE(text_only.vision.has_value());
  EXPECT_TRUE(VisionNotes(text_only).empty());
}

TEST(HfConfigVision, MakeVisionRopeIsTheTowersBuilder) {
  ExpectSameMRope(MakeVisionRope(*LoadRope("qwen2_vl-qwen2-vl-7b-instruct.json").vision),
                  MRope::QwenVision(80, 10000.0));
  ExpectSameMRope(MakeVisionRope(*LoadRope("qwen3_vl-qwen3-vl-8b-instruct.json").vision),
                  MRope::QwenVision(72, 10000.0));
  ExpectSameMRope(
      MakeVisionRope(*LoadRope("mistral3-mistral-small-3.1-24b-instruct-2503.json").vision),
      MRope::Pixtral(64, 10000.0));
  ExpectSameMRope(MakeVisionRope(*LoadRope("llama4-scout-17b-16e.json").vision),
                  MRope::Llama4Vision(88, 10000.0));
  // Any base the loader accepts builds.
  for (const double theta : {1e-300, 1e-3, 1e300}) {
    SCOPED_TRACE(theta);
    const RopeScheme scheme =
        ParseRope({{"model_type", "mistral3"},
                   {"text_config", {{"num_attention_heads", 4}, {"hidden_size", 64}}},
                   {"vision_config",
                    {{"hidden_size", 16}, {"num_attention_heads", 4}, {"rope_theta", theta}}}});
    EXPECT_NO_THROW(MakeVisionRope(*scheme.vision));
  }
}

TEST(HfConfigVision, MakeMRopeTurnsEachSectionByItsStream) {
  // Qwen2-VL: blocks of 16, 24, 24 pairs over the default frequencies at 1e6.
  const RopeScheme qwen2 = LoadRope("qwen2_vl-qwen2-vl-7b-instruct.json");
  const MRope blocks = MakeMRope(qwen2, qwen2.layers[0]);
  const Rope rope = MakeRope(qwen2, qwen2.layers[0]);
  ExpectSameMRope(blocks, MRope::Sections(rope, qwen2.mrope_section, MropeSections::kBlocks));
  EXPECT_EQ(blocks.num_streams, 3);
  EXPECT_EQ(blocks.pair_stream[15], 0);
  EXPECT_EQ(blocks.pair_stream[16], 1);
  EXPECT_EQ(blocks.pair_stream[39], 1);
  EXPECT_EQ(blocks.pair_stream[40], 2);

  // Qwen3-VL: t h w taking turns over pairs 0-59, time for 60-63.
  const RopeScheme qwen3 = LoadRope("qwen3_vl-qwen3-vl-8b-instruct.json");
  const MRope interleaved = MakeMRope(qwen3, qwen3.layers[0]);
  ExpectSameMRope(interleaved, MRope::Sections(MakeRope(qwen3, qwen3.layers[0]),
                                               qwen3.mrope_section, MropeSections::kInterleaved));
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(interleaved.pair_stream[i], i < 60 ? i % 3 : 0) << i;

  // Sections that interleaving does not give each stream exactly, as Hugging Face lays them:
  // [2, 3, 3] over 8 pairs (tests/golden/mrope/qwen3_vl_text_uneven.json).
  const RopeScheme uneven = ParseRope(
      {{"model_type", "qwen3_vl_text"},
       {"num_attention_heads", 1},
       {"head_dim", 16},
       {"hidden_size", 16},
       {"rope_theta", 1e4},
       {"rope_scaling",
        {{"rope_type", "default"}, {"mrope_section", {2, 3, 3}}, {"mrope_interleaved", true}}}});
  EXPECT_EQ(MakeMRope(uneven, uneven.layers[0]).pair_stream,
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));

  // Without sections: one stream.
  const RopeScheme llama = ParseRope(Llama());
  const MRope one = MakeMRope(llama, llama.layers[0]);
  EXPECT_EQ(one.num_streams, 1);
  EXPECT_EQ(one.pair_stream, std::vector<int64_t>(64, 0));
}

TEST(HfConfigErrors, VisionConfigKeysAreNamed) {
  auto qwen = [](Json vision) {
    return Json{{"model_type", "qwen2_5_vl"},
                {"num_attention_heads", 4},
                {"hidden_size", 64},
                {"vision_config", std::move(vision)}}
        .dump();
  };
  auto pixtral = [](Json vision) {
    vision["model_type"] = "pixtral";
    return Json{{"model_type", "llava"},
                {"text_config",
                 {{"model_type", "mistral"}, {"num_attention_heads", 4}, {"hidden_size", 64}}},
                {"vision_config", std::move(vision)}}
        .dump();
  };
  ExpectError(qwen(3), "[hf_config] vision_config must be an object, got 3");
  ExpectError(qwen({{"hidden_size", 1000}, {"num_heads", 16}}),
              "[hf_config] vision_config.hidden_size must give a head_dim (hidden_size // "
              "num_heads) that is a multiple of 4 in [4, 65536] (2-D RoPE turns two equal sets of "
              "pairs), got 1000 // 16 = 62");
  ExpectError(
      R"({"model_type": "qwen2_vl", "num_attention_heads": 4, "hidden_size": 64,
          "vision_config": {"embed_dim": 1280, "num_heads": 640}})",
      "[hf_config] vision_config.embed_dim must give a head_dim (embed_dim // num_heads) that is "
      "a multiple of 4 in [4, 65536] (2-D RoPE turns two equal sets of pairs), got 1280 // 640 = "
      "2");
  ExpectError(qwen({{"num_heads", "16"}}),
              "[hf_config] vision_config.num_heads must be an integer in [1, 1048576], got \"16\"");
  ExpectError(qwen({{"num_heads", 0}}),
              "[hf_config] vision_config.num_heads must be an integer in [1, 1048576], got 0");
  ExpectError(qwen({{"window_size", 20}}),
              "[hf_config] vision_config.window_size must be >= spatial_merge_size x patch_size "
              "(28), so that a window holds a merged token, got 20");
  ExpectError(qwen({{"fullatt_block_indexes", {7, 1.5}}}),
              "[hf_config] vision_config.fullatt_block_indexes[1] must be an integer in [0, "
              "65535], got 1.5");
  ExpectError(qwen({{"fullatt_block_indexes", 7}}),
              "[hf_config] vision_config.fullatt_block_indexes must be a list of block indexes, "
              "got 7");
  ExpectError(qwen({{"tokens_per_second", "2"}}),
              "[hf_config] vision_config.tokens_per_second must be a number > 0, got \"2\"");
  ExpectError(qwen({{"spatial_merge_size", 0}}),
              "[hf_config] vision_config.spatial_merge_size must be an integer in [1, 16777216], "
              "got 0");
  ExpectError(pixtral({{"rope_theta", -1}}),
              "[hf_config] vision_config.rope_theta must be a number > 0, got -1");
  ExpectError(pixtral({{"rope_parameters", {{"rope_theta", 0}}}}),
              "[hf_config] vision_config.rope_parameters.rope_theta must be a number > 0, got 0");
  ExpectError(pixtral({{"rope_parameters", {{"rope_type", "yarn"}}}}),
              "[hf_config] vision_config.rope_parameters.rope_type must be \"default\" (the "
              "vision tower's 2-D RoPE has no scaling rule), got \"yarn\"");
  ExpectError(pixtral({{"rope_parameters", 1}}),
              "[hf_config] vision_config.rope_parameters must be an object, got 1");
  ExpectError(pixtral({{"image_size", 10}, {"patch_size", 14}}),
              "[hf_config] vision_config.image_size must be >= patch_size (14): the tower's "
              "patches per side are image_size // patch_size, got 10");
  ExpectError(pixtral({{"image_size", {336, 336}}}),
              "[hf_config] vision_config.image_size must be an integer in [1, 16777216], got "
              "[336,336]");
  ExpectError(R"({"model_type": "qwen2_vl", "num_attention_heads": 4, "hidden_size": 64,
                  "vision_config": {"model_type": 7}})",
              "[hf_config] vision_config.model_type must be a string, got 7");
}

}  // namespace
}  // namespace posenc
