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

}  // namespace posenc::python
