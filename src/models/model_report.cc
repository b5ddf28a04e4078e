#include "posenc/model_report.h"

#include "model_report_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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
    case LayerScheme::kNope:
      out = "NoPE";
      break;
    case LayerScheme::kAlibi:
      out = "ALiBi";
      break;
    case LayerScheme::kRelativeBias:
      out = "T5 relative bias";
      break;
    case LayerScheme::kLearned:
      out = "no position signal (learned table added at the input)";
      break;
    case LayerScheme::kNone:
      out = "no attention";
      break;
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

// Consecutive pairs turned by one stream, from pair `from` on.
struct StreamRun {
  int64_t stream, first, last;
};
std::vector<StreamRun> StreamRuns(const std::vector<int64_t>& pair_stream, int64_t from) {
  std::vector<StreamRun> runs;
  for (int64_t i = from; i < static_cast<int64_t>(pair_stream.size()); ++i) {
    if (!runs.empty() && runs.back().stream == pair_stream[i]) {
      runs.back().last = i;
    } else {
      runs.push_back({pair_stream[i], i, i});
    }
  }
  return runs;
}

std::string PairRange(int64_t first, int64_t last) {
  return std::to_string(first) + (last > first ? "-" + std::to_string(last) : "");
}

std::string SectionList(const std::vector<int64_t>& sections) {
  std::string out = "[";
  for (size_t i = 0; i < sections.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(sections[i]);
  }
  return out + "]";
}

Json MropeJson(const RopeScheme& scheme) {
  if (scheme.mrope_section.empty()) return nullptr;
  const MRope mrope = MakeMRope(scheme, scheme.layers.front());
  return {{"sections", scheme.mrope_section},
          {"layout", scheme.mrope_interleaved ? "interleaved" : "blocks"},
          {"streams", MropeStreamNames(mrope.num_streams)},
          {"pair_stream", mrope.pair_stream},
          {"pairs", MropeSummary(scheme)}};
}

Json VisionJson(const std::optional<VisionRopeScheme>& vision) {
  if (!vision) return nullptr;
  const MRope mrope = MakeVisionRope(*vision);
  const bool qwen =
      vision->kind != VisionRopeKind::kPixtral && vision->kind != VisionRopeKind::kLlama4;
  const bool windows = vision->kind == VisionRopeKind::kQwen25Vl;
  const std::vector<std::string> streams = VisionStreamNames(vision->kind);
  return {{"kind", std::string(VisionRopeKindName(vision->kind))},
          {"model_type", OrNull(vision->model_type)},
          {"head_dim", vision->head_dim},
          {"num_heads", vision->num_heads},
          {"theta", vision->theta},
          {"layout", std::string(RopeLayoutName(mrope.rope.layout))},
          {"patch_size", vision->patch_size},
          {"spatial_merge_size", qwen ? Json(vision->spatial_merge_size) : Json(nullptr)},
          {"temporal_patch_size", qwen ? Json(vision->temporal_patch_size) : Json(nullptr)},
          {"image_size", OrNull(vision->image_size)},
          {"patches_per_side", OrNull(vision->PatchesPerSide())},
          {"window_size", OrNull(vision->window_size)},
          {"window_units", OrNull(vision->WindowUnits())},
          {"fullatt_block_indexes", windows ? Json(vision->fullatt_block_indexes) : Json(nullptr)},
          {"tokens_per_second", windows ? Json(vision->tokens_per_second) : Json(nullptr)},
          {"streams", streams},
          {"pair_stream", mrope.pair_stream},
          {"inv_freq", mrope.rope.inv_freq},
          {"pairs", PairStreamSummary(mrope, streams)}};
}

}  // namespace

std::string PairStreamSummary(const MRope& mrope, std::span<const std::string> stream_names) {
  const std::vector<int64_t>& pair_stream = mrope.pair_stream;
  const int64_t n = mrope.num_streams;
  auto name = [&](int64_t s) {
    return s < static_cast<int64_t>(stream_names.size()) ? stream_names[s]
                                                         : "stream " + std::to_string(s);
  };
  auto letter = [&](int64_t s) {
    const std::string full = name(s);
    return full.empty() ? std::string("?") : full.substr(0, 1);
  };
  // The streams taking turns from pair 0, in whole rounds.
  int64_t turns = 0;
  if (n >= 2) {
    while (turns < static_cast<int64_t>(pair_stream.size()) && pair_stream[turns] == turns % n) {
      ++turns;
    }
    turns -= turns % n;
    if (turns < 2 * n) turns = 0;
  }
  std::string out;
  if (turns > 0) {
    for (int round = 0; round < 2; ++round) {
      for (int64_t s = 0; s < n; ++s) out += letter(s) + " ";
    }
    out += "... (pairs " + PairRange(0, turns - 1) + ")";
    for (const StreamRun& run : StreamRuns(pair_stream, turns)) {
      out += ", " + letter(run.stream) + " (" + PairRange(run.first, run.last) + ")";
    }
    return out;
  }
  for (const StreamRun& run : StreamRuns(pair_stream, 0)) {
    out +=
        (out.empty() ? "pairs " : ", ") + PairRange(run.first, run.last) + " " + name(run.stream);
  }
  return out;
}

std::vector<std::string> MropeStreamNames(int64_t num_streams) {
  std::vector<std::string> names = {"time", "height", "width"};
  for (int64_t s = 3; s < num_streams; ++s) names.push_back("stream " + std::to_string(s));
  names.resize(static_cast<size_t>(std::max<int64_t>(num_streams, 0)));
  return names;
}

std::vector<std::string> VisionStreamNames(VisionRopeKind kind) {
  if (kind == VisionRopeKind::kLlama4) return {"column", "row"};
  return {"row", "column"};
}

std::string MropeSummary(const RopeScheme& scheme) {
  if (scheme.mrope_section.empty()) return "";
  const MRope mrope = MakeMRope(scheme, scheme.layers.front());
  return "sections " + SectionList(scheme.mrope_section) +
         (scheme.mrope_interleaved ? " interleaved: " : " in blocks: ") +
         PairStreamSummary(mrope, MropeStreamNames(mrope.num_streams));
}

std::vector<std::string> VisionRopeSummary(const VisionRopeScheme& vision) {
  const MRope mrope = MakeVisionRope(vision);
  const std::vector<std::string> streams = VisionStreamNames(vision.kind);
  const int64_t pairs = vision.head_dim / 2;
  const std::string theta = ShortNumber(vision.theta);
  std::vector<std::string> lines;
  lines.push_back(std::string(VisionRopeKindName(vision.kind)) + " tower: head_dim " +
                  std::to_string(vision.head_dim) + " (" + std::to_string(vision.num_heads) +
                  " heads), theta " + theta + ", " +
                  std::string(RopeLayoutName(mrope.rope.layout)) + " pairs; " +
                  PairStreamSummary(mrope, streams));
  const std::string half = std::to_string(pairs / 2);
  switch (vision.kind) {
    case VisionRopeKind::kPixtral:
      lines.push_back("row pairs at f_0, f_2, ..., column pairs at f_1, f_3, ..., with f_i = " +
                      theta + "^(-2i / " + std::to_string(vision.head_dim) + ")");
      lines.push_back("patches of " + std::to_string(vision.patch_size) + " px, images up to " +
                      std::to_string(vision.image_size) +
                      " px: " + std::to_string(vision.PatchesPerSide()) +
                      " patches a side (position id = row x " +
                      std::to_string(vision.PatchesPerSide()) + " + column)");
      break;
    case VisionRopeKind::kLlama4:
      lines.push_back("both halves at " + theta + "^(-2j / " + std::to_string(pairs) + "), j < " +
                      half +
                      "; positions are column + 1 and row + 1, the class "
                      "token's 0");
      lines.push_back("patches of " + std::to_string(vision.patch_size) + " px, images of " +
                      std::to_string(vision.image_size) +
                      " px: " + std::to_string(vision.PatchesPerSide()) + " x " +
                      std::to_string(vision.PatchesPerSide()) + " patches and a class token");
      break;
    default:
      lines.push_back("both halves at " + theta + "^(-2j / " + std::to_string(pairs) + "), j < " +
                      half + " (VisionRotaryEmbedding(head_dim / 2))");
      lines.push_back("patches of " + std::to_string(vision.patch_size) + " px, merged " +
                      std::to_string(vision.spatial_merge_size) + " x " +
                      std::to_string(vision.spatial_merge_size) +
                      " into one language-model token (positions in merge-block order), " +
                      std::to_string(vision.temporal_patch_size) + " frames per temporal patch");
      if (vision.kind == VisionRopeKind::kQwen25Vl) {
        std::string blocks;
        for (const int64_t b : vision.fullatt_block_indexes) {
          blocks += (blocks.empty() ? "" : ", ") + std::to_string(b);
        }
        lines.push_back("window attention over " + std::to_string(vision.window_size) +
                        " px = " + std::to_string(vision.WindowUnits()) + " x " +
                        std::to_string(vision.WindowUnits()) +
                        " merged tokens: the tower runs its patches, positions too, in window "
                        "order; full attention in blocks " +
                        (blocks.empty() ? "none" : blocks) + "; video time " +
                        ShortNumber(vision.tokens_per_second) + " positions per second");
      }
      break;
  }
  return lines;
}

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

Json ModelPositionsObject(const ModelPositions& model) {
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
    out["mrope_section"] = rope->mrope_section.empty() ? Json(nullptr) : Json(rope->mrope_section);
    out["mrope_interleaved"] = rope->mrope_interleaved;
    out["mrope"] = MropeJson(*rope);
    out["vision_rope"] = VisionJson(rope->vision);
    out["num_attention_heads"] = rope->num_attention_heads;
    out["num_key_value_heads"] = rope->num_key_value_heads;
    out["max_position_embeddings"] =
        rope->max_position_embeddings ? Json(*rope->max_position_embeddings) : Json(nullptr);
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
  return out;
}

std::string ModelPositionsJson(const ModelPositions& model) {
  return ModelPositionsObject(model).dump();
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
