// Numbers on the command line, read one way everywhere: integers are decimal ("010" is ten, not
// eight), must fit the stated range (nothing is clamped), and a number must be all digits (""
// and "12abc" are errors, not 0 and 12). Each is a CLI11 transform that rewrites the text in
// canonical form, so CLI11's own conversion after it cannot read it differently.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace posenc::cli {

// A decimal integer in [min, max] (an optional '-' for negatives; no '+', spaces or base prefix).
CLI::Validator DecimalInteger(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());

// A comma-separated list of decimal integers in [min, max] ("0,1,4095"), appended to `values`.
// Every item is checked: an empty item ("", "1,,2") is an error, not skipped, and no brackets.
CLI::Option* AddIntegerList(CLI::App* command, const std::string& name,
                            std::vector<int64_t>& values, const std::string& description,
                            int64_t min, int64_t max = std::numeric_limits<int64_t>::max());

// A finite decimal number in [min, max] ("1e-3", "8", "0.5"; no hex, no inf or nan).
CLI::Validator FiniteNumber(double min = -std::numeric_limits<double>::max(),
                            double max = std::numeric_limits<double>::max());

}  // namespace posenc::cli
