#include "config_layer.h"

#include "posenc/error.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "hf_config";

}  // namespace

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
