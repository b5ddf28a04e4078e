// ModelPositionsJson's account as a JSON value, for the front ends built with posenc (the posenc
// command, the explorer) that add keys of their own to it: they read the value, never the text.
// Not installed: the public headers keep nlohmann out.
#pragma once

#include <nlohmann/json.hpp>

#include "posenc/model_positions.h"

namespace posenc {

// The object whose text ModelPositionsJson returns (posenc/model_report.h has its keys).
nlohmann::json ModelPositionsObject(const ModelPositions& model);

}  // namespace posenc
