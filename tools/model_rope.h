// Options shared by the commands that read a Hugging Face config.json (inspect, rope): the file,
// which layer type, and which precision; each flag is declared once, here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "output_limit.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"

namespace posenc::cli {

struct ModelRopeOptions {
  std::string config;
  std::string layer;  // a layer type or a layer index; "" = the first RoPE type
  std::string precision = "reference";
  std::optional<int64_t> seq_len;
  std::string yarn_rules;  // a YarnRules name; "" = the release that wrote the config
  std::vector<int64_t> positions;
  OutputLimit limit;
  // How errors about the layer name their source: the CLI's flag by default; another front end
  // names its own control (posenc serve: "[serve] layer ...").
  std::string error_function = "cli";
  std::string layer_parameter = "--layer";

  // seq_len_help says what an absent --seq-len means for this command.
  void AddTo(CLI::App* command, const std::string& seq_len_help);
  RopeFrequencyOptions Frequencies() const;
  // The chosen layer of a RoPE model (model.scheme holds a RopeScheme): --layer names a layer
  // type (of rope_parameters, or of the layers, e.g. Llama 4's chunked_attention) or gives a
  // layer index. Throws posenc::Error for an unknown type, an index out of range and a layer
  // that does not rotate (NoPE, Mamba).
  const RopeLayerScheme& Layer(const ModelPositions& model) const;
  // The layer index --layer gives, if it gives one.
  std::optional<int64_t> LayerIndex() const;
};

}  // namespace posenc::cli
