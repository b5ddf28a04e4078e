#include "posenc/hf_rope_cache.h"

#include <utility>

namespace posenc {

HfRopeCache::HfRopeCache(double base, int64_t rotary_dim, RopeScaling scaling,
                         RopePrecision precision)
    : base_(base),
      rotary_dim_(rotary_dim),
      scaling_(std::move(scaling)),
      precision_(precision),
      original_(Compute(std::nullopt)),
      current_(original_) {
  if (const auto* dynamic = std::get_if<DynamicNtkScaling>(&scaling_)) {
    cached_length_ = dynamic->max_positions;
  }
}

RopeFrequencies HfRopeCache::Compute(std::optional<int64_t> seq_len) const {
  return ComputeRopeFrequencies(base_, rotary_dim_, scaling_,
                                {.precision = precision_, .seq_len = seq_len, .yarn_rules = {}});
}

const RopeFrequencies& HfRopeCache::Forward(std::span<const int64_t> positions) {
  const int64_t length = SeqLenOf(positions);  // validates
  if (const auto* dynamic = std::get_if<DynamicNtkScaling>(&scaling_)) {
    if (length > cached_length_) {
      current_ = Compute(length);
      cached_length_ = length;
    }
    // Strictly shorter than M: a request of exactly M keeps what a longer one left behind.
    if (length < dynamic->max_positions && cached_length_ > dynamic->max_positions) {
      current_ = original_;
      cached_length_ = dynamic->max_positions;
    }
  } else if (const auto* longrope = std::get_if<LongRopeScaling>(&scaling_)) {
    current_ = length > longrope->original_max_positions
                   ? Compute(longrope->original_max_positions + 1)
                   : original_;
  }
  return current_;
}

}  // namespace posenc
