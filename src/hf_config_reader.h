// The config loader's internal steps, shared by hf_config.cc (the model-level scheme) and
// model_positions.cc (the per-layer description).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hf_json.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"

namespace posenc::hf_json {

// The language model's part of a config: the top level, or a multimodal wrapper's text_config,
// with the family's config-class defaults filled in for keys it leaves out (each one noted).
struct LanguageModel {
  Json config;
  std::string prefix;      // "" or "text_config."
  std::string model_type;  // normalized: RefinedWeb -> falcon, a wrapper -> its text model
  std::vector<std::string> notes;

  Node Top() const { return Node{config, prefix}; }
};

LanguageModel SelectLanguageModel(const Json& root);

// The model-level scheme (hf_config.cc).
PositionScheme ReadPositionScheme(const Node& top, const std::string& model_type);

// The vision tower's 2-D RoPE from the file's vision_config (root: the whole file), or nullopt
// when there is none or its tower is not one posenc knows (noted); defaults taken are noted.
std::optional<VisionRopeScheme> ReadVisionRope(const Json& root, std::vector<std::string>& notes);

// One LayerPositions per layer (model_positions.cc); empty without a layer count.
std::vector<LayerPositions> ReadLayers(const Node& top, const std::string& model_type,
                                       const PositionScheme& scheme,
                                       std::vector<std::string>& notes);

}  // namespace posenc::hf_json
