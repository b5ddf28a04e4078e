// The layer a config reader builds its rotation from (rope_from_hf_config in
// hf_config_bindings.cc, mrope_from_hf_config in mrope_bindings.cc), by RopeLayer's rule
// (posenc/model_positions.h); and the pair of bindings, from a config's text and from its file,
// that take that choice.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "posenc/hf_config.h"
#include "posenc/model_positions.h"

namespace posenc::python {

namespace py = pybind11;

// The layer's RoPE parameters as every front end chooses them (RopeLayer,
// posenc/model_positions.h): by index (`layer`), by type (`layer_type`), or with neither the
// config's first RoPE setting. Throws posenc::Error (as hf_config) when both are given.
inline const RopeLayerScheme& ChooseRopeLayer(const ModelPositions& model,
                                              const std::optional<std::string>& layer_type,
                                              const std::optional<int64_t>& layer) {
  return RopeLayer(model, {.index = layer, .type = layer_type}, "hf_config", "layer", "layer_type");
}

// A rotation built from a described config for a chosen layer:
// from_model(model, layer_type, layer, frequency options).
template <typename Result>
using FromModel = Result (*)(const ModelPositions& model,
                             const std::optional<std::string>& layer_type,
                             const std::optional<int64_t>& layer,
                             const RopeFrequencyOptions& frequencies);

// The frequency options of a reader call; yarn_rules is None or a YarnRules name
// ("transformers5", "transformers4_50", "transformers4_51"), refused as posenc.Error otherwise.
RopeFrequencyOptions ReaderFrequencies(const std::optional<int64_t>& seq_len,
                                       RopePrecision precision, const py::object& yarn_rules);

// Binds <name>_text(json_text, *, layer_type, layer, seq_len, precision, yarn_rules) and
// <name>_file(path, ...), each calling from_model with the described config;
// posenc/__init__.py's <name> picks one. RopePrecision must be bound already (its value is a
// default).
template <typename Result>
void DefLayerReaders(py::module_& m, const std::string& name, FromModel<Result> from_model,
                     const char* text_doc, const char* file_doc) {
  m.def((name + "_text").c_str(),
        [from_model](std::string_view json_text, const std::optional<std::string>& layer_type,
                     std::optional<int64_t> layer, std::optional<int64_t> seq_len,
                     RopePrecision precision, const py::object& yarn_rules) {
          return from_model(DescribeModel(json_text), layer_type, layer,
                            ReaderFrequencies(seq_len, precision, yarn_rules));
        },
        py::arg("json_text"), py::kw_only(), py::arg("layer_type") = py::none(),
        py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
        py::arg("precision") = RopePrecision::kReference, py::arg("yarn_rules") = py::none(),
        text_doc);
  m.def(
      (name + "_file").c_str(),
      [from_model](const std::filesystem::path& path, const std::optional<std::string>& layer_type,
                   std::optional<int64_t> layer, std::optional<int64_t> seq_len,
                   RopePrecision precision, const py::object& yarn_rules) {
        return from_model(LoadModelPositions(path), layer_type, layer,
                          ReaderFrequencies(seq_len, precision, yarn_rules));
      },
      py::arg("path"), py::kw_only(), py::arg("layer_type") = py::none(),
      py::arg("layer") = py::none(), py::arg("seq_len") = py::none(),
      py::arg("precision") = RopePrecision::kReference, py::arg("yarn_rules") = py::none(),
      file_doc);
}

}  // namespace posenc::python
