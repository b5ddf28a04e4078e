// What a config's RoPE does to each pair: the report behind `posenc inspect` and the explorer's
// Stretching panel (posenc serve), computed once here for both.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model_rope.h"
#include "posenc/model_positions.h"

namespace posenc::cli {

// How scaling treated a pair, from ratio = original inv_freq / scaled inv_freq.
enum class PairClass { kExtrapolated, kBlended, kInterpolated, kUnrotated };

struct PairRow {
  double inv_freq, original_inv_freq, wavelength, original_wavelength, ratio;
  PairClass treatment;
};

// One layer's RoPE report: the config's description as JSON with the layer's rule, dimensions,
// frequencies and per-pair wavelengths and classes; the rows; the vision tower in words; the
// original context; a title for charts.
struct RopeReport {
  nlohmann::json json;
  std::vector<PairRow> rows;
  std::vector<std::string> vision_lines;  // the vision tower's 2-D RoPE in words, if any
  std::optional<int64_t> original_context;
  std::string title;
};

// The report of the layer `options` picks (model.scheme must hold a RopeScheme).
RopeReport InspectRope(const ModelPositions& model, const ModelRopeOptions& options);

// The name of a pair class ("extrapolated", "blended", "interpolated", "unrotated").
const char* Name(PairClass c);

}  // namespace posenc::cli
