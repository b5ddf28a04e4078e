// A Rope, and the per-layer description, from a Hugging Face config.json (posenc/hf_config.h,
// posenc/model_positions.h).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>
#include <string>
#include <variant>

#include "bindings.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"

namespace posenc::python {
namespace {

namespace py = pybind11;

constexpr std::string_view kFn = "hf_config";

// "bloom (ALiBi)": what a config that is not RoPE describes, for the error message.
std::string Describe(const PositionScheme& scheme) {
  struct Kind {
    std::string operator()(const RopeScheme& s) const { return s.model_type + " (RoPE)"; }
    std::string operator()(const AlibiScheme& s) const { return s.model_type + " (ALiBi)"; }
    std::string operator()(const LearnedPositionScheme& s) const {
      return s.model_type + " (learned absolute positions)";
    }
    std::string operator()(const NoPositionScheme& s) const {
      return s.model_type + " (no attention positions)";
    }
    std::string operator()(const RelativeBiasScheme& s) const {
      return s.model_type + " (T5 relative-position buckets)";
    }
  };
  return std::visit(Kind{}, scheme);
}

// The RopeLayerScheme of a layer type: of rope_parameters (Gemma 3's full_attention), else of
// the layers (Llama 4's chunked_attention).
const RopeLayerScheme& ByLayerType(const ModelPositions& model, const RopeScheme& rope,
                                   const std::string& layer_type) {
  std::string names;
  const auto add_name = [&names](const std::string& type) {
    if (type.empty() || (", " + names + ", ").find(", " + type + ", ") != std::string::npos) {
      return;
    }
    names += (names.empty() ? "" : ", ") + type;
  };
  for (const RopeLayerScheme& layer : rope.layers) {
    if (!layer.layer_type.empty() && layer.layer_type == layer_type) return layer;
    add_name(layer.layer_type);
  }
  bool without_rope = false;
  for (const LayerPositions& layer : model.layers) {
    if (layer.scheme == LayerScheme::kRope) add_name(layer.layer_type);
    if (layer.layer_type != layer_type) continue;
    if (layer.scheme == LayerScheme::kRope && layer.rope_layer >= 0) {
      return rope.layers[static_cast<size_t>(layer.rope_layer)];
    }
    without_rope = true;
  }
  Require(!without_rope, kFn, "layer_type",
          "name a type of RoPE layers (the " + layer_type +
              " layers do not rotate q and k; RoPE layer types: " + names + ")",
          layer_type);
  throw Error(ErrorMessage(kFn, "layer_type",
                           "name one of the config's layer types (" + names + ")", layer_type));
}

Rope RopeFromModel(const ModelPositions& model, const std::optional<std::string>& layer_type,
                   const std::optional<int64_t>& layer, const std::optional<int64_t>& seq_len,
                   RopePrecision precision) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  Require(rope != nullptr, kFn, "config", "describe a RoPE model", Describe(model.scheme));
  const RopeFrequencyOptions options{precision, seq_len};
  if (layer && layer_type) {
    throw Error(ErrorMessage(kFn, "layer",
                             "be None when layer_type is given (one picks a layer, the other a "
                             "type)",
                             *layer));
  }
  if (layer) {
    const auto count = static_cast<int64_t>(model.layers.size());
    Require(count > 0, kFn, "layer",
            "be None: this config gives no layer count (num_hidden_layers), so its layers have "
            "no index",
            *layer);
    Require(*layer >= 0 && *layer < count, kFn, "layer",
            "be a layer index in [0, " + std::to_string(count) + ")", *layer);
    const LayerPositions& chosen = model.layers[static_cast<size_t>(*layer)];
    Require(chosen.scheme == LayerScheme::kRope && chosen.rope_layer >= 0, kFn, "layer",
            "pick a RoPE layer (layer " + std::to_string(*layer) + " is " +
                std::string(LayerSchemeName(chosen.scheme)) +
                (chosen.layer_type.empty() ? "" : ", " + chosen.layer_type) +
                ": it does not rotate q and k)",
            *layer);
    return MakeRope(*rope, rope->layers[static_cast<size_t>(chosen.rope_layer)], options);
  }
  if (layer_type) return MakeRope(*rope, ByLayerType(model, *rope, *layer_type), options);
  std::string names;
  for (const RopeLayerScheme& candidate : rope->layers) {
    names += (names.empty() ? "" : ", ") + candidate.layer_type;
  }
  Require(rope->layers.size() == 1, kFn, "layer_type",
          "name one of the config's layer types (" + names + ")", "None");
  return MakeRope(*rope, rope->layers.front(), options);
}

py::object OrNone(int64_t value) { return value > 0 ? py::cast(value) : py::none(); }
py::object OrNone(const std::string& value) {
  return value.empty() ? py::object(py::none()) : py::object(py::str(value));
}

// One layer as a dict: the keys of posenc inspect --json's layers.
py::dict LayerDict(const ModelPositions& model, const LayerPositions& layer) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  const RopeLayerScheme* rope_layer =
      rope != nullptr && layer.scheme == LayerScheme::kRope && layer.rope_layer >= 0
          ? &rope->layers[static_cast<size_t>(layer.rope_layer)]
          : nullptr;
  py::dict out;
  out["index"] = layer.index;
  out["scheme"] = std::string(LayerSchemeName(layer.scheme));
  out["layer_type"] = OrNone(layer.layer_type);
  out["rope_theta"] = rope_layer ? py::cast(rope_layer->rope_theta) : py::none();
  out["rope_type"] =
      rope_layer ? py::cast(std::string(RopeTypeName(rope_layer->scaling))) : py::none();
  out["sliding_window"] = OrNone(layer.sliding_window);
  out["attention_chunk_size"] = OrNone(layer.attention_chunk_size);
  if (layer.query_scale) {
    py::dict scale;
    scale["rule"] = layer.query_scale->rule;
    scale["beta"] = layer.query_scale->beta;
    scale["floor_scale"] = layer.query_scale->floor_scale;
    scale["offset"] = layer.query_scale->offset;
    out["query_scale"] = scale;
  } else {
    out["query_scale"] = py::none();
  }
  out["causal"] = layer.causal;
  out["symmetric_window"] = layer.symmetric_window;
  return out;
}

py::object Optional(const std::optional<int64_t>& value) {
  return value ? py::cast(*value) : py::none();
}

// The whole description as a dict (posenc.model_positions wraps it).
py::dict ModelDict(const ModelPositions& model) {
  py::dict out;
  out["scheme"] = std::string(LayerSchemeName(model.MainScheme()));
  out["config_prefix"] = model.config_prefix;
  std::vector<std::string> notes;
  if (const auto* rope = std::get_if<RopeScheme>(&model.scheme)) {
    const RopeLayerScheme& first = rope->layers.front();
    out["model_type"] = rope->model_type;
    out["head_dim"] = first.head_dim;
    out["rotary_dim"] = first.rotary_dim;
    out["rotary_offset"] = first.rotary_offset;
    out["layout"] = rope->layout == RopeLayout::kInterleaved ? "interleaved" : "half_split";
    out["mrope_section"] =
        rope->mrope_section.empty() ? py::object(py::none()) : py::cast(rope->mrope_section);
    out["mrope_interleaved"] = rope->mrope_interleaved;
    out["num_attention_heads"] = rope->num_attention_heads;
    out["num_key_value_heads"] = rope->num_key_value_heads;
    out["max_position_embeddings"] = Optional(rope->max_position_embeddings);
    out["original_max_position_embeddings"] = Optional(rope->original_max_position_embeddings);
    out["softmax_scale"] = rope->softmax_scale ? py::cast(*rope->softmax_scale) : py::none();
    py::list types;
    for (const RopeLayerScheme& layer : rope->layers) types.append(layer.layer_type);
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
  py::list layers;
  for (const LayerPositions& layer : model.layers) layers.append(LayerDict(model, layer));
  out["layers"] = layers;
  return out;
}

}  // namespace

void BindHfConfig(py::module_& m) {
  py::enum_<RopePrecision>(m, "RopePrecision", R"(REFERENCE: frequencies rounded to float32
exactly as Hugging Face computes them (what the models were trained with). EXACT: double
throughout.)")
      .value("REFERENCE", RopePrecision::kReference)
      .value("EXACT", RopePrecision::kExact);

  m.def(
      "rope_from_hf_config_text",
      [](std::string_view json_text, std::optional<std::string> layer_type,
         std::optional<int64_t> layer, std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromModel(DescribeModel(json_text), layer_type, layer, seq_len, precision);
      },
      py::arg("json_text"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
      py::arg("precision") = RopePrecision::kReference,
      "The Rope of a config.json given as text; see rope_from_hf_config.");
  m.def(
      "rope_from_hf_config_file",
      [](const std::filesystem::path& path, std::optional<std::string> layer_type,
         std::optional<int64_t> layer, std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromModel(LoadModelPositions(path), layer_type, layer, seq_len, precision);
      },
      py::arg("path"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
      py::arg("precision") = RopePrecision::kReference,
      "The Rope of a config.json file; see rope_from_hf_config.");
  m.def(
      "model_positions_text",
      [](std::string_view json_text) { return ModelDict(DescribeModel(json_text)); },
      py::arg("json_text"),
      "The per-layer description of a config.json given as text, as a dict; see "
      "posenc.model_positions.");
  m.def(
      "model_positions_file",
      [](const std::filesystem::path& path) { return ModelDict(LoadModelPositions(path)); },
      py::arg("path"),
      "The per-layer description of a config.json file, as a dict; see "
      "posenc.model_positions.");
}

}  // namespace posenc::python
