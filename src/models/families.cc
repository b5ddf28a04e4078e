// One record per model family (families.h): each field names its source in the family's
// transformers code (or its own remote code where transformers has none), and docs/MODELS.md
// gives the rule for each family with its citation.
#include "families.h"

#include <algorithm>
#include <iterator>

namespace posenc::hf_json {
namespace {

using enum PositionKind;
using enum PartialRotary;
using enum LayerPattern;

constexpr std::string_view kFalconAliases[] = {"RefinedWeb", "RefinedWebModel"};

// Config-class defaults that released configs rely on: Llama excerpts without a layer count,
// Gemma 3's multimodal text_config without its head shape and RoPE bases, Llama 4's text_config.
// Each value is the class's default in transformers 5.23.0.
constexpr ConfigDefault kLlamaDefaults[] = {{"num_hidden_layers", "32"}};
constexpr ConfigDefault kGemma3TextDefaults[] = {{"num_attention_heads", "8"},
                                                 {"num_key_value_heads", "4"},
                                                 {"head_dim", "256"},
                                                 {"num_hidden_layers", "26"},
                                                 {"max_position_embeddings", "131072"},
                                                 {"rope_theta", "1000000.0"},
                                                 {"rope_local_base_freq", "10000.0"},
                                                 {"sliding_window", "4096"}};
constexpr ConfigDefault kLlama4TextDefaults[] = {
    {"num_attention_heads", "40"}, {"num_key_value_heads", "8"}, {"head_dim", "128"},
    {"num_hidden_layers", "48"},   {"rope_theta", "500000"},     {"attention_chunk_size", "8192"}};

// Qwen2Config and the Qwen-VL text models: sliding layers from max_window_layers on.
constexpr Family Qwen(std::string_view model_type, PartialRotary partial_rotary) {
  return {
      .model_type = model_type, .partial_rotary = partial_rotary, .pattern = kFromMaxWindowLayers};
}

// Learned absolute positions (OPT, BERT, GPT-Neo: max_position_embeddings and hidden_size).
constexpr Family Learned(std::string_view model_type, LearnedKeys keys = LearnedKeys::kHidden) {
  return {.model_type = model_type, .position = kLearned, .learned_keys = keys};
}

constexpr Family NoPositions(std::string_view model_type) {
  return {.model_type = model_type, .position = kNoPositions};
}

constexpr Family kFamilies[] = {
    // Llama and the families that share its default rotary embedding (partial_rotary_factor is
    // ignored by rope_type "default": reference §0.1, §10.8).
    {.model_type = "llama",
     .config_class = "LlamaConfig",
     .defaults = kLlamaDefaults,
     .partial_rotary = kIgnoredByDefault},
    {.model_type = "mistral", .partial_rotary = kIgnoredByDefault, .pattern = kAllSlideWithWindow},
    {.model_type = "mixtral", .partial_rotary = kIgnoredByDefault, .pattern = kAllSlideWithWindow},
    Qwen("qwen2", kIgnoredByDefault),
    Qwen("qwen2_moe", kIgnoredByDefault),
    Qwen("qwen3", kIgnoredByDefault),
    Qwen("qwen3_moe", kIgnoredByDefault),
    {.model_type = "gemma", .partial_rotary = kIgnoredByDefault},
    {.model_type = "gemma2",
     .partial_rotary = kIgnoredByDefault,
     .gemma_scores = true,
     .pattern = kEverySecondSlides},
    {.model_type = "gemma3",
     .text_model = "gemma3_text",
     .partial_rotary = kIgnoredByDefault,
     .rope_layers = RopeLayers::kGemma3LocalBase,
     .gemma_scores = true,
     .pattern = kPeriodic,
     .pattern_period = 6},
    {.model_type = "gemma3_text",
     .config_class = "Gemma3TextConfig",
     .defaults = kGemma3TextDefaults,
     .partial_rotary = kIgnoredByDefault,
     .rope_layers = RopeLayers::kGemma3LocalBase,
     .gemma_scores = true,
     .pattern = kPeriodic,
     .pattern_period = 6},
    {.model_type = "deepseek_v2",
     .head_dim = HeadDimKey::kQkRopeHeadDim,
     .pairs = PairLayout::kInterleaved,
     .partial_rotary = kIgnoredByDefault,
     .latent_attention = true},
    {.model_type = "deepseek_v3",
     .head_dim = HeadDimKey::kQkRopeHeadDim,
     .pairs = PairLayout::kInterleavedUnlessRopeInterleaveFalse,
     .partial_rotary = kIgnoredByDefault,
     .latent_attention = true},

    // Families whose own default rotary embedding applies partial_rotary_factor.
    {.model_type = "gpt_neox", .partial_rotary = kApplied, .theta = ThetaKey::kRotaryEmbBase},
    {.model_type = "phi", .partial_rotary = kApplied},
    {.model_type = "phi3",
     .partial_rotary = kApplied,
     .yarn_means_longrope = true,
     .pattern = kAllSlideWithWindow},
    {.model_type = "gptj", .pairs = PairLayout::kInterleaved, .partial_rotary = kRotaryDimKey},
    {.model_type = "stablelm", .partial_rotary = kApplied},
    {.model_type = "persimmon", .partial_rotary = kApplied},
    {.model_type = "glm", .pairs = PairLayout::kInterleaved, .partial_rotary = kApplied},
    {.model_type = "glm4", .pairs = PairLayout::kInterleaved, .partial_rotary = kApplied},
    {.model_type = "glm4_moe", .partial_rotary = kApplied},
    // ERNIE 4.5: rotate_half on x[..., 0::2], x[..., 1::2] with repeat_interleave'd cos and sin
    // (interleaved pairs); its default rotary embedding takes the whole head_dim, ignoring
    // partial_rotary_factor; Ernie4_5Config.default_theta 500000.
    {.model_type = "ernie4_5",
     .pairs = PairLayout::kInterleaved,
     .partial_rotary = kIgnoredByDefault,
     .default_theta = 500000.0},

    // Other RoPE families (a partial_rotary_factor with rope_type "default" is refused).
    {.model_type = "nomic_bert", .encoder = true},
    {.model_type = "gpt_oss", .default_theta = 150000.0},
    {.model_type = "olmo"},
    {.model_type = "olmo2"},
    {.model_type = "olmo3"},
    {.model_type = "starcoder2", .pattern = kAllSlideWithWindow},
    {.model_type = "cohere", .pairs = PairLayout::kInterleaved},
    {.model_type = "cohere2",
     .pairs = PairLayout::kInterleaved,
     .pattern = kPeriodic,
     .pattern_period = 4,
     .nope = NopeLayers::kGlobalWithWindow},
    {.model_type = "falcon",
     .aliases = kFalconAliases,
     .alias_origin = "Falcon's original name (its remote code)",
     .position = kRopeOrAlibi,
     .kv_heads = KeyValueHeadsKey::kFalcon},
    {.model_type = "gemma4", .text_model = "gemma4_text"},
    {.model_type = "gemma4_text"},
    {.model_type = "internlm2"},
    {.model_type = "granite"},
    {.model_type = "llama4",
     .text_model = "llama4_text",
     .pairs = PairLayout::kInterleaved,
     .vision = VisionRopeKind::kLlama4},
    {.model_type = "llama4_text",
     .config_class = "Llama4TextConfig",
     .defaults = kLlama4TextDefaults,
     .pairs = PairLayout::kInterleaved,
     .nope = NopeLayers::kNoRopeLayers,
     .chunked_rope_layers = true},
    {.model_type = "smollm3", .nope = NopeLayers::kNoRopeLayers},
    {.model_type = "exaone4",
     .pattern = kPeriodicWithWindow,
     .pattern_period = 4,
     .nope = NopeLayers::kGlobalWithWindow},
    {.model_type = "chatglm",
     .head_dim = HeadDimKey::kKvChannels,
     .kv_heads = KeyValueHeadsKey::kChatGlm,
     .pairs = PairLayout::kInterleaved,
     .partial_rotary = kHalfHead,
     .theta = ThetaKey::kRopeRatio},
    {.model_type = "modernbert",
     .rope_layers = RopeLayers::kModernBertThetas,
     .pattern = kGlobalEveryN,
     .pattern_period = 3,
     .window = WindowKey::kLocalAttention,
     .encoder = true},
    {.model_type = "mistral3", .text_model = "mistral", .vision = VisionRopeKind::kPixtral},
    {.model_type = "ministral", .pattern = kAllSlideWithWindow},
    {.model_type = "ministral3"},
    {.model_type = "qwen2_vl",
     .pattern = kFromMaxWindowLayers,
     .tower = VisionRopeKind::kQwen2Vl,
     .vision = VisionRopeKind::kQwen2Vl},
    Qwen("qwen2_vl_text", kRefusedByDefault),
    {.model_type = "qwen2_5_vl",
     .pattern = kFromMaxWindowLayers,
     .tower = VisionRopeKind::kQwen25Vl,
     .vision = VisionRopeKind::kQwen25Vl},
    Qwen("qwen2_5_vl_text", kRefusedByDefault),
    {.model_type = "qwen3_vl",
     .text_model = "qwen3_vl_text",
     .tower = VisionRopeKind::kQwen3Vl,
     .vision = VisionRopeKind::kQwen3Vl},
    {.model_type = "qwen3_vl_text"},
    {.model_type = "qwen3_next"},
    {.model_type = "phimoe", .pattern = kAllSlideWithWindow},
    {.model_type = "stablelm_epoch"},

    // ALiBi.
    {.model_type = "bloom", .position = kAlibi},
    {.model_type = "mpt", .position = kMptAlibi},
    {.model_type = "baichuan", .position = kBaichuan},

    // Learned absolute positions.
    Learned("gpt2", LearnedKeys::kGpt2),
    Learned("gpt_bigcode", LearnedKeys::kGpt2),
    Learned("gpt_neo"),
    {.model_type = "bert", .position = kLearned, .absolute_positions_only = true, .encoder = true},
    // OPTLearnedPositionalEmbedding: "OPT is set up so that if padding_idx is specified then
    // offset the embedding ids by 2".
    {.model_type = "opt", .position = kLearned, .learned_offset = 2},

    // T5's relative buckets.
    {.model_type = "t5", .position = kRelativeBias},
    {.model_type = "mt5", .position = kRelativeBias},
    {.model_type = "umt5", .position = kRelativeBias, .bias_in_every_layer = true},

    // State-space models: attention layers, if any, without positions (docs/MODELS.md).
    NoPositions("mamba"),
    NoPositions("mamba2"),
    NoPositions("falcon_mamba"),
    NoPositions("rwkv"),
    {.model_type = "nemotron_h", .position = kNoPositions, .pattern = kHybridOverride},
    {.model_type = "jamba",
     .position = kNoPositions,
     .pattern = kAttentionPeriod,
     .pattern_period = 8,
     .pattern_offset = 4},

    // Vision towers and wrappers that posenc knows only by their tower. Transformers 5 names
    // the Qwen towers' config classes "<model>_vision" (its to_dict() and saved files say so; it
    // renames the 4.x name of a dict it is given).
    {.model_type = "qwen3_vl_moe",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kQwen3Vl,
     .vision = VisionRopeKind::kQwen3Vl},
    {.model_type = "qwen2_vl_vision",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kQwen2Vl},
    {.model_type = "qwen2_5_vl_vision",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kQwen25Vl},
    {.model_type = "qwen3_vl_vision",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kQwen3Vl},
    {.model_type = "qwen3_vl_moe_vision",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kQwen3Vl},
    {.model_type = "pixtral", .position = kRopeIfRopeKeys, .tower = VisionRopeKind::kPixtral},
    {.model_type = "llama4_vision_model",
     .position = kRopeIfRopeKeys,
     .tower = VisionRopeKind::kLlama4},
};

constexpr Family kUnknownFamily{.position = kRopeIfRopeKeys};

}  // namespace

const Family* FindFamily(std::string_view name) {
  for (const Family& family : kFamilies) {
    if (family.model_type == name ||
        std::find(family.aliases.begin(), family.aliases.end(), name) != family.aliases.end()) {
      return &family;
    }
  }
  return nullptr;
}

const Family& FamilyOf(std::string_view model_type) {
  const Family* family = FindFamily(model_type);
  return family != nullptr ? *family : kUnknownFamily;
}

}  // namespace posenc::hf_json
