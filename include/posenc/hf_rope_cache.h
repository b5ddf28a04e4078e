// Hugging Face's rotary-module state for the length-dependent rules, reproduced for parity.
//
// ComputeRopeFrequencies (rope_scaling.h) is a pure function of the length. Hugging Face's rotary
// module is not: its `dynamic_rope_update` wrapper keeps a cached length and frequencies between
// forwards (reference/rope-scaling.md §3, §5). To reproduce a Hugging Face serving loop exactly,
// call Forward() once per forward pass with that pass's position ids:
//
//   dynamic   L = max(position_ids) + 1. The cache starts at M with the construction-time
//             (default) frequencies. If L > cached length: recompute at L and cache L (growth).
//             If L < M strictly and cached length > M: restore the originals and cache M (reset).
//             So a pass of exactly M positions after a longer one keeps the scaled frequencies,
//             and keys already in a KV cache keep the rotation they were given.
//   longrope  L > L0: the long factors; otherwise the short (construction-time) ones. The
//             attention factor never changes.
//   others    static: Forward() always returns the construction-time frequencies.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "posenc/rope_scaling.h"

namespace posenc {

class HfRopeCache {
 public:
  // Validates like ComputeRopeFrequencies and computes the construction-time frequencies.
  HfRopeCache(double base, int64_t rotary_dim, RopeScaling scaling,
              RopePrecision precision = RopePrecision::kReference);

  // The frequencies Hugging Face uses for a forward with these positions (non-empty, >= 0).
  const RopeFrequencies& Forward(std::span<const int64_t> positions);

  const RopeFrequencies& current() const { return current_; }
  int64_t cached_length() const { return cached_length_; }  // dynamic only; 0 otherwise

 private:
  RopeFrequencies Compute(std::optional<int64_t> seq_len) const;

  double base_;
  int64_t rotary_dim_;
  RopeScaling scaling_;
  RopePrecision precision_;
  RopeFrequencies original_;
  RopeFrequencies current_;
  int64_t cached_length_ = 0;
};

}  // namespace posenc
