// Position-dependent query scales, by which some models multiply q before attention:
//
//   scale(p) = 1 + beta * ln(1 + floor((p + offset) / floor_scale))
//
//   Llama 4, NoPE layers with attn_temperature_tuning: beta = attn_scale (0.1), floor_scale =
//     floor_scale (8192), offset = 1 (Llama4TextAttention: log(floor((pos + 1) / floor_scale) + 1)
//     * attn_scale + 1);
//   Ministral 3 / Mistral 3 (llama_4_scaling_beta), every layer: beta = llama_4_scaling_beta,
//     floor_scale = original_max_position_embeddings, offset = 0.
// Scores of a query at position p gain the factor scale(p): 1 up to floor_scale - offset - 1,
// then growing as ln p, which keeps attention from flattening over long contexts.
#pragma once

#include <cstdint>
#include <string>

namespace posenc {

struct LogFloorQueryScale {
  std::string rule;   // what set it, for reports: "llama4_attn_temperature", "llama_4_scaling"
  double beta = 0.0;  // finite, >= 0
  double floor_scale = 1.0;  // finite, >= 1
  int64_t offset = 0;        // 0 or 1

  // Throws posenc::Error naming the field, value and rule.
  void Validate() const;
  // scale(position) in double; position in [0, kMaxPosition] (posenc/positions.h).
  double At(int64_t position) const;
};

}  // namespace posenc
