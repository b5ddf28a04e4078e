// Model families by config.json model_type: one record per family (families.cc) holds what the
// config readers of src/models/ need to know of it, so that they look it up instead of testing
// names. Adding a family: one record, one test config, one line in docs/MODELS.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "posenc/hf_config.h"

namespace posenc::hf_json {

// The model-level position scheme a family is read as (schemes.cc).
enum class PositionKind {
  kRopeIfRopeKeys,  // not a family posenc names: RoPE when the config has RoPE keys
  kRope,
  kRopeOrAlibi,   // Falcon: RoPE, or ALiBi when "alibi" is true
  kBaichuan,      // RoPE for the 7B models, ALiBi for the 13B ones (their remote code)
  kAlibi,         // BLOOM: ALiBi over n_head (num_attention_heads)
  kMptAlibi,      // MPT: ALiBi from attn_config
  kLearned,       // learned absolute positions
  kRelativeBias,  // T5's relative buckets
  kNoPositions,   // state-space models: attention layers, if any, without positions
};

// Learned absolute positions: which keys give the table's length and width.
enum class LearnedKeys {
  kHidden,  // max_position_embeddings, hidden_size (OPT, BERT, GPT-Neo)
  kGpt2,    // n_positions, n_embd (GPT-2, GPTBigCode)
};

// Where the rotated head width comes from.
enum class HeadDimKey {
  kHeadDim,        // head_dim, else hidden_size // num_attention_heads
  kQkRopeHeadDim,  // DeepSeek: qk_rope_head_dim when present (the rotary part of each head)
  kKvChannels,     // ChatGLM: kv_channels
};

// Grouped-query heads under each family's name for them.
enum class KeyValueHeadsKey {
  kNumKeyValueHeads,  // num_key_value_heads, else every head has its own
  kChatGlm,           // multi_query_attention with multi_query_group_num
  kFalcon,            // new_decoder_architecture with num_kv_heads / n_head_kv, or multi_query
};

// Which features pair up for a rotation.
enum class PairLayout {
  kHalfSplit,                             // (i, i + d/2): the rotate_half of Llama
  kInterleaved,                           // (2i, 2i + 1)
  kInterleavedUnlessRopeInterleaveFalse,  // DeepSeek V3's rope_interleave (default true)
};

// What partial_rotary_factor means with rope_type "default".
enum class PartialRotary {
  kRefusedByDefault,  // a factor != 1 with the default rope type is an error (ambiguous)
  kIgnoredByDefault,  // the Llama-family default rotary embedding ignores it
  kApplied,           // the family's own default applies it
  kRotaryDimKey,      // GPT-J: rotary_dim, else the whole head
  kHalfHead,          // ChatGLM: the first half of each head
};

// Where rope_theta comes from, besides rope_parameters / rope_theta.
enum class ThetaKey {
  kRopeTheta,      // rope_theta, else default_theta
  kRopeRatio,      // ChatGLM: 10000 x rope_ratio
  kRotaryEmbBase,  // GPT-NeoX: rope_theta, else rotary_emb_base (its rotary_pct is read too)
};

// RoPE settings by layer type besides a per-layer-type rope_parameters.
enum class RopeLayers {
  kOneSetting,
  kGemma3LocalBase,   // sliding layers at rope_local_base_freq, full layers at rope_theta
  kModernBertThetas,  // global_rope_theta and local_rope_theta
};

// Layer types when the config has no layer_types: the family's pattern.
enum class LayerPattern {
  kNone,                 // every layer full_attention
  kEverySecondSlides,    // Gemma 2: layers 0, 2, 4, ... slide
  kPeriodic,             // sliding unless (i + 1) % sliding_window_pattern == 0 (or "LLLG")
  kPeriodicWithWindow,   // kPeriodic when sliding_window is set (EXAONE 4)
  kGlobalEveryN,         // ModernBERT: global every global_attn_every_n_layers-th layer
  kFromMaxWindowLayers,  // Qwen2: with use_sliding_window, layers from max_window_layers slide
  kAllSlideWithWindow,   // every layer slides when sliding_window is set (Mistral, Phi-3)
  kHybridOverride,       // Nemotron-H's hybrid_override_pattern (M, *, -, E)
  kAttentionPeriod,      // Jamba: attention where i % attn_layer_period == attn_layer_offset
};

// Layers that do not rotate although the model is RoPE.
enum class NopeLayers {
  kNone,
  kNoRopeLayers,      // SmolLM3, Llama 4: no_rope_layers (1 = RoPE), or every interval-th
  kGlobalWithWindow,  // Cohere 2, hybrid EXAONE 4: full layers are NoPE when sliding_window is set
};

// The key that gives sliding layers their window.
enum class WindowKey {
  kSlidingWindow,
  kLocalAttention,  // ModernBERT (default 128)
};

// A key that the family's transformers config class fills in when the file leaves it out.
struct ConfigDefault {
  std::string_view key, value_json;
};

struct Family {
  std::string_view model_type = {};
  std::span<const std::string_view> aliases = {};  // other model_type spellings, read as this one
  std::string_view alias_origin = {};              // what the aliases are, for the note
  std::string_view text_model = {};  // a wrapper's text model, for a text_config without model_type
  std::string_view config_class = {};            // transformers' config class, for notes
  std::span<const ConfigDefault> defaults = {};  // its defaults that released configs rely on

  PositionKind position = PositionKind::kRope;
  LearnedKeys learned_keys = LearnedKeys::kHidden;
  int64_t learned_offset = 0;            // OPT: 2
  bool absolute_positions_only = false;  // BERT: position_embedding_type must be "absolute"
  bool bias_in_every_layer = false;      // UMT5: each layer its own relative bias

  HeadDimKey head_dim = HeadDimKey::kHeadDim;
  KeyValueHeadsKey kv_heads = KeyValueHeadsKey::kNumKeyValueHeads;
  PairLayout pairs = PairLayout::kHalfSplit;
  PartialRotary partial_rotary = PartialRotary::kRefusedByDefault;
  ThetaKey theta = ThetaKey::kRopeTheta;
  double default_theta = 10000.0;    // the config class's rope_theta
  bool yarn_means_longrope = false;  // Phi-3's legacy rope_scaling type "yarn"
  RopeLayers rope_layers = RopeLayers::kOneSetting;
  bool latent_attention = false;  // DeepSeek's MLA: unrotated qk_nope_head_dim features first
  bool gemma_scores = false;      // query_pre_attn_scalar and attn_logit_softcapping

  LayerPattern pattern = LayerPattern::kNone;
  int64_t pattern_period = 0;  // the pattern's default period (kPeriodic*, kGlobalEveryN, Jamba)
  int64_t pattern_offset = 0;  // Jamba's default attn_layer_offset
  NopeLayers nope = NopeLayers::kNone;
  WindowKey window = WindowKey::kSlidingWindow;
  bool encoder = false;              // keys on both sides of each query
  bool chunked_rope_layers = false;  // Llama 4: RoPE layers in chunks, NoPE ones with temperature

  std::optional<VisionRopeKind> tower = {};   // this model_type names a vision_config's tower
  std::optional<VisionRopeKind> vision = {};  // a wrapper's tower when vision_config has none
};

// The family that `name` names (its model_type or one of its aliases), or nullptr.
const Family* FindFamily(std::string_view name);

// FindFamily's, or for a name posenc does not know a family of position kRopeIfRopeKeys whose
// every other rule is the default.
const Family& FamilyOf(std::string_view model_type);

}  // namespace posenc::hf_json
