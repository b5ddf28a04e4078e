#include "posenc/model_report.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <variant>

namespace posenc {
namespace {

using Json = nlohmann::json;

Json OrNull(int64_t value) { return value > 0 ? Json(value) : Json(nullptr); }
Json OrNull(const std::string& value) { return value.empty() ? Json(nullptr) : Json(value); }

const RopeLayerScheme* RopeLayerOf(const ModelPositions& model, const LayerPositions& layer) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  if (rope == nullptr || layer.scheme != LayerScheme::kRope || layer.rope_layer < 0 ||
      static_cast<size_t>(layer.rope_layer) >= rope->layers.size()) {
    return nullptr;
  }
  return &rope->layers[static_cast<size_t>(layer.rope_layer)];
}

// What one layer does, in words; layers with the same words share a summary line.
std::string Describe(const ModelPositions& model, const LayerPositions& layer) {
  std::string out;
  switch (layer.scheme) {
    case LayerScheme::kRope: {
      out = "RoPE";
      if (const RopeLayerScheme* rope = RopeLayerOf(model, layer)) {
        const std::string_view type = RopeTypeName(rope->scaling);
        if (type != "default") out += " " + std::string(type);
        out += " theta " + ShortNumber(rope->rope_theta);
      }
      break;
    }
    case LayerScheme::kNope: out = "NoPE"; break;
    case LayerScheme::kAlibi: out = "ALiBi"; break;
    case LayerScheme::kRelativeBias: out = "T5 relative bias"; break;
    case LayerScheme::kLearned: out = "no position signal (learned table added at the input)"; break;
    case LayerScheme::kNone: out = "no attention"; break;
  }
  if (layer.scheme != LayerScheme::kNone) {
    if (layer.sliding_window > 0) {
      out += ", window " + std::to_string(layer.sliding_window);
      if (layer.symmetric_window) {
        out += " (both ways: |i - j| <= " + std::to_string(layer.sliding_window / 2) + ")";
      }
    }
    if (layer.attention_chunk_size > 0) {
      out += ", chunks of " + std::to_string(layer.attention_chunk_size);
    }
    if (layer.query_scale) out += ", query scale " + QueryScaleFormula(*layer.query_scale);
    out += layer.causal ? "" : ", bidirectional";
  }
  if (!layer.layer_type.empty()) out += " [" + layer.layer_type + "]";
  return out;
}

// "0-2, 4-6, ..., 44-46": up to four runs in full, more as the first two and the last.
std::string Runs(const std::vector<int64_t>& indices) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < indices.size();) {
    size_t end = i;
    while (end + 1 < indices.size() && indices[end + 1] == indices[end] + 1) ++end;
    runs.push_back(std::to_string(indices[i]) +
                   (end > i ? "-" + std::to_string(indices[end]) : ""));
    i = end + 1;
  }
  std::string out;
  if (runs.size() <= 4) {
    for (const std::string& run : runs) out += (out.empty() ? "" : ", ") + run;
  } else {
    out = runs[0] + ", " + runs[1] + ", ..., " + runs.back();
  }
  return out;
}

// One layer's object of ModelPositionsJson.
Json LayerJson(const ModelPositions& model, const LayerPositions& layer) {
  const RopeLayerScheme* rope = RopeLayerOf(model, layer);
  Json query_scale = nullptr;
  if (layer.query_scale) {
    query_scale = {{"rule", layer.query_scale->rule},
                   {"beta", layer.query_scale->beta},
                   {"floor_scale", layer.query_scale->floor_scale},
                   {"offset", layer.query_scale->offset}};
  }
  return {{"index", layer.index},
          {"scheme", std::string(LayerSchemeName(layer.scheme))},
          {"layer_type", OrNull(layer.layer_type)},
          {"rope_theta", rope ? Json(rope->rope_theta) : Json(nullptr)},
          {"rope_type", rope ? Json(std::string(RopeTypeName(rope->scaling))) : Json(nullptr)},
          {"sliding_window", OrNull(layer.sliding_window)},
          {"attention_chunk_size", OrNull(layer.attention_chunk_size)},
          {"query_scale", query_scale},
          {"causal", layer.causal},
          {"symmetric_window", layer.symmetric_window}};
}

}  // namespace

std::string_view RopeLayoutName(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? "interleaved" : "half-split";
}

std::string ShortNumber(double value) {
  char buffer[64];
  if (std::isfinite(value) && value == std::floor(value) && std::abs(value) >= 1e4 &&
      std::abs(value) < 1e300) {
    for (int digits = 0; digits <= 16; ++digits) {
      std::snprintf(buffer, sizeof buffer, "%.*e", digits, value);
      if (std::strtod(buffer, nullptr) != value) continue;
      std::string text = buffer;  // "1.6e+05"
      const size_t e = text.find('e');
      std::string mantissa = text.substr(0, e);
      int exponent = std::atoi(text.c_str() + e + 1);
      return mantissa + "e" + std::to_string(exponent);
    }
  }
  std::snprintf(buffer, sizeof buffer, "%.10g", value);
  return buffer;
}

std::string QueryScaleFormula(const LogFloorQueryScale& scale) {
  const std::string p = scale.offset == 0 ? "p" : "(p + " + std::to_string(scale.offset) + ")";
  return "1 + " + ShortNumber(scale.beta) + " ln(1 + floor(" + p + " / " +
         ShortNumber(scale.floor_scale) + "))";
}

std::string ModelPositionsJson(const ModelPositions& model) {
  Json out = {{"scheme", std::string(LayerSchemeName(model.MainScheme()))},
              {"config_prefix", model.config_prefix}};
  std::vector<std::string> notes;
  if (const auto* rope = std::get_if<RopeScheme>(&model.scheme)) {
    const RopeLayerScheme& first = rope->layers.front();
    out["model_type"] = rope->model_type;
    out["head_dim"] = first.head_dim;
    out["rotary_dim"] = first.rotary_dim;
    out["rotary_offset"] = first.rotary_offset;
    out["layout"] = std::string(RopeLayoutName(rope->layout));
    out["mrope_section"] =
        rope->mrope_section.empty() ? Json(nullptr) : Json(rope->mrope_section);
    out["mrope_interleaved"] = rope->mrope_interleaved;
    out["num_attention_heads"] = rope->num_attention_heads;
    out["num_key_value_heads"] = rope->num_key_value_heads;
    out["max_position_embeddings"] = rope->max_position_embeddings
                                         ? Json(*rope->max_position_embeddings)
                                         : Json(nullptr);
    out["original_max_position_embeddings"] = rope->original_max_position_embeddings
                                                  ? Json(*rope->original_max_position_embeddings)
                                                  : Json(nullptr);
    out["softmax_scale"] = rope->softmax_scale ? Json(*rope->softmax_scale) : Json(nullptr);
    Json types = Json::array();
    for (const RopeLayerScheme& layer : rope->layers) types.push_back(layer.layer_type);
    out["layer_types"] = types;
    notes = rope->notes;
  } else if (const auto* alibi = std::get_if<AlibiScheme>(&model.scheme)) {
    out["model_type"] = alibi->model_type;
    out["num_heads"] = alibi->num_heads;
    out["max_bias"] = alibi->max_bias;
    notes = alibi->notes;
  } else if (const auto* learned = std::get_if<LearnedPositionScheme>(&model.scheme)) {
    out["model_type"] = learned->model_type;
    out["max_positions"] = learned->max_positions;
    out["dim"] = learned->dim;
    out["offset"] = learned->offset;
  } else if (const auto* t5 = std::get_if<RelativeBiasScheme>(&model.scheme)) {
    out["model_type"] = t5->model_type;
    out["num_heads"] = t5->num_heads;
    out["num_buckets"] = t5->num_buckets;
    out["max_distance"] = t5->max_distance;
    out["bidirectional"] = true;  // the encoder's; the decoder's layers are causal
    out["encoder_layers"] = t5->encoder_layers;
    out["decoder_layers"] = t5->decoder_layers;
    out["bias_in_every_layer"] = t5->bias_in_every_layer;
    notes = t5->notes;
  } else {
    out["model_type"] = std::get<NoPositionScheme>(model.scheme).model_type;
  }
  notes.insert(notes.end(), model.notes.begin(), model.notes.end());
  out["notes"] = notes;
  Json layers = Json::array();
  for (const LayerPositions& layer : model.layers) layers.push_back(LayerJson(model, layer));
  out["layers"] = layers;
  return out.dump();
}

std::vector<std::string> LayerSummary(const ModelPositions& model) {
  if (model.layers.empty()) return {};
  std::vector<std::string> order;
  std::map<std::string, std::vector<int64_t>> groups;
  for (const LayerPositions& layer : model.layers) {
    const std::string description = Describe(model, layer);
    auto [it, added] = groups.try_emplace(description);
    if (added) order.push_back(description);
    it->second.push_back(layer.index);
  }
  if (order.size() == 1) {
    return {"all " + std::to_string(model.layers.size()) + " layers: " + order.front()};
  }
  std::vector<std::string> lines;
  for (const std::string& description : order) {
    const std::vector<int64_t>& indices = groups[description];
    lines.push_back((indices.size() == 1 ? "layer " : "layers ") + Runs(indices) + " (" +
                    std::to_string(indices.size()) + "): " + description);
  }
  return lines;
}

}  // namespace posenc
