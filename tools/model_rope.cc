#include "model_rope.h"

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
                      "Layer type of a per-layer config (e.g. full_attention); default: the first");
}

RopeFrequencyOptions ModelRopeOptions::Frequencies() const {
  return {.precision = precision == "exact" ? RopePrecision::kExact : RopePrecision::kReference,
          .seq_len = seq_len};
}

const RopeLayerScheme& ModelRopeOptions::Layer(const RopeScheme& scheme) const {
  if (layer.empty()) return scheme.layers.front();
  if (scheme.layers.size() == 1 && scheme.layers.front().layer_type.empty()) {
    throw Error(ErrorMessage("cli", "--layer",
                             "be left out: this config has one RoPE setting for every layer "
                             "(no layer_types)",
                             layer));
  }
  std::string known;
  for (const RopeLayerScheme& candidate : scheme.layers) {
    if (candidate.layer_type == layer) return candidate;
    known += (known.empty() ? "" : ", ") + candidate.layer_type;
  }
  throw Error(ErrorMessage("cli", "--layer", "be one of the config's layer types (" + known + ")",
                           layer));
}

}  // namespace posenc::cli
