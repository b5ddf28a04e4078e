#include "model_rope.h"

#include <limits>
#include <string>

#include "numbers.h"
#include "posenc/error.h"

namespace posenc::cli {

void ModelRopeOptions::AddTo(CLI::App* command, const std::string& seq_len_help) {
  command->add_option("config", config, "Hugging Face config.json")->required();
  command
      ->add_option("--seq-len", seq_len,
                   "Length L for dynamic and longrope (max position + 1, as Hugging Face's "
                   "forward uses); " +
                       seq_len_help)
      ->transform(DecimalInteger(1));
  AddIntegerList(command, "--positions", positions, "Token positions, e.g. 0,1,4095,131071", 0);
  command
      ->add_option("--precision", precision,
                   "reference: inverse frequencies rounded to float32 exactly as Hugging Face "
                   "computes them (what the models were trained with); exact: double "
                   "throughout")
      ->check(CLI::IsMember({"reference", "exact"}))
      ->capture_default_str();
  command
      ->add_option("--yarn-rules", yarn_rules,
                   "YaRN as a transformers release computes it: transformers5 (4.56.2 and "
                   "later, the paper's), transformers4_50 (4.45-4.50: the correction range "
                   "over max_position_embeddings, no mscale) or transformers4_51 "
                   "(4.51.0-4.56.1: factor = max_position_embeddings / L0); default: the "
                   "release named by the "
                   "config's transformers_version (before 4.51: transformers4_50), else "
                   "transformers5")
      ->check(CLI::IsMember({"transformers5", "transformers4_50", "transformers4_51"}));
  limit.AddTo(command);
  command->add_option(
      "--layer", layer,
      "Layer of a per-layer config: a layer type (e.g. full_attention) or a layer index "
      "(e.g. 3, a RoPE layer); default: the config's first RoPE setting "
      "(docs/MODELS.md, \"Choosing a layer\")");
}

RopeFrequencyOptions ModelRopeOptions::Frequencies() const {
  return {.precision = precision == "exact" ? RopePrecision::kExact : RopePrecision::kReference,
          .seq_len = seq_len,
          .yarn_rules = yarn_rules.empty() ? std::nullopt
                                           : std::optional(ParseYarnRules(
                                                 yarn_rules, error_function, "--yarn-rules"))};
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
  LayerChoice choice;
  if (const std::optional<int64_t> index = LayerIndex()) {
    choice.index = index;
  } else if (!layer.empty()) {
    choice.type = layer;
  }
  return RopeLayer(model, choice, error_function, layer_parameter, layer_parameter);
}

}  // namespace posenc::cli
