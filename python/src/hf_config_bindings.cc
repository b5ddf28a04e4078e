// A Rope, and the per-layer description, from a Hugging Face config.json (posenc/hf_config.h,
// posenc/model_positions.h).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>
#include <string>
#include <variant>

#include "bindings.h"
#include "config_layer.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/model_report.h"

namespace posenc::python {
namespace {

namespace py = pybind11;

constexpr std::string_view kFn = "hf_config";

// "bloom (ALiBi)": what a config that is not RoPE describes, for the error message.
std::string Describe(const PositionScheme& scheme) {
  struct Kind {
    std::string operator()(const RopeScheme& s) const { return s.model_type + " (RoPE)"; }
    std::string operator()(const AlibiScheme& s) const { return s.model_type + " (ALiBi)"; }
    std::string operator()(const LearnedPositionScheme& s) const {
      return s.model_type + " (learned absolute positions)";
    }
    std::string operator()(const NoPositionScheme& s) const {
      return s.model_type + " (no attention positions)";
    }
    std::string operator()(const RelativeBiasScheme& s) const {
      return s.model_type + " (T5 relative-position buckets)";
    }
  };
  return std::visit(Kind{}, scheme);
}

Rope RopeFromModel(const ModelPositions& model, const std::optional<std::string>& layer_type,
                   const std::optional<int64_t>& layer, const RopeFrequencyOptions& frequencies) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  Require(rope != nullptr, kFn, "config", "describe a RoPE model", Describe(model.scheme));
  return MakeRope(*rope, ChooseRopeLayer(model, layer_type, layer), frequencies);
}

// The description as posenc inspect gives it: its JSON text and the run-length summary lines
// (posenc.model_positions wraps both).
py::tuple Report(const ModelPositions& model) {
  return py::make_tuple(ModelPositionsJson(model), LayerSummary(model));
}

}  // namespace

void BindHfConfig(py::module_& m) {
  py::enum_<RopePrecision>(m, "RopePrecision", R"(REFERENCE: frequencies rounded to float32
exactly as Hugging Face computes them (what the models were trained with). EXACT: double
throughout.)")
      .value("REFERENCE", RopePrecision::kReference)
      .value("EXACT", RopePrecision::kExact);

  DefLayerReaders(m, "rope_from_hf_config", &RopeFromModel,
                  "The Rope of a config.json given as text; see rope_from_hf_config.",
                  "The Rope of a config.json file; see rope_from_hf_config.");
  m.def(
      "model_positions_text",
      [](std::string_view json_text) { return Report(DescribeModel(json_text)); },
      py::arg("json_text"),
      "The per-layer description of a config.json given as text: (JSON text, summary lines); see "
      "posenc.model_positions.");
  m.def(
      "model_positions_file",
      [](const std::filesystem::path& path) { return Report(LoadModelPositions(path)); },
      py::arg("path"),
      "The per-layer description of a config.json file: (JSON text, summary lines); see "
      "posenc.model_positions.");
}

}  // namespace posenc::python
