// The use of a model's description: a RoPE layer chosen by index or type, and a layer's attention
// options.
#include "posenc/model_positions.h"

#include <algorithm>
#include <string>
#include <utility>

#include "posenc/alibi.h"
#include "posenc/error.h"

namespace posenc {

std::string_view LayerSchemeName(LayerScheme scheme) {
  switch (scheme) {
    case LayerScheme::kRope:
      return "rope";
    case LayerScheme::kNope:
      return "nope";
    case LayerScheme::kAlibi:
      return "alibi";
    case LayerScheme::kRelativeBias:
      return "relative_bias";
    case LayerScheme::kLearned:
      return "learned";
    case LayerScheme::kNone:
      return "none";
  }
  return "none";
}

const RopeLayerScheme& RopeLayer(const ModelPositions& model, const LayerChoice& choice,
                                 std::string_view function, std::string_view index_parameter,
                                 std::string_view type_parameter) {
  if (choice.index && choice.type) {
    throw Error(ErrorMessage(function, index_parameter,
                             "be left out when " + std::string(type_parameter) +
                                 " is given (one picks a layer, the other a type)",
                             *choice.index));
  }
  if (choice.index) return RopeLayerAt(model, *choice.index, function, index_parameter);
  if (choice.type) return RopeLayerOfType(model, *choice.type, function, type_parameter);
  return std::get<RopeScheme>(model.scheme).layers.front();
}

const RopeLayerScheme& RopeLayerAt(const ModelPositions& model, int64_t index,
                                   std::string_view function, std::string_view parameter) {
  const RopeScheme& rope = std::get<RopeScheme>(model.scheme);
  const auto count = static_cast<int64_t>(model.layers.size());
  Require(count > 0, function, parameter,
          "be a layer type: this config gives no layer count (num_hidden_layers), so its layers "
          "have no index",
          index);
  Require(index >= 0 && index < count, function, parameter,
          "be a layer index in [0, " + std::to_string(count) + ") or a layer type", index);
  const LayerPositions& chosen = model.layers[static_cast<size_t>(index)];
  if (chosen.scheme != LayerScheme::kRope || chosen.rope_layer < 0) {
    throw Error(ErrorMessage(function, parameter,
                             "pick a RoPE layer (layer " + std::to_string(index) + " is " +
                                 std::string(LayerSchemeName(chosen.scheme)) +
                                 (chosen.layer_type.empty() ? "" : ", " + chosen.layer_type) +
                                 ": it does not rotate q and k)",
                             index));
  }
  return rope.layers[static_cast<size_t>(chosen.rope_layer)];
}

const RopeLayerScheme& RopeLayerOfType(const ModelPositions& model, std::string_view layer_type,
                                       std::string_view function, std::string_view parameter) {
  const RopeScheme& rope = std::get<RopeScheme>(model.scheme);
  std::vector<std::string> known;  // RoPE layer types, for the message
  const auto add_known = [&known](const std::string& type) {
    if (!type.empty() && std::find(known.begin(), known.end(), type) == known.end()) {
      known.push_back(type);
    }
  };
  for (const RopeLayerScheme& candidate : rope.layers) {
    if (!candidate.layer_type.empty() && candidate.layer_type == layer_type) return candidate;
    add_known(candidate.layer_type);
  }
  // A type of the layers rather than of rope_parameters (Llama 4: chunked_attention).
  bool without_rope = false;
  for (const LayerPositions& candidate : model.layers) {
    if (candidate.scheme == LayerScheme::kRope) add_known(candidate.layer_type);
    if (candidate.layer_type != layer_type) continue;
    if (candidate.scheme == LayerScheme::kRope && candidate.rope_layer >= 0) {
      return rope.layers[static_cast<size_t>(candidate.rope_layer)];
    }
    without_rope = true;
  }
  std::string names;
  for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
  if (without_rope) {
    throw Error(ErrorMessage(function, parameter,
                             "name a type of RoPE layers (the " + std::string(layer_type) +
                                 " layers do not rotate q and k)" +
                                 (names.empty() ? "" : "; RoPE layer types: " + names),
                             layer_type));
  }
  if (names.empty()) {
    throw Error(ErrorMessage(
        function, parameter,
        std::string(model.layers.empty() ? "be left out" : "be left out or be a layer index") +
            ": this config has one RoPE setting for every layer (no "
            "layer_types)",
        layer_type));
  }
  throw Error(ErrorMessage(
      function, parameter,
      "be a layer index or one of the config's RoPE layer types (" + names + ")", layer_type));
}

AttentionOptions LayerAttentionOptions(const ModelPositions& model, int64_t layer,
                                       const RopeFrequencyOptions& frequencies) {
  constexpr const char* kFn = "layer_attention_options";
  const auto count = static_cast<int64_t>(model.layers.size());
  if (layer < 0 || layer >= count) {
    Require(false, kFn, "layer", "be in [0, " + std::to_string(count) + ")", layer);
  }
  const LayerPositions& described = model.layers[static_cast<size_t>(layer)];
  Require(described.scheme != LayerScheme::kNone, kFn, "layer",
          "be an attention layer (layer " + std::to_string(layer) + " is " + described.layer_type +
              ", which has no attention)",
          layer);
  Require(!described.symmetric_window, kFn, "layer",
          "not have a symmetric window (ModernBERT's local layers see |i - j| <= window / 2 both "
          "ways; Attention's window is one-sided)",
          layer);
  AttentionOptions options;
  options.causal = described.causal;
  options.window = described.sliding_window;
  options.chunk_size = described.attention_chunk_size;
  options.query_scale = described.query_scale;
  if (const auto* rope = std::get_if<RopeScheme>(&model.scheme)) {
    if (described.scheme == LayerScheme::kRope) {
      options.rope =
          MakeRope(*rope, rope->layers[static_cast<size_t>(described.rope_layer)], frequencies);
    }
    if (rope->softmax_scale) options.scale = *rope->softmax_scale;
    if (rope->logit_softcap) options.softcap = *rope->logit_softcap;
  } else if (const auto* alibi = std::get_if<AlibiScheme>(&model.scheme)) {
    options.alibi = Alibi{.num_heads = alibi->num_heads, .max_bias = alibi->max_bias};
  } else if (const auto* t5 = std::get_if<RelativeBiasScheme>(&model.scheme)) {
    options.scale = 1.0;  // T5 does not scale its scores
    options.relative_bias = RelativeBias{.buckets = {.num_buckets = t5->num_buckets,
                                                     .max_distance = t5->max_distance,
                                                     .bidirectional = !described.causal},
                                         .num_heads = t5->num_heads,
                                         .table = {}};
  }
  return options;
}

}  // namespace posenc
