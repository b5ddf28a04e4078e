// Context stretching for RoPE: scaling rules that turn a base and a rotary width into inverse
// frequencies and an attention factor. The rotation itself (rope.h) never changes; only its
// frequencies do. Formulas follow Hugging Face transformers' modeling_rope_utils, computed in
// double.
//
//   none    inv_freq[i] = base^(-2i/d)
//   linear  position interpolation (Chen et al. 2023, arXiv:2306.15595): inv_freq[i] / factor,
//           i.e. positions squeezed by `factor` so a longer context maps into the trained range.
//   yarn    (Peng et al. 2023, arXiv:2309.00071): pairs that turn more than beta_fast times over
//           the original context keep their frequency (extrapolated), pairs that turn fewer than
//           beta_slow times are divided by factor (interpolated), pairs in between are blended by
//           a linear ramp; the attention factor 0.1 ln(factor) + 1 sharpens softmax back.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

namespace posenc {

struct NoScaling {};

struct LinearScaling {
  double factor = 1.0;  // finite, >= 1
};

struct YarnScaling {
  double factor = 1.0;                       // finite, >= 1
  int64_t original_max_positions = 0;        // L0, the trained context, > 0
  double beta_fast = 32.0;                   // rotations above which a pair is kept
  double beta_slow = 1.0;                    // rotations below which a pair is interpolated
  bool truncate = true;                      // round the ramp bounds outwards to whole pairs
  std::optional<double> attention_factor;    // overrides 0.1 ln(factor) + 1 when set
};

using RopeScaling = std::variant<NoScaling, LinearScaling, YarnScaling>;

struct RopeFrequencies {
  std::vector<double> inv_freq;   // rotary_dim / 2 entries
  double attention_factor = 1.0;  // multiplies cos and sin
};

// Throws posenc::Error for a bad base, rotary_dim or scaling field.
RopeFrequencies ComputeRopeFrequencies(double base, int64_t rotary_dim,
                                       const RopeScaling& scaling);

}  // namespace posenc
