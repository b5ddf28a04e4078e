// The config reader's steps, each in its own file of src/models/, called in this order by
// DescribeModel (config.cc): the language model, its position scheme, the vision tower,
// the layers.
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

// language_model.cc
LanguageModel SelectLanguageModel(const Json& root);

// The model-level scheme (schemes.cc).
PositionScheme ReadPositionScheme(const Node& top, const std::string& model_type);

// A RoPE model's scheme (rope_params.cc), and a note added to it once.
RopeScheme ReadRope(const Node& top, const std::string& model_type);
void Note(RopeScheme& scheme, std::string note);

// The vision tower's 2-D RoPE from the file's vision_config (root: the whole file), or nullopt
// when there is none or its tower is not one posenc knows (noted); defaults taken are noted
// (vision_config.cc).
std::optional<VisionRopeScheme> ReadVisionRope(const Json& root, std::vector<std::string>& notes);

// One LayerPositions per layer (layers.cc); empty without a layer count.
std::vector<LayerPositions> ReadLayers(const Node& top, const std::string& model_type,
                                       const PositionScheme& scheme);

// The scheme of the layers that the model-level scheme gives (layers.cc).
LayerScheme BaseScheme(const PositionScheme& scheme);

}  // namespace posenc::hf_json
