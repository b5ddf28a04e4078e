// The config reader's entry point: config.json text or file in, ModelPositions out, through the
// steps of hf_config_reader.h.
#include <string>
#include <utility>

#include "hf_config_reader.h"
#include "posenc/error.h"
#include "posenc/files.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"

namespace posenc {

ModelPositions DescribeModel(std::string_view json_text) {
  using hf_json::Json;
  hf_json::CheckShape(json_text);
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    throw Error(ErrorMessage(hf_json::kFn, "config", "be valid JSON", e.what()));
  }
  try {
    hf_json::LanguageModel language = hf_json::SelectLanguageModel(root);
    const hf_json::Node top = language.Top();
    ModelPositions model;
    model.config_prefix = language.prefix;
    model.scheme = hf_json::ReadPositionScheme(top, language.model_type);
    if (auto* rope = std::get_if<RopeScheme>(&model.scheme)) {
      rope->vision = hf_json::ReadVisionRope(root, rope->notes);
    }
    model.notes = std::move(language.notes);
    model.layers = hf_json::ReadLayers(top, language.model_type, model.scheme);
    return model;
  } catch (const Json::exception& e) {
    // Every access is type-checked first; this is a backstop, not a code path.
    throw Error(ErrorMessage(hf_json::kFn, "config", "be readable", e.what()));
  }
}

ModelPositions LoadModelPositions(const std::filesystem::path& path) {
  // Sized by stat before anything is read: a huge or endless file costs no memory.
  const std::string text = ReadFileCapped(hf_json::kFn, path.string(), hf_json::kMaxBytes);
  try {
    return DescribeModel(text);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + path.string() + ")");
  }
}

PositionScheme ParseHfConfig(std::string_view json_text) { return DescribeModel(json_text).scheme; }

PositionScheme LoadHfConfig(const std::filesystem::path& path) {
  return LoadModelPositions(path).scheme;
}

}  // namespace posenc
