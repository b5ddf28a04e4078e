#include "posenc/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "posenc/error.h"
#include "posenc/rope.h"

namespace posenc {
namespace {

constexpr const char* kFunction = "rope_scaling";

void CheckFactor(double factor) {
  Require(std::isfinite(factor) && factor >= 1.0, kFunction, "factor", "be finite and >= 1",
          factor);
}

// Pair index (fractional) whose frequency turns exactly `rotations` times over `length`
// positions: solves length * base^(-2i/d) = 2 pi rotations for i.
double CorrectionDim(double rotations, int64_t rotary_dim, double base, int64_t length) {
  return rotary_dim * std::log(length / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

RopeFrequencies Scale(const NoScaling&, std::vector<double> inv_freq, double, int64_t) {
  return {std::move(inv_freq), 1.0};
}

RopeFrequencies Scale(const LinearScaling& linear, std::vector<double> inv_freq, double,
                      int64_t) {
  CheckFactor(linear.factor);
  for (double& w : inv_freq) w /= linear.factor;
  return {std::move(inv_freq), 1.0};
}

RopeFrequencies Scale(const YarnScaling& yarn, std::vector<double> inv_freq, double base,
                      int64_t rotary_dim) {
  CheckFactor(yarn.factor);
  Require(yarn.original_max_positions > 0, kFunction, "original_max_positions", "be > 0",
          yarn.original_max_positions);
  Require(std::isfinite(yarn.beta_fast) && yarn.beta_fast > 0, kFunction, "beta_fast",
          "be finite and > 0", yarn.beta_fast);
  Require(std::isfinite(yarn.beta_slow) && yarn.beta_slow > 0 && yarn.beta_slow <= yarn.beta_fast,
          kFunction, "beta_slow", "be finite, > 0 and <= beta_fast", yarn.beta_slow);
  if (yarn.attention_factor) {
    Require(std::isfinite(*yarn.attention_factor) && *yarn.attention_factor > 0, kFunction,
            "attention_factor", "be finite and > 0", *yarn.attention_factor);
  }

  double lo = CorrectionDim(yarn.beta_fast, rotary_dim, base, yarn.original_max_positions);
  double hi = CorrectionDim(yarn.beta_slow, rotary_dim, base, yarn.original_max_positions);
  if (yarn.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, static_cast<double>(rotary_dim - 1));
  if (lo == hi) hi += 0.001;  // avoid a zero-width ramp, as the reference does

  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    inv_freq[i] = inv_freq[i] / yarn.factor * ramp + inv_freq[i] * extrapolation;
  }
  const double factor = yarn.attention_factor.value_or(
      yarn.factor <= 1.0 ? 1.0 : 0.1 * std::log(yarn.factor) + 1.0);
  return {std::move(inv_freq), factor};
}

}  // namespace

RopeFrequencies ComputeRopeFrequencies(double base, int64_t rotary_dim,
                                       const RopeScaling& scaling) {
  std::vector<double> inv_freq = DefaultInvFreq(base, rotary_dim);  // validates base, dim
  return std::visit(
      [&](const auto& rule) { return Scale(rule, std::move(inv_freq), base, rotary_dim); },
      scaling);
}

}  // namespace posenc
