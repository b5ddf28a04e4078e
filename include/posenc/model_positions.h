// A model's positions layer by layer, from its Hugging Face config.json.
//
// Models no longer use one position rule throughout. Gemma 2/3, gpt-oss, Cohere 2 and EXAONE 4
// alternate sliding-window and full layers (with their own RoPE bases), Llama 4 and SmolLM3 drop
// RoPE from every fourth layer (NoPE), Llama 4 also chunks the attention of its RoPE layers and
// scales the queries of its NoPE layers, hybrid models (Nemotron-H, Jamba) mix attention with
// Mamba layers, and T5 adds learned relative-position buckets. DescribeModel reads all of it:
//
//   ModelPositions model = LoadModelPositions("config.json");
//   for (const LayerPositions& layer : model.layers) {
//     AttentionOptions options = LayerAttentionOptions(model, layer.index);  // rope, window, ...
//   }
//
// How each family is decided (layout, head split, NoPE layers, window pattern, query scale), with
// the line of the reference code it follows, is in docs/MODELS.md. A config whose family posenc
// cannot place is an error naming the key it would need; nothing is guessed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/attention.h"
#include "posenc/hf_config.h"
#include "posenc/query_scale.h"
#include "posenc/rope_scaling.h"

namespace posenc {

// What a layer does with positions.
enum class LayerScheme {
  kRope,          // q and k rotated (RopeScheme::layers[rope_layer])
  kNope,          // attention with no position signal at all (Llama 4 / SmolLM3 NoPE layers,
                  // the attention layers of Nemotron-H and Jamba)
  kAlibi,         // linear biases on the scores (AlibiScheme)
  kRelativeBias,  // T5's learned bucketed bias on the scores (RelativeBiasScheme)
  kLearned,       // attention without positions; a learned table was added at the input
  kNone,          // no attention (Mamba, MLP-only layers of hybrid models)
};

// "rope", "nope", "alibi", "relative_bias", "learned", "none".
std::string_view LayerSchemeName(LayerScheme scheme);

struct LayerPositions {
  int64_t index = 0;
  LayerScheme scheme = LayerScheme::kRope;
  std::string layer_type;            // the config's name ("sliding_attention", "mamba", ...) or ""
  int rope_layer = -1;               // kRope: index into RopeScheme::layers; else -1
  int64_t sliding_window = 0;        // > 0: keys within this many positions (attention.h's rule)
  bool symmetric_window = false;     // ModernBERT: |i - j| <= sliding_window / 2 both ways
  int64_t attention_chunk_size = 0;  // > 0: keys in the query's chunk only (Llama 4)
  bool causal = true;                // false for encoders (BERT, ModernBERT, T5's encoder)
  std::optional<LogFloorQueryScale> query_scale;  // position-dependent query scale
};

struct ModelPositions {
  PositionScheme scheme;      // the model-level scheme and its parameters (posenc/hf_config.h)
  std::string config_prefix;  // where the language model's keys were read: "" or "text_config."
  std::vector<LayerPositions> layers;  // one per layer; empty when the config has no layer count
  std::vector<std::string> notes;      // per-layer defaults taken, as in RopeScheme::notes

  // The model's main scheme: kRope when any layer rotates (a model with some NoPE layers is a
  // RoPE model), else the scheme of the model-level description.
  LayerScheme MainScheme() const;
};

// Parses config.json text. Throws posenc::Error naming the key (with its path, e.g.
// "text_config.no_rope_layers") for malformed, missing or inconsistent values; never anything
// else. ParseHfConfig(text) is DescribeModel(text).scheme.
ModelPositions DescribeModel(std::string_view json_text);

// Reads and parses a file, with LoadHfConfig's limits.
ModelPositions LoadModelPositions(const std::filesystem::path& path);

// Which layer's RoPE parameters a front end wants: a layer index, a layer type, or neither.
struct LayerChoice {
  std::optional<int64_t> index;     // a layer index (RopeLayerAt)
  std::optional<std::string> type;  // a layer type (RopeLayerOfType)
};

// The one rule by which every front end picks a layer's RoPE parameters (posenc inspect and rope
// --layer, the explorer's layer, Python's layer and layer_type): an index picks that layer, a
// type that type, and neither the config's first RoPE setting. That is its only one unless the
// config sets RoPE by layer type; then it is the first in rope_parameters' key order (its keys
// sorted: full_attention before sliding_attention), or the full layers' rope_theta of Gemma 3's
// configs with rope_local_base_freq and of ModernBERT. Throws posenc::Error naming `function` and
// `index_parameter` when both are given, and RopeLayerAt's and RopeLayerOfType's errors (naming
// `index_parameter` or `type_parameter`). The model's scheme must be RoPE.
const RopeLayerScheme& RopeLayer(const ModelPositions& model, const LayerChoice& choice,
                                 std::string_view function, std::string_view index_parameter,
                                 std::string_view type_parameter);

// RopeLayer's two ways to choose: by index, or by layer type (a key of rope_parameters such as
// "sliding_attention", or a type of the layers such as Llama 4's "chunked_attention"). Throws
// posenc::Error naming `function` and `parameter` when the config gives no layer count, the
// index is out of range, the layer does not rotate q and k, or no RoPE layer has the type.
const RopeLayerScheme& RopeLayerAt(const ModelPositions& model, int64_t index,
                                   std::string_view function, std::string_view parameter);
const RopeLayerScheme& RopeLayerOfType(const ModelPositions& model, std::string_view layer_type,
                                       std::string_view function, std::string_view parameter);

// The attention options that run layer `layer` as the model does: causal, RoPE (for kRope
// layers, with frequency options), ALiBi slopes, sliding window, chunk size, query scale and
// logit soft-capping (Gemma 2's attn_logit_softcapping). A
// kRelativeBias layer gets relative_bias with its buckets and heads but no table: the table is
// a trained weight, so the caller sets relative_bias->table. The score scale stays 0 (1 /
// sqrt(head_dim)) except where the config fixes it (DeepSeek's YaRN multiplier; T5: 1).
// Throws posenc::Error for a layer index out of range, a kNone layer (no attention) or a
// symmetric window (ModernBERT's, which Attention's one-sided window cannot express).
AttentionOptions LayerAttentionOptions(const ModelPositions& model, int64_t layer,
                                       const RopeFrequencyOptions& frequencies = {});

}  // namespace posenc
