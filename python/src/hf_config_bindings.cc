// A Rope, and the per-layer description, from a Hugging Face config.json (posenc/hf_config.h,
// posenc/model_positions.h).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>
#include <string>
#include <variant>

#include "bindings.h"
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
                   const std::optional<int64_t>& layer, const std::optional<int64_t>& seq_len,
                   RopePrecision precision) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  Require(rope != nullptr, kFn, "config", "describe a RoPE model", Describe(model.scheme));
  const RopeFrequencyOptions options{precision, seq_len};
  if (layer && layer_type) {
    throw Error(ErrorMessage(kFn, "layer",
                             "be None when layer_type is given (one picks a layer, the other a "
                             "type)",
                             *layer));
  }
  if (layer) return MakeRope(*rope, RopeLayerAt(model, *layer, kFn, "layer"), options);
  if (layer_type) {
    return MakeRope(*rope, RopeLayerOfType(model, *layer_type, kFn, "layer_type"), options);
  }
  std::string names;
  for (const RopeLayerScheme& candidate : rope->layers) {
    names += (names.empty() ? "" : ", ") + candidate.layer_type;
  }
  Require(rope->layers.size() == 1, kFn, "layer_type",
          "name one of the config's layer types (" + names + ")", "None");
  return MakeRope(*rope, rope->layers.front(), options);
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

  m.def(
      "rope_from_hf_config_text",
      [](std::string_view json_text, std::optional<std::string> layer_type,
         std::optional<int64_t> layer, std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromModel(DescribeModel(json_text), layer_type, layer, seq_len, precision);
      },
      py::arg("json_text"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
      py::arg("precision") = RopePrecision::kReference,
      "The Rope of a config.json given as text; see rope_from_hf_config.");
  m.def(
      "rope_from_hf_config_file",
      [](const std::filesystem::path& path, std::optional<std::string> layer_type,
         std::optional<int64_t> layer, std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromModel(LoadModelPositions(path), layer_type, layer, seq_len, precision);
      },
      py::arg("path"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
      py::arg("precision") = RopePrecision::kReference,
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
