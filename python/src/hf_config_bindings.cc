// A Rope from a Hugging Face config.json (posenc/hf_config.h).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>
#include <string>
#include <variant>

#include "bindings.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"

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
  };
  return std::visit(Kind{}, scheme);
}

Rope RopeFromScheme(const PositionScheme& scheme, const std::optional<std::string>& layer_type,
                    const std::optional<int64_t>& seq_len, RopePrecision precision) {
  const auto* rope = std::get_if<RopeScheme>(&scheme);
  Require(rope != nullptr, kFn, "config", "describe a RoPE model", Describe(scheme));
  std::string names;
  const RopeLayerScheme* chosen = nullptr;
  for (const RopeLayerScheme& layer : rope->layers) {
    names += (names.empty() ? "" : ", ") + layer.layer_type;
    if (layer_type ? layer.layer_type == *layer_type : rope->layers.size() == 1) chosen = &layer;
  }
  Require(chosen != nullptr, kFn, "layer_type",
          "name one of the config's layer types (" + names + ")", layer_type.value_or("None"));
  return MakeRope(*rope, *chosen, RopeFrequencyOptions{precision, seq_len});
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
         std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromScheme(ParseHfConfig(json_text), layer_type, seq_len, precision);
      },
      py::arg("json_text"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("seq_len") = py::none(), py::arg("precision") = RopePrecision::kReference,
      "The Rope of a config.json given as text; see rope_from_hf_config.");
  m.def(
      "rope_from_hf_config_file",
      [](const std::filesystem::path& path, std::optional<std::string> layer_type,
         std::optional<int64_t> seq_len, RopePrecision precision) {
        return RopeFromScheme(LoadHfConfig(path), layer_type, seq_len, precision);
      },
      py::arg("path"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("seq_len") = py::none(), py::arg("precision") = RopePrecision::kReference,
      "The Rope of a config.json file; see rope_from_hf_config.");
}

}  // namespace posenc::python
