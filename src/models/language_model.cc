// The language model's part of a config: the top level or a multimodal wrapper's text_config,
// its model_type normalized and the config class's defaults filled in.
#include <string>

#include "families.h"
#include "hf_config_reader.h"
#include "hf_json.h"
#include "posenc/error.h"

namespace posenc::hf_json {

LanguageModel SelectLanguageModel(const Json& root) {
  if (!root.is_object()) Fail("config", "be a JSON object", &root);
  const Node top{root, ""};
  const std::string wrapper_type = OptionalString(top, "model_type").value_or("");
  LanguageModel model;
  const Json* text_config = top.Value("text_config");
  if (text_config != nullptr) {
    if (!text_config->is_object()) Fail("text_config", "be an object", text_config);
    model.config = *text_config;
    model.prefix = "text_config.";
    model.model_type = OptionalString(Node{*text_config, model.prefix}, "model_type").value_or("");
    if (model.model_type.empty()) {
      const std::string_view text_model = FamilyOf(wrapper_type).text_model;
      model.model_type = text_model.empty() ? wrapper_type : std::string(text_model);
      if (model.model_type.empty()) {
        Fail("text_config.model_type", "be present (or the wrapper's model_type)", nullptr);
      }
      model.notes.push_back("text_config.model_type absent: \"" + model.model_type +
                            "\", the text model of \"" + wrapper_type + "\"");
    }
  } else {
    model.config = root;
    model.model_type = wrapper_type;
  }
  const Family& family = FamilyOf(model.model_type);
  if (!family.model_type.empty() && family.model_type != model.model_type) {  // an alias
    model.notes.push_back("model_type \"" + model.model_type + "\" is " +
                          std::string(family.alias_origin) + ": read as " +
                          std::string(family.model_type));
    model.model_type = std::string(family.model_type);
  }
  for (const ConfigDefault& d : family.defaults) {
    const std::string key(d.key);
    if (model.config.contains(key) && !model.config[key].is_null()) continue;
    // A v5 config keeps its bases in rope_parameters; do not add the legacy keys beside it.
    if ((key == "rope_theta" || key == "rope_local_base_freq") &&
        model.config.contains("rope_parameters")) {
      continue;
    }
    model.config[key] = Json::parse(d.value_json);
    model.notes.push_back(model.prefix + key + " absent: " + std::string(d.value_json) + " (" +
                          std::string(family.config_class) + "'s default)");
  }
  return model;
}

}  // namespace posenc::hf_json
