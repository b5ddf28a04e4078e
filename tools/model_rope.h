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

namespace posenc::cli {

struct ModelRopeOptions {
  std::string config;
  std::string layer;                  // layer type of a per-layer config; "" = the first
  std::string precision = "reference";
  std::optional<int64_t> seq_len;
  std::vector<int64_t> positions;
  OutputLimit limit;

  // seq_len_help says what an absent --seq-len means for this command.
  void AddTo(CLI::App* command, const std::string& seq_len_help);
  RopeFrequencyOptions Frequencies() const;
  // The chosen layer of a RoPE scheme; throws posenc::Error for an unknown layer type.
  const RopeLayerScheme& Layer(const RopeScheme& scheme) const;
};

}  // namespace posenc::cli
