#include "model_rope.h"

#include <limits>
#include <string>

#include "numbers.h"
#include "posenc/error.h"

namespace posenc::cli {

void ModelRopeOptions::AddTo(CLI::App* command, const std::string& seq_len_help) {
  command->add_option("config", config, "Hugging Face config.json")->required();
  command->add_option("--seq-len", seq_len,
                      "Length L for dynamic and longrope (max position + 1, as Hugging Face's "
                      "forward uses); " + seq_len_help)
      ->transform(DecimalInteger(1));
  AddIntegerList(command, "--positions", positions, "Token positions, e.g. 0,1,4095,131071", 0);
  command->add_option("--precision", precision,
                      "reference: inverse frequencies rounded to float32 exactly as Hugging Face "
                      "computes them (what the models were trained with); exact: double "
                      "throughout")
      ->check(CLI::IsMember({"reference", "exact"}))
      ->capture_default_str();
  limit.AddTo(command);
  command->add_option("--layer", layer,
                      "Layer of a per-layer config: a layer type (e.g. full_attention) or a layer index "
                      "(e.g. 3, a RoPE layer); default: the first RoPE layer type");
}

RopeFrequencyOptions ModelRopeOptions::Frequencies() const {
  return {.precision = precision == "exact" ? RopePrecision::kExact : RopePrecision::kReference,
          .seq_len = seq_len};
}

std::optional<int64_t> ModelRopeOptions::LayerIndex() const {
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  // More digits than any layer count: an index out of range all the same.
  if (layer.size() > 18) return std::numeric_limits<int64_t>::max();
  return std::stoll(layer);
}

const RopeLayerScheme& ModelRopeOptions::Layer(const ModelPositions& model) const {
  const RopeScheme& scheme = std::get<RopeScheme>(model.scheme);
  if (layer.empty()) return scheme.layers.front();
  const auto count = static_cast<int64_t>(model.layers.size());
  if (const std::optional<int64_t> index = LayerIndex()) {
    if (count == 0) {
      throw Error(ErrorMessage("cli", "--layer",
                               "be a layer type: this config gives no layer count "
                               "(num_hidden_layers), so its layers have no index",
                               layer));
    }
    if (*index >= count) {
      throw Error(ErrorMessage("cli", "--layer",
                               "be a layer index in [0, " + std::to_string(count) +
                                   ") or a layer type",
                               layer));
    }
    const LayerPositions& chosen = model.layers[static_cast<size_t>(*index)];
    if (chosen.scheme != LayerScheme::kRope || chosen.rope_layer < 0) {
      throw Error(ErrorMessage(
          "cli", "--layer",
          "pick a RoPE layer (layer " + layer + " is " +
              std::string(LayerSchemeName(chosen.scheme)) +
              (chosen.layer_type.empty() ? "" : ", " + chosen.layer_type) +
              ": it does not rotate q and k)",
          layer));
    }
    return scheme.layers[static_cast<size_t>(chosen.rope_layer)];
  }
  std::string known;
  const auto add_known = [&known](const std::string& type) {
    if (type.empty() || (", " + known + ", ").find(", " + type + ", ") != std::string::npos) {
      return;
    }
    known += (known.empty() ? "" : ", ") + type;
  };
  for (const RopeLayerScheme& candidate : scheme.layers) {
    if (!candidate.layer_type.empty() && candidate.layer_type == layer) return candidate;
    add_known(candidate.layer_type);
  }
  // A type of the layers rather than of rope_parameters (Llama 4: chunked_attention).
  bool without_rope = false;
  for (const LayerPositions& candidate : model.layers) {
    if (candidate.scheme == LayerScheme::kRope) add_known(candidate.layer_type);
    if (candidate.layer_type != layer) continue;
    if (candidate.scheme == LayerScheme::kRope && candidate.rope_layer >= 0) {
      return scheme.layers[static_cast<size_t>(candidate.rope_layer)];
    }
    without_rope = true;
  }
  if (without_rope) {
    throw Error(ErrorMessage("cli", "--layer",
                             "name a type of RoPE layers (the " + layer +
                                 " layers do not rotate q and k)" +
                                 (known.empty() ? "" : "; RoPE layer types: " + known),
                             layer));
  }
  if (known.empty()) {
    throw Error(ErrorMessage("cli", "--layer",
                             std::string(count > 0 ? "be left out or be a layer index"
                                                   : "be left out") +
                                 ": this config has one RoPE setting for every layer (no "
                                 "layer_types)",
                             layer));
  }
  throw Error(ErrorMessage("cli", "--layer",
                           "be a layer index or one of the config's RoPE layer types (" + known +
                               ")",
                           layer));
}

}  // namespace posenc::cli
