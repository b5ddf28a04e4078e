#include "config_layer.h"

#include "posenc/error.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "hf_config";

}  // namespace

const RopeLayerScheme& ChooseRopeLayer(const ModelPositions& model, const RopeScheme& rope,
                                       const std::optional<std::string>& layer_type,
                                       const std::optional<int64_t>& layer) {
  if (layer && layer_type) {
    throw Error(ErrorMessage(kFn, "layer",
                             "be None when layer_type is given (one picks a layer, the other a "
                             "type)",
                             *layer));
  }
  if (layer) return RopeLayerAt(model, *layer, kFn, "layer");
  if (layer_type) return RopeLayerOfType(model, *layer_type, kFn, "layer_type");
  std::string names;
  for (const RopeLayerScheme& candidate : rope.layers) {
    names += (names.empty() ? "" : ", ") + candidate.layer_type;
  }
  Require(rope.layers.size() == 1, kFn, "layer_type",
          "name one of the config's layer types (" + names + ")", "None");
  return rope.layers.front();
}

RopeFrequencyOptions ReaderFrequencies(const std::optional<int64_t>& seq_len,
                                       RopePrecision precision, const py::object& yarn_rules) {
  std::optional<YarnRules> rules;
  if (!yarn_rules.is_none()) {
    Require(py::isinstance<py::str>(yarn_rules), kFn, "yarn_rules",
            "be None or a name: transformers5, transformers4_50 or transformers4_51",
            std::string(py::str(py::type::of(yarn_rules).attr("__name__"))));
    rules = ParseYarnRules(yarn_rules.cast<std::string>(), kFn, "yarn_rules");
  }
  return {.precision = precision, .seq_len = seq_len, .yarn_rules = rules};
}

}  // namespace posenc::python
