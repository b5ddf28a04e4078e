// The per-layer description against the Hugging Face reference: real published configs in
// tests/configs/real/, and what the reference code decides for them layer by layer, in
// tests/golden/model_positions/ (see its README: produced by the reference functions, never by
// posenc).
#include "posenc/model_positions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/model_report.h"
#include "posenc/mrope.h"
#include "posenc/relative_bias.h"
#include "posenc/rope.h"
#include "test_support.h"

namespace posenc {
namespace {

using Json = nlohmann::json;

using testing_support::ConfigPath;

Json Golden(const std::string& name) {
  return testing_support::GoldenJson("model_positions/" + name + ".json");
}

ModelPositions Describe(const Json& config) { return DescribeModel(config.dump()); }

void ExpectError(const Json& config, const std::string& message) {
  testing_support::ExpectError([&] { DescribeModel(config.dump()); }, message);
}

const RopeScheme& RopeOf(const ModelPositions& model) { return std::get<RopeScheme>(model.scheme); }

// Layer by layer: type, RoPE or NoPE, window, chunk and theta as the reference decided them.
void ExpectLayersMatchGolden(const std::string& name, const std::string& config_file) {
  SCOPED_TRACE(name);
  const Json golden = Golden(name);
  const ModelPositions model = LoadModelPositions(ConfigPath(config_file));
  ASSERT_EQ(model.layers.size(), golden["num_hidden_layers"].get<size_t>());
  for (const Json& expected : golden["layers"]) {
    const LayerPositions& layer = model.layers[expected["layer"].get<size_t>()];
    SCOPED_TRACE("layer " + std::to_string(layer.index));
    EXPECT_EQ(layer.layer_type, expected["layer_type"].get<std::string>());
    EXPECT_EQ(layer.scheme == LayerScheme::kRope, expected["use_rope"].get<bool>());
    if (!expected["use_rope"].get<bool>()) EXPECT_EQ(layer.scheme, LayerScheme::kNope);
    EXPECT_EQ(layer.sliding_window,
              expected["sliding_window"].is_null() ? 0 : expected["sliding_window"].get<int64_t>());
    if (expected.contains("attention_chunk_size")) {
      EXPECT_EQ(layer.attention_chunk_size, expected["attention_chunk_size"].is_null()
                                                ? 0
                                                : expected["attention_chunk_size"].get<int64_t>());
    }
    if (layer.scheme == LayerScheme::kRope) {
      EXPECT_EQ(RopeOf(model).layers[static_cast<size_t>(layer.rope_layer)].rope_theta,
                expected["rope_theta"].get<double>());
    }
  }
}

// Every distinct RoPE kind: Hugging Face's float32 inverse frequencies, bit for bit.
void ExpectFrequenciesMatchGolden(const std::string& name, const std::string& config_file) {
  SCOPED_TRACE(name);
  const Json golden = Golden(name);
  const ModelPositions model = LoadModelPositions(ConfigPath(config_file));
  for (const LayerPositions& layer : model.layers) {
    if (layer.scheme != LayerScheme::kRope) continue;
    const RopeLayerScheme& rope = RopeOf(model).layers[static_cast<size_t>(layer.rope_layer)];
    const Json& expected = golden["rope"].contains(layer.layer_type)
                               ? golden["rope"][layer.layer_type]
                               : golden["rope"].begin().value();
    const RopeFrequencies frequencies = ComputeRopeFrequencies(rope);
    ASSERT_EQ(frequencies.inv_freq.size(), expected["inv_freq"].size()) << layer.index;
    for (size_t i = 0; i < frequencies.inv_freq.size(); ++i) {
      EXPECT_EQ(static_cast<float>(frequencies.inv_freq[i]), expected["inv_freq"][i].get<float>())
          << "layer " << layer.index << " pair " << i;
    }
    EXPECT_NEAR(frequencies.attention_factor, expected["attention_scaling"].get<double>(), 1e-7);
  }
}

// The reference's own rotation of q[h][d] = 0.01 (d + 1) - 0.3 h: proves which features rotate
// and how they pair. `stored` maps posenc's feature to the reference's (DeepSeek V3 stores the
// rotated block de-interleaved).
void ExpectRotationMatchesGolden(const std::string& name, const std::string& config_file,
                                 int64_t layer_index,
                                 int64_t (*stored)(int64_t feature, const Rope& rope) = nullptr) {
  SCOPED_TRACE(name);
  const Json golden = Golden(name)["layout"];
  const ModelPositions model = LoadModelPositions(ConfigPath(config_file));
  const RopeScheme& scheme = RopeOf(model);
  const int rope_layer =
      model.layers.empty() ? 0 : model.layers[static_cast<size_t>(layer_index)].rope_layer;
  ASSERT_GE(rope_layer, 0);
  const Rope rope = MakeRope(scheme, scheme.layers[static_cast<size_t>(rope_layer)]);
  const int64_t head_dim = golden["head_dim"].get<int64_t>();
  ASSERT_EQ(rope.head_dim, head_dim);
  EXPECT_EQ(rope.rotary_dim, golden["rotary_dim"].get<int64_t>());
  for (const Json& position_json : golden["positions"]) {
    const int64_t position = position_json.get<int64_t>();
    const Json& expected = golden["rotated_q"][std::to_string(position)];
    std::vector<float> q(static_cast<size_t>(2 * head_dim));
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        q[static_cast<size_t>(h * head_dim + d)] =
            0.01f * static_cast<float>(d + 1) - 0.3f * static_cast<float>(h);
      }
    }
    const std::vector<int64_t> positions{position};
    ApplyRope(rope, positions, Heads<float>::Dense(q.data(), 1, 2, head_dim));
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t ref = stored != nullptr ? stored(d, rope) : d;
        // Hugging Face forms angles in float32 (position x float32 inv_freq); posenc in double:
        // they differ by up to ~position x 2^-24 radians.
        EXPECT_NEAR(q[static_cast<size_t>(h * head_dim + d)],
                    expected[static_cast<size_t>(h)][static_cast<size_t>(ref)].get<double>(),
                    2e-6 + 2e-7 * static_cast<double>(position))
            << "position " << position << " head " << h << " feature " << d;
      }
    }
  }
}

TEST(ModelPositionsGolden, Llama4ScoutNopeEveryFourthLayerChunkedRopeLayers) {
  ExpectLayersMatchGolden("llama4-scout-17b-16e", "real/llama4-scout-17b-16e.json");
  ExpectFrequenciesMatchGolden("llama4-scout-17b-16e", "real/llama4-scout-17b-16e.json");
  ExpectRotationMatchesGolden("llama4-scout-17b-16e", "real/llama4-scout-17b-16e.json", 0);
  const ModelPositions model = LoadModelPositions(ConfigPath("real/llama4-scout-17b-16e.json"));
  EXPECT_EQ(model.config_prefix, "text_config.");
  EXPECT_EQ(model.MainScheme(), LayerScheme::kRope);
  EXPECT_EQ(RopeOf(model).layout, RopeLayout::kInterleaved);
  // The temperature of the NoPE layers at the reference's positions.
  const Json golden = Golden("llama4-scout-17b-16e")["query_scale"];
  const LayerPositions& nope = model.layers[3];
  ASSERT_TRUE(nope.query_scale.has_value());
  EXPECT_FALSE(model.layers[0].query_scale.has_value());
  for (size_t i = 0; i < golden["temperature_positions"].size(); ++i) {
    const auto position = static_cast<int64_t>(golden["temperature_positions"][i].get<double>());
    EXPECT_NEAR(nope.query_scale->At(position), golden["temperature_scales"][i].get<double>(), 1e-6)
        << position;
  }
}

TEST(ModelPositionsGolden, SmolLM3NopeLayers) {
  ExpectLayersMatchGolden("smollm3-3b-base", "real/smollm3-3b-base.json");
  ExpectFrequenciesMatchGolden("smollm3-3b-base", "real/smollm3-3b-base.json");
}

TEST(ModelPositionsGolden, EmbeddingGemmaLocalGlobalBidirectional) {
  ExpectLayersMatchGolden("gemma3_text-embeddinggemma-300m",
                          "real/gemma3_text-embeddinggemma-300m.json");
  ExpectFrequenciesMatchGolden("gemma3_text-embeddinggemma-300m",
                               "real/gemma3_text-embeddinggemma-300m.json");
  const ModelPositions model =
      LoadModelPositions(ConfigPath("real/gemma3_text-embeddinggemma-300m.json"));
  EXPECT_FALSE(model.layers[0].causal);
  EXPECT_TRUE(model.layers[0].symmetric_window);
  EXPECT_DOUBLE_EQ(
      *RopeOf(model).softmax_scale,
      Golden("gemma3_text-embeddinggemma-300m")["query_scale"]["scaling"].get<double>());
}

// ModernBERT: global layers 0, 3, 6, ... at theta 160000; the others see 64 keys each side.
TEST(ModelPositionsGolden, ModernBertGlobalEveryThirdLayer) {
  const std::string name = "modernbert-modernbert-large-zeroshot-v2.0";
  ExpectLayersMatchGolden(name, "real/" + name + ".json");
  ExpectFrequenciesMatchGolden(name, "real/" + name + ".json");
  ExpectRotationMatchesGolden(name, "real/" + name + ".json", 0);
  const ModelPositions model = LoadModelPositions(ConfigPath("real/" + name + ".json"));
  const Json golden = Golden(name);  // the loop must not range over a temporary's member
  for (const Json& expected : golden["layers"]) {
    const LayerPositions& layer = model.layers[expected["layer"].get<size_t>()];
    EXPECT_FALSE(layer.causal);
    if (!expected["window_left"].is_null()) {
      EXPECT_TRUE(layer.symmetric_window);
      EXPECT_EQ(layer.sliding_window / 2, expected["window_left"].get<int64_t>());
    }
  }
}

TEST(ModelPositionsGolden, ChatGlmRotatesHalfTheHeadInterleaved) {
  for (const std::string name : {"chatglm-chatglm2-6b", "chatglm-glm-4-9b-chat"}) {
    ExpectLayersMatchGolden(name, "real/" + name + ".json");
    ExpectFrequenciesMatchGolden(name, "real/" + name + ".json");
    ExpectRotationMatchesGolden(name, "real/" + name + ".json", 0);
    const ModelPositions model = LoadModelPositions(ConfigPath("real/" + name + ".json"));
    EXPECT_EQ(RopeOf(model).num_key_value_heads,
              Golden(name)["heads"]["num_key_value_heads"].get<int64_t>());
  }
}

TEST(ModelPositionsGolden, CohereIsInterleaved) {
  ExpectLayersMatchGolden("cohere-aya-23-8b", "real/cohere-aya-23-8b.json");
  ExpectFrequenciesMatchGolden("cohere-aya-23-8b", "real/cohere-aya-23-8b.json");
  ExpectRotationMatchesGolden("cohere-aya-23-8b", "real/cohere-aya-23-8b.json", 0);
}

// DeepSeek V3 rotates interleaved pairs of its last 64 features and stores them de-interleaved
// (pair i's two outputs at 128 + i and 128 + 32 + i); q.k is the same either way.
TEST(ModelPositionsGolden, DeepSeekV3RotatesTheLast64Of192) {
  const auto deinterleaved = [](int64_t d, const Rope& rope) -> int64_t {
    if (d < rope.rotary_offset) return d;
    const int64_t k = d - rope.rotary_offset;
    return rope.rotary_offset + (k % 2 == 0 ? k / 2 : rope.rotary_dim / 2 + k / 2);
  };
  ExpectRotationMatchesGolden("deepseek-v3", "deepseek-v3.json", 0, deinterleaved);
  const ModelPositions model = LoadModelPositions(ConfigPath("deepseek-v3.json"));
  const RopeLayerScheme& layer = RopeOf(model).layers[0];
  EXPECT_EQ(layer.head_dim, 192);
  EXPECT_EQ(layer.rotary_dim, 64);
  EXPECT_EQ(layer.rotary_offset, 128);
  EXPECT_NEAR(*RopeOf(model).softmax_scale,
              Golden("deepseek-v3")["query_scale"]["scaling"].get<double>(), 1e-12);
}

TEST(ModelPositionsGolden, OptRowsStartAtTwo) {
  const ModelPositions model = Describe({{"model_type", "opt"},
                                         {"max_position_embeddings", 2048},
                                         {"hidden_size", 768},
                                         {"num_hidden_layers", 12}});
  const auto& opt = std::get<LearnedPositionScheme>(model.scheme);
  // Five tokens, no padding: the reference reads rows 2..6, i.e. offset + position.
  const Json rows = Golden("opt-learned-positions")["cases"][0]["embedding_rows"];
  for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(opt.offset + p, rows[static_cast<size_t>(p)]);
  EXPECT_EQ(model.layers.size(), 12u);
  EXPECT_EQ(model.layers[0].scheme, LayerScheme::kLearned);
}

// tests/configs/llama3.1-8b.json leaves out num_hidden_layers; LlamaConfig's default (32 in
// transformers 5.23.0) gives its layers an index, and every layer is Llama 3.1's RoPE.
TEST(ModelPositions, LlamaExcerptTakesLlamaConfigsLayerCount) {
  const ModelPositions model = LoadModelPositions(ConfigPath("llama3.1-8b.json"));
  ASSERT_EQ(model.layers.size(), 32u);
  EXPECT_NE(std::find(model.notes.begin(), model.notes.end(),
                      "num_hidden_layers absent: 32 (LlamaConfig's default)"),
            model.notes.end());
  const Json golden = testing_support::GoldenJson("hf_rope/llama3_1_8b.json");
  const RopeScheme& rope = RopeOf(model);
  for (const LayerChoice& choice :
       {LayerChoice{.index = 0, .type = {}}, LayerChoice{.index = 31, .type = {}}, LayerChoice{}}) {
    const Rope made = MakeRope(rope, RopeLayer(model, choice, "test", "layer", "layer_type"));
    // Reference precision: bit-equal to Hugging Face's float32 frequencies.
    EXPECT_EQ(made.inv_freq, golden["inv_freq_hf_f32"].get<std::vector<double>>());
  }
  testing_support::ExpectError(
      [&] { RopeLayer(model, {.index = 32, .type = {}}, "test", "layer", "layer_type"); },
      "[test] layer must be a layer index in [0, 32) or a layer type, got 32");
}

// One rule for every front end: neither index nor type is the config's first RoPE setting (Gemma
// 3: the full layers' rope_theta before rope_local_base_freq); both is an error.
TEST(ModelPositions, RopeLayerDefaultsToTheFirstRopeSetting) {
  const ModelPositions model = Describe({{"model_type", "gemma3_text"},
                                         {"hidden_size", 64},
                                         {"num_attention_heads", 4},
                                         {"head_dim", 16},
                                         {"num_hidden_layers", 6},
                                         {"sliding_window", 512},
                                         {"rope_theta", 1000000.0},
                                         {"rope_local_base_freq", 10000.0}});
  EXPECT_EQ(RopeLayer(model, {}, "test", "layer", "layer_type").rope_theta, 1000000.0);
  EXPECT_EQ(RopeLayer(model, {.index = 0, .type = {}}, "test", "layer", "layer_type").rope_theta,
            10000.0);  // layer 0 slides: Gemma3TextConfig's (i + 1) % 6 rule
  EXPECT_EQ(
      RopeLayer(model, {.index = {}, .type = "sliding_attention"}, "test", "layer", "layer_type")
          .rope_theta,
      10000.0);
  testing_support::ExpectError(
      [&] {
        RopeLayer(model, {.index = 5, .type = "full_attention"}, "test", "layer", "layer_type");
      },
      "[test] layer must be left out when layer_type is given (one picks a layer, the other a "
      "type), got 5");
}

TEST(ModelPositions, T5EncoderBidirectionalDecoderCausal) {
  const ModelPositions model = Describe({{"model_type", "t5"},
                                         {"num_heads", 8},
                                         {"num_layers", 6},
                                         {"relative_attention_num_buckets", 32},
                                         {"relative_attention_max_distance", 128}});
  EXPECT_EQ(model.MainScheme(), LayerScheme::kRelativeBias);
  ASSERT_EQ(model.layers.size(), 12u);
  EXPECT_FALSE(model.layers[0].causal);
  EXPECT_EQ(model.layers[0].layer_type, "encoder");
  EXPECT_TRUE(model.layers[6].causal);
  const AttentionOptions encoder = LayerAttentionOptions(model, 0);
  ASSERT_TRUE(encoder.relative_bias.has_value());
  EXPECT_TRUE(encoder.relative_bias->buckets.bidirectional);
  EXPECT_EQ(encoder.scale, 1.0);
  EXPECT_FALSE(LayerAttentionOptions(model, 6).relative_bias->buckets.bidirectional);
  // Each (query, key) pair of the reference's table, through the description's buckets.
  const Json golden = Golden("t5-buckets-32-128");  // not a temporary's member: it would die
  for (const Json& pair : golden["pairs"]) {
    const int64_t relative = pair["key_pos"].get<int64_t>() - pair["query_pos"].get<int64_t>();
    EXPECT_EQ(RelativePositionBucket(encoder.relative_bias->buckets, relative),
              pair["bidirectional"].get<int64_t>())
        << relative;
    EXPECT_EQ(
        RelativePositionBucket(LayerAttentionOptions(model, 6).relative_bias->buckets, relative),
        pair["causal"].get<int64_t>())
        << relative;
  }
}

// Hand-built configs of each family rule (the rules cite the reference in model_positions.cc).
TEST(ModelPositions, Gemma2AlternatesFromASlidingFirstLayer) {
  const ModelPositions model = Describe({{"model_type", "gemma2"},
                                         {"num_attention_heads", 8},
                                         {"head_dim", 256},
                                         {"hidden_size", 2304},
                                         {"num_hidden_layers", 4},
                                         {"sliding_window", 4096},
                                         {"rope_theta", 10000.0},
                                         {"query_pre_attn_scalar", 256}});
  EXPECT_EQ(model.layers[0].sliding_window, 4096);
  EXPECT_EQ(model.layers[1].sliding_window, 0);
  EXPECT_EQ(model.layers[2].layer_type, "sliding_attention");
  EXPECT_EQ(model.layers[3].layer_type, "full_attention");
  // No attn_logit_softcapping: no soft-capping.
  EXPECT_EQ(LayerAttentionOptions(model, 0).softcap, 0.0);
}

TEST(ModelPositions, Gemma2CapsItsLogits) {
  // Gemma 2 2B's config: attn_logit_softcapping 50, query_pre_attn_scalar 256, on every layer.
  Json config = {
      {"model_type", "gemma2"}, {"num_attention_heads", 8},     {"head_dim", 256},
      {"hidden_size", 2304},    {"num_hidden_layers", 2},       {"sliding_window", 4096},
      {"rope_theta", 10000.0},  {"query_pre_attn_scalar", 256}, {"attn_logit_softcapping", 50.0}};
  const ModelPositions model = Describe(config);
  for (const int64_t layer : {0, 1}) {
    const AttentionOptions options = LayerAttentionOptions(model, layer);
    EXPECT_EQ(options.softcap, 50.0) << layer;
    EXPECT_EQ(options.scale, 1.0 / 16.0) << layer;
  }
  // Gemma 3's configs give null: none.
  config["model_type"] = "gemma3_text";
  config["attn_logit_softcapping"] = nullptr;
  EXPECT_EQ(LayerAttentionOptions(Describe(config), 0).softcap, 0.0);
  config["attn_logit_softcapping"] = -1.0;
  ExpectError(config, "[hf_config] attn_logit_softcapping must be a number > 0 or null, got -1.0");
}

TEST(ModelPositions, Cohere2AndExaone4RotateOnlySlidingLayers) {
  for (const std::string type : {"cohere2", "exaone4"}) {
    const ModelPositions model = Describe({{"model_type", type},
                                           {"num_attention_heads", 8},
                                           {"hidden_size", 1024},
                                           {"num_hidden_layers", 8},
                                           {"sliding_window", 4096},
                                           {"sliding_window_pattern", 4},
                                           {"rope_theta", 10000.0}});
    for (int64_t i = 0; i < 8; ++i) {
      const bool global = (i + 1) % 4 == 0;
      EXPECT_EQ(model.layers[static_cast<size_t>(i)].scheme,
                global ? LayerScheme::kNope : LayerScheme::kRope)
          << type << " " << i;
    }
  }
  // EXAONE 4 without a window rotates everywhere; the "LLLG" string pattern is read too.
  const ModelPositions flat = Describe({{"model_type", "exaone4"},
                                        {"num_attention_heads", 8},
                                        {"hidden_size", 1024},
                                        {"num_hidden_layers", 4},
                                        {"rope_theta", 10000.0}});
  for (const LayerPositions& layer : flat.layers) EXPECT_EQ(layer.scheme, LayerScheme::kRope);
  const ModelPositions letters = Describe({{"model_type", "exaone4"},
                                           {"num_attention_heads", 8},
                                           {"hidden_size", 1024},
                                           {"num_hidden_layers", 4},
                                           {"rope_theta", 10000.0},
                                           {"sliding_window", 4096},
                                           {"sliding_window_pattern", "LLLG"}});
  EXPECT_EQ(letters.layers[3].scheme, LayerScheme::kNope);
  EXPECT_EQ(letters.layers[2].sliding_window, 4096);
}

TEST(ModelPositions, HybridModelsHaveNopeAttentionBetweenMambaLayers) {
  const ModelPositions nemotron = Describe({{"model_type", "nemotron_h"},
                                            {"num_hidden_layers", 6},
                                            {"hybrid_override_pattern", "M-M*-E"}});
  EXPECT_EQ(nemotron.MainScheme(), LayerScheme::kNone);
  EXPECT_EQ(nemotron.layers[3].scheme, LayerScheme::kNope);
  EXPECT_EQ(nemotron.layers[0].layer_type, "mamba");
  EXPECT_EQ(nemotron.layers[5].scheme, LayerScheme::kNone);
  const ModelPositions jamba = Describe({{"model_type", "jamba"},
                                         {"num_hidden_layers", 16},
                                         {"attn_layer_period", 8},
                                         {"attn_layer_offset", 4}});
  for (const LayerPositions& layer : jamba.layers) {
    EXPECT_EQ(layer.scheme, layer.index % 8 == 4 ? LayerScheme::kNope : LayerScheme::kNone);
  }
}

TEST(ModelPositions, MinistralScalesEveryQuery) {
  const Json config{{"model_type", "mistral3"},
                    {"text_config",
                     {{"model_type", "ministral3"},
                      {"num_attention_heads", 32},
                      {"head_dim", 128},
                      {"hidden_size", 4096},
                      {"num_hidden_layers", 2},
                      {"max_position_embeddings", 262144},
                      {"rope_parameters",
                       {{"rope_type", "yarn"},
                        {"rope_theta", 1e6},
                        {"factor", 16.0},
                        {"original_max_position_embeddings", 16384},
                        {"llama_4_scaling_beta", 0.1},
                        {"beta_fast", 32.0},
                        {"beta_slow", 1.0}}}}}};
  const ModelPositions model = Describe(config);
  ASSERT_TRUE(model.layers[1].query_scale.has_value());
  // 1 + 0.1 ln(1 + floor(p / 16384)): 1 below 16384, 1 + 0.1 ln 2 from there.
  EXPECT_DOUBLE_EQ(model.layers[1].query_scale->At(16383), 1.0);
  EXPECT_DOUBLE_EQ(model.layers[1].query_scale->At(16384), 1.0 + 0.1 * std::log(2.0));
}

TEST(ModelPositions, QwenVlReportsMropeSections) {
  const ModelPositions model =
      Describe({{"model_type", "qwen2_vl"},
                {"num_attention_heads", 28},
                {"hidden_size", 3584},
                {"num_hidden_layers", 28},
                {"rope_theta", 1e6},
                {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}}}});
  EXPECT_EQ(RopeOf(model).mrope_section, (std::vector<int64_t>{16, 24, 24}));
  ExpectError({{"model_type", "qwen2_vl"},
               {"num_attention_heads", 28},
               {"hidden_size", 3584},
               {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {16, 24, 23}}}}},
              "[hf_config] rope_scaling.mrope_section must be a list of positive integers summing "
              "to rotary_dim / 2 = 64, got [16,24,23]");
}

TEST(ModelPositions, FalconAndBaichuanOldNames) {
  const ModelPositions falcon40 = Describe({{"model_type", "RefinedWeb"},
                                            {"n_head", 128},
                                            {"n_head_kv", 8},
                                            {"hidden_size", 8192},
                                            {"n_layer", 60},
                                            {"alibi", false}});
  EXPECT_EQ(RopeOf(falcon40).num_key_value_heads, 8);
  EXPECT_EQ(falcon40.layers.size(), 60u);
  const ModelPositions falcon7 = Describe({{"model_type", "RefinedWebModel"},
                                           {"n_head", 71},
                                           {"multi_query", true},
                                           {"hidden_size", 4544},
                                           {"n_layer", 32},
                                           {"alibi", false}});
  EXPECT_EQ(RopeOf(falcon7).num_key_value_heads, 1);
  const ModelPositions baichuan13 = Describe({{"model_type", "baichuan"},
                                              {"architectures", {"BaichuanForCausalLM"}},
                                              {"num_attention_heads", 40},
                                              {"hidden_size", 5120},
                                              {"num_hidden_layers", 40}});
  EXPECT_EQ(baichuan13.MainScheme(), LayerScheme::kAlibi);
  const ModelPositions baichuan7 = Describe({{"model_type", "baichuan"},
                                             {"architectures", {"BaichuanForCausalLM"}},
                                             {"num_attention_heads", 32},
                                             {"hidden_size", 4096},
                                             {"num_hidden_layers", 32}});
  EXPECT_EQ(baichuan7.MainScheme(), LayerScheme::kRope);
}

TEST(ModelPositions, LayerAttentionOptionsRunEachLayerAsDescribed) {
  const ModelPositions model = LoadModelPositions(ConfigPath("real/llama4-scout-17b-16e.json"));
  const AttentionOptions rope_layer = LayerAttentionOptions(model, 0);
  EXPECT_TRUE(rope_layer.rope.has_value());
  EXPECT_EQ(rope_layer.chunk_size, 8192);
  EXPECT_TRUE(rope_layer.causal);
  const AttentionOptions nope_layer = LayerAttentionOptions(model, 3);
  EXPECT_FALSE(nope_layer.rope.has_value());
  EXPECT_EQ(nope_layer.chunk_size, 0);
  EXPECT_TRUE(nope_layer.query_scale.has_value());
  try {
    LayerAttentionOptions(model, 48);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[layer_attention_options] layer must be in [0, 48), got 48");
  }
}

TEST(ModelPositionsErrors, BadLayerKeysNameTheKey) {
  const Json smol{{"model_type", "smollm3"}, {"num_attention_heads", 16},
                  {"hidden_size", 2048},     {"num_hidden_layers", 4},
                  {"rope_theta", 5e6},       {"no_rope_layers", {1, 1, 1}}};
  ExpectError(smol,
              "[hf_config] no_rope_layers must be a list of num_hidden_layers = 4 0 (NoPE) "
              "or 1 (RoPE) entries, got [1,1,1]");
  const Json chunk = {
      {"model_type", "llama4_text"},
      {"num_hidden_layers", 4},
      {"layer_types",
       {"chunked_attention", "chunked_attention", "chunked_attention", "full_attention"}},
      {"attention_chunk_size", 0}};
  ExpectError(chunk,
              "[hf_config] attention_chunk_size must be an integer in [1, 9007199254740992], "
              "got 0");
  ExpectError({{"model_type", "t5"}, {"num_heads", 8}, {"relative_attention_num_buckets", 0}},
              "[hf_config] relative_attention_num_buckets must be an integer >= 4 (the encoder "
              "splits them by direction, then into exact and logarithmic halves), got 0");
  ExpectError({{"model_type", "mistral"},
               {"num_attention_heads", 8},
               {"hidden_size", 1024},
               {"num_hidden_layers", 2},
               {"sliding_window", 4096},
               {"use_sliding_window", false}},
              "[hf_config] use_sliding_window must not be false when sliding_window gives "
              "sliding layers their window (conflicting window keys), got false");
  ExpectError(
      {{"model_type", "nemotron_h"}, {"num_hidden_layers", 3}, {"hybrid_override_pattern", "M*"}},
      "[hf_config] hybrid_override_pattern must be a string of num_hidden_layers = 3 "
      "characters M (Mamba), * (attention), - (MLP) or E (mixture of experts), got "
      "\"M*\"");
  ExpectError({{"model_type", "gemma3"},
               {"text_config",
                {{"model_type", "gemma3_text"},
                 {"num_hidden_layers", 2},
                 {"layer_types", {"sliding_attention", "bogus"}}}}},
              "[hf_config] text_config.layer_types[1] must name a layer type with RoPE parameters "
              "(full_attention, sliding_attention), got \"bogus\"");
  ExpectError({{"model_type", "xlnet"}},
              "[hf_config] model_type must name a model whose position scheme posenc knows "
              "(docs/MODELS.md lists them); for another RoPE model, rope_theta (or "
              "rope_parameters) says how it rotates, got \"xlnet\"");
}

// Multimodal models: the language model's M-RoPE streams and the vision tower's 2-D RoPE, as the
// report (posenc inspect --json, posenc.model_positions) tells them.
TEST(ModelPositions, VisionLanguageConfigsReportStreamsAndTower) {
  auto report = [](const std::string& config) {
    return Json::parse(ModelPositionsJson(LoadModelPositions(ConfigPath("real/" + config))));
  };
  const Json qwen2 = report("qwen2_vl-qwen2-vl-7b-instruct.json");
  EXPECT_EQ(qwen2["layers"].size(), 28u);
  EXPECT_EQ(qwen2["mrope_section"], Json::parse("[16, 24, 24]"));  // the keys of before stay
  EXPECT_EQ(qwen2["mrope"]["layout"], "blocks");
  EXPECT_EQ(qwen2["mrope"]["streams"], Json::parse(R"(["time", "height", "width"])"));
  EXPECT_EQ(qwen2["mrope"]["pairs"],
            "sections [16, 24, 24] in blocks: pairs 0-15 time, 16-39 height, 40-63 width");
  EXPECT_EQ(qwen2["mrope"]["pair_stream"].size(), 64u);
  EXPECT_EQ(qwen2["vision_rope"]["kind"], "qwen2_vl");
  EXPECT_EQ(qwen2["vision_rope"]["head_dim"], 80);
  EXPECT_EQ(qwen2["vision_rope"]["layout"], "half-split");
  EXPECT_EQ(qwen2["vision_rope"]["pairs"], "pairs 0-19 row, 20-39 column");
  EXPECT_EQ(qwen2["vision_rope"]["inv_freq"].size(), 40u);
  EXPECT_EQ(qwen2["vision_rope"]["spatial_merge_size"], 2);
  EXPECT_TRUE(qwen2["vision_rope"]["image_size"].is_null());
  EXPECT_TRUE(qwen2["vision_rope"]["window_size"].is_null());

  const Json qwen25 = report("qwen2_5_vl-qwen2.5-vl-7b-instruct.json");
  EXPECT_EQ(qwen25["vision_rope"]["window_units"], 4);
  EXPECT_EQ(qwen25["vision_rope"]["tokens_per_second"], 2.0);
  EXPECT_EQ(qwen25["vision_rope"]["fullatt_block_indexes"], Json::parse("[7, 15, 23, 31]"));

  const Json qwen3 = report("qwen3_vl-qwen3-vl-8b-instruct.json");
  EXPECT_EQ(qwen3["config_prefix"], "text_config.");
  EXPECT_EQ(qwen3["layers"].size(), 36u);
  EXPECT_EQ(qwen3["mrope"]["layout"], "interleaved");
  EXPECT_EQ(qwen3["mrope"]["pairs"],
            "sections [24, 20, 20] interleaved: t h w t h w ... (pairs 0-59), t (60-63)");
  EXPECT_EQ(qwen3["vision_rope"]["pairs"], "pairs 0-17 row, 18-35 column");

  const Json mistral = report("mistral3-mistral-small-3.1-24b-instruct-2503.json");
  EXPECT_TRUE(mistral["mrope"].is_null());
  EXPECT_EQ(mistral["vision_rope"]["kind"], "pixtral");
  EXPECT_EQ(mistral["vision_rope"]["pairs"], "pairs 0-15 row, 16-31 column");
  EXPECT_EQ(mistral["vision_rope"]["patches_per_side"], 110);
  EXPECT_TRUE(mistral["vision_rope"]["spatial_merge_size"].is_null());

  const Json scout = report("llama4-scout-17b-16e.json");
  EXPECT_TRUE(scout["mrope"].is_null());
  EXPECT_EQ(scout["vision_rope"]["kind"], "llama4");
  EXPECT_EQ(scout["vision_rope"]["layout"], "interleaved");
  EXPECT_EQ(scout["vision_rope"]["streams"], Json::parse(R"(["column", "row"])"));
  EXPECT_EQ(scout["vision_rope"]["pairs"], "pairs 0-21 column, 22-43 row");
  EXPECT_EQ(scout["vision_rope"]["patches_per_side"], 24);

  const Json smollm = report("smollm3-3b-base.json");
  EXPECT_TRUE(smollm["mrope"].is_null());
  EXPECT_TRUE(smollm["vision_rope"].is_null());
}

TEST(ModelPositions, VisionTowerInWords) {
  const ModelPositions qwen25 =
      LoadModelPositions(ConfigPath("real/qwen2_5_vl-qwen2.5-vl-7b-instruct.json"));
  EXPECT_EQ(VisionRopeSummary(*RopeOf(qwen25).vision),
            (std::vector<std::string>{
                "qwen2_5_vl tower: head_dim 80 (16 heads), theta 1e4, half-split pairs; pairs "
                "0-19 row, 20-39 column",
                "both halves at 1e4^(-2j / 40), j < 20 (VisionRotaryEmbedding(head_dim / 2))",
                "patches of 14 px, merged 2 x 2 into one language-model token (positions in "
                "merge-block order), 2 frames per temporal patch",
                "window attention over 112 px = 4 x 4 merged tokens: the tower runs its patches, "
                "positions too, in window order; full attention in blocks 7, 15, 23, 31; video "
                "time 2 positions per second"}));
  const ModelPositions scout = LoadModelPositions(ConfigPath("real/llama4-scout-17b-16e.json"));
  EXPECT_EQ(VisionRopeSummary(*RopeOf(scout).vision),
            (std::vector<std::string>{
                "llama4 tower: head_dim 88 (16 heads), theta 1e4, interleaved pairs; pairs 0-21 "
                "column, 22-43 row",
                "both halves at 1e4^(-2j / 44), j < 22; positions are column + 1 and row + 1, "
                "the class token's 0",
                "patches of 14 px, images of 336 px: 24 x 24 patches and a class token"}));
  const ModelPositions mistral =
      LoadModelPositions(ConfigPath("real/mistral3-mistral-small-3.1-24b-instruct-2503.json"));
  EXPECT_EQ(VisionRopeSummary(*RopeOf(mistral).vision)[1],
            "row pairs at f_0, f_2, ..., column pairs at f_1, f_3, ..., with f_i = 1e4^(-2i / 64)");
  // The pattern needs two whole rounds; shorter runs are listed.
  MRope uneven;
  uneven.rope = Rope::Default(16, 10000.0);
  uneven.num_streams = 3;
  uneven.pair_stream = {0, 1, 2, 0, 1, 2, 0, 1};
  const std::vector<std::string> names = MropeStreamNames(3);
  EXPECT_EQ(PairStreamSummary(uneven, names), "t h w t h w ... (pairs 0-5), t (6), h (7)");
  uneven.pair_stream = {0, 1, 2, 0, 0, 0, 0, 0};
  EXPECT_EQ(PairStreamSummary(uneven, names), "pairs 0 time, 1 height, 2 width, 3-7 time");
}

}  // namespace
}  // namespace posenc
