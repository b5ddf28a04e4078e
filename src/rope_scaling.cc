#include "posenc/rope_scaling.h"

#include <sleef.h>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>

#include "float32_range.h"
#include "posenc/error.h"

// sleef.h declares the FMA build of a function only when this file is compiled with FMA enabled
// (FP_FAST_FMA); the library is built without -m flags, so declare the one we call ourselves.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(FP_FAST_FMA)
extern "C" float Sleef_finz_powf1_u10purecfma(float, float);
#endif

namespace posenc {
namespace {

constexpr const char* kFn = "rope_scaling";

// ---------------------------------------------------------------------------------------------
// Validation, one overload per rule, all before any arithmetic.

void CheckFactor(double factor) {
  Require(std::isfinite(factor) && factor >= 1.0, kFn, "factor", "be finite and >= 1", factor);
}

void CheckLength(int64_t length, const char* name) {
  Require(length > 0, kFn, name, "be > 0", length);
}

void CheckOptionalPositive(const std::optional<double>& value, const char* name) {
  if (value) Require(std::isfinite(*value) && *value > 0, kFn, name, "be finite and > 0", *value);
}

void Validate(const NoScaling&, double, int64_t) {}

void Validate(const LinearScaling& rule, double, int64_t) { CheckFactor(rule.factor); }

void Validate(const DynamicNtkScaling& rule, double, int64_t rotary_dim) {
  CheckFactor(rule.factor);
  CheckLength(rule.max_positions, "max_positions");
  // The base exponent is d / (d - 2).
  Require(rotary_dim >= 4, kFn, "rotary_dim", "be >= 4 for dynamic scaling", rotary_dim);
}

void Validate(const YarnScaling& rule, double base, int64_t) {
  CheckFactor(rule.factor);
  CheckLength(rule.original_max_positions, "original_max_positions");
  // The correction range divides by ln(base).
  Require(base > 1.0, kFn, "base", "be > 1 for yarn", base);
  Require(std::isfinite(rule.beta_fast) && rule.beta_fast > 0, kFn, "beta_fast",
          "be finite and > 0", rule.beta_fast);
  Require(std::isfinite(rule.beta_slow) && rule.beta_slow > 0 && rule.beta_slow <= rule.beta_fast,
          kFn, "beta_slow", "be finite, > 0 and <= beta_fast", rule.beta_slow);
  Require(std::isfinite(rule.mscale) && rule.mscale >= 0, kFn, "mscale", "be finite and >= 0",
          rule.mscale);
  Require(std::isfinite(rule.mscale_all_dim) && rule.mscale_all_dim >= 0, kFn, "mscale_all_dim",
          "be finite and >= 0", rule.mscale_all_dim);
  CheckOptionalPositive(rule.attention_factor, "attention_factor");
}

void CheckFactorList(const std::vector<double>& list, const char* name, int64_t rotary_dim) {
  Require(static_cast<int64_t>(list.size()) == rotary_dim / 2, kFn, std::string(name) + ".size()",
          "equal rotary_dim / 2 (" + std::to_string(rotary_dim / 2) + ")", list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    Require(std::isfinite(list[i]) && list[i] > 0, kFn,
            std::string(name) + "[" + std::to_string(i) + "]", "be finite and > 0", list[i]);
  }
}

void Validate(const LongRopeScaling& rule, double, int64_t rotary_dim) {
  CheckFactorList(rule.short_factor, "short_factor", rotary_dim);
  CheckFactorList(rule.long_factor, "long_factor", rotary_dim);
  // ln L0 is a divisor of the default attention factor.
  Require(rule.original_max_positions > 1, kFn, "original_max_positions", "be > 1",
          rule.original_max_positions);
  CheckLength(rule.max_positions, "max_positions");
  CheckOptionalPositive(rule.factor, "factor");
  CheckOptionalPositive(rule.attention_factor, "attention_factor");
}

void Validate(const Llama3Scaling& rule, double, int64_t) {
  CheckFactor(rule.factor);
  CheckLength(rule.original_max_positions, "original_max_positions");
  Require(std::isfinite(rule.low_freq_factor) && rule.low_freq_factor > 0, kFn, "low_freq_factor",
          "be finite and > 0", rule.low_freq_factor);
  // The smoothing weight divides by high - low.
  Require(std::isfinite(rule.high_freq_factor) && rule.high_freq_factor >= rule.low_freq_factor,
          kFn, "high_freq_factor", "be finite and >= low_freq_factor", rule.high_freq_factor);
}

void Validate(const ProportionalScaling& rule, double, int64_t) {
  CheckFactor(rule.factor);
  Require(std::isfinite(rule.partial_rotary_factor) && rule.partial_rotary_factor > 0 &&
              rule.partial_rotary_factor <= 1,
          kFn, "partial_rotary_factor", "be in (0, 1]", rule.partial_rotary_factor);
}

// ---------------------------------------------------------------------------------------------
// Arithmetic. T is float in kReference mode, where every step is rounded to float32 in the order
// the reference's float32 tensor operations round it (a Python scalar meeting a float32 tensor is
// converted to float32 first), and double in kExact mode.

template <typename T>
struct Scaled {
  std::vector<T> inv_freq;
  double attention_factor = 1.0;
};

// Torch's float32 pow on the CPU: SLEEF's powf_u10 (accurate to 1 ulp, not correctly rounded).
// The FMA build is the scalar twin of the AVX2 Sleef_powf8_u10 that torch's vectorized kernel
// calls (the same bits), and, unlike the Sleef_powf_u10 dispatcher, gives the same result on
// every CPU that has FMA. Only x86 CPUs without FMA (before 2013) get the plain C build, which
// can differ from it by an ulp.
float TorchPowf(float x, float y) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has_fma = __builtin_cpu_supports("fma");
  return has_fma ? Sleef_finz_powf1_u10purecfma(x, y) : Sleef_cinz_powf1_u10purec(x, y);
#else
  return Sleef_powf_u10(x, y);
#endif
}

// b_i = base^(2i / denominator) for i < pairs: the reference converts the integer grid to float32,
// divides by the width in float32, converts the base to float32 (a Python float raised to a
// tensor becomes a float32 tensor first) and raises it in float32 with torch's CPU kernel. That
// kernel runs SLEEF's vector powf over blocks of 16 (two 8-lane AVX2 vectors) and the C library's
// scalar powf over the remaining pairs % 16; we use SLEEF for the blocks and a correctly rounded
// power for the tail (glibc's powf is within 0.82 ulp and agrees with it on every golden
// frequency). In double (kExact) it is the correctly rounded power throughout (docs/PRECISION.md).
template <typename T>
std::vector<T> BasePowers(double base, int64_t pairs, int64_t denominator) {
  constexpr int64_t kTorchVectorBlock = 16;
  const int64_t vectorized = pairs / kTorchVectorBlock * kTorchVectorBlock;
  std::vector<T> powers(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    const T exponent = static_cast<T>(2 * i) / static_cast<T>(denominator);
    if constexpr (std::is_same_v<T, float>) {
      if (i < vectorized) {
        powers[i] = TorchPowf(static_cast<float>(base), exponent);
        continue;
      }
    }
    powers[i] = static_cast<T>(
        std::pow(static_cast<double>(static_cast<T>(base)), static_cast<double>(exponent)));
  }
  return powers;
}

template <typename T>
std::vector<T> Reciprocals(std::vector<T> values) {
  for (T& v : values) v = T(1) / v;
  return values;
}

template <typename T>
std::vector<T> PlainInvFreq(double base, int64_t rotary_dim) {
  return Reciprocals(BasePowers<T>(base, rotary_dim / 2, rotary_dim));
}

template <typename T>
Scaled<T> Frequencies(const NoScaling&, double base, int64_t rotary_dim, std::optional<int64_t>) {
  return {PlainInvFreq<T>(base, rotary_dim)};
}

template <typename T>
Scaled<T> Frequencies(const LinearScaling& rule, double base, int64_t rotary_dim,
                      std::optional<int64_t>) {
  std::vector<T> inv_freq = PlainInvFreq<T>(base, rotary_dim);
  for (T& w : inv_freq) w /= static_cast<T>(rule.factor);
  return {std::move(inv_freq)};
}

template <typename T>
Scaled<T> Frequencies(const DynamicNtkScaling& rule, double base, int64_t rotary_dim,
                      std::optional<int64_t> seq_len) {
  // Never below M, so short inputs give exactly the default frequencies. The effective base is a
  // double (the reference computes it with Python floats for an integer length).
  const double length = static_cast<double>(std::max(seq_len.value_or(0), rule.max_positions));
  const double d = static_cast<double>(rotary_dim);
  const double scaled_base =
      base *
      std::pow(rule.factor * length / static_cast<double>(rule.max_positions) - (rule.factor - 1.0),
               d / (d - 2.0));
  return {PlainInvFreq<T>(scaled_base, rotary_dim)};
}

// Fractional pair index whose frequency turns exactly `rotations` times over `length` positions:
// solves length * base^(-2i/d) = 2 pi rotations for i. Double, as in the reference.
double CorrectionDim(double rotations, int64_t rotary_dim, double base, int64_t length) {
  return static_cast<double>(rotary_dim) *
         std::log(static_cast<double>(length) / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

// The parameters under which the current rule computes what `rules` computes: each earlier
// release differs only in which length, factor and attention-factor inputs it reads.
YarnScaling Resolve(YarnScaling rule, YarnRules rules) {
  Require(rules == YarnRules::kTransformers5 || rules == YarnRules::kTransformers4_50 ||
              rules == YarnRules::kTransformers4_51,
          kFn, "yarn_rules", "be transformers5, transformers4_50 or transformers4_51",
          static_cast<int>(rules));
  rule.rules = YarnRules::kTransformers5;
  if (rules == YarnRules::kTransformers5) return rule;
  const std::string rule_name = "be > 0 under " + std::string(YarnRulesName(rules)) +
                                " (max_position_embeddings, which that release reads)";
  Require(rule.max_positions > 0, kFn, "max_positions", rule_name, rule.max_positions);
  if (rules == YarnRules::kTransformers4_50) {
    rule.original_max_positions = rule.max_positions;
    rule.mscale = 0.0;
    rule.mscale_all_dim = 0.0;
    rule.truncate = true;
    return rule;
  }
  if (const auto l0 = rule.parameters_original_max_positions) {
    Require(*l0 > 0, kFn, "parameters_original_max_positions", "be > 0", *l0);
    const double factor = static_cast<double>(rule.max_positions) / static_cast<double>(*l0);
    Require(factor >= 1.0, kFn, "max_positions / parameters_original_max_positions",
            "be >= 1 (the factor under transformers4_51)", factor);
    rule.factor = factor;
    rule.original_max_positions = *l0;
  } else {
    rule.original_max_positions = rule.max_positions;
  }
  return rule;
}

template <typename T>
Scaled<T> Frequencies(const YarnScaling& rule, double base, int64_t rotary_dim,
                      std::optional<int64_t>) {
  double lo = CorrectionDim(rule.beta_fast, rotary_dim, base, rule.original_max_positions);
  double hi = CorrectionDim(rule.beta_slow, rotary_dim, base, rule.original_max_positions);
  if (rule.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  // The upper clamp is d - 1, looser than the last pair d/2 - 1; the ramp's clamp makes that
  // harmless (ref §10.9).
  lo = std::max(lo, 0.0);
  hi = std::min(hi, static_cast<double>(rotary_dim - 1));
  if (lo == hi) hi += 0.001;  // a zero-width ramp would divide by zero

  const std::vector<T> powers = BasePowers<T>(base, rotary_dim / 2, rotary_dim);
  std::vector<T> inv_freq(powers.size());
  const T factor = static_cast<T>(rule.factor);
  for (size_t i = 0; i < powers.size(); ++i) {
    const T extrapolated = T(1) / powers[i];
    const T interpolated = T(1) / (factor * powers[i]);
    const T ramp =
        std::clamp((static_cast<T>(i) - static_cast<T>(lo)) / static_cast<T>(hi - lo), T(0), T(1));
    const T extrapolation_weight = T(1) - ramp;
    inv_freq[i] =
        interpolated * (T(1) - extrapolation_weight) + extrapolated * extrapolation_weight;
  }

  double attention_factor = YarnMscale(rule.factor);
  if (rule.attention_factor) {
    attention_factor = *rule.attention_factor;
  } else if (rule.mscale != 0 && rule.mscale_all_dim != 0) {
    attention_factor =
        YarnMscale(rule.factor, rule.mscale) / YarnMscale(rule.factor, rule.mscale_all_dim);
  }
  return {std::move(inv_freq), attention_factor};
}

template <typename T>
Scaled<T> Frequencies(const LongRopeScaling& rule, double base, int64_t rotary_dim,
                      std::optional<int64_t> seq_len) {
  const double l0 = static_cast<double>(rule.original_max_positions);
  const double factor = rule.factor.value_or(static_cast<double>(rule.max_positions) / l0);
  double attention_factor = 1.0;
  if (rule.attention_factor) {
    attention_factor = *rule.attention_factor;
  } else if (factor > 1.0) {
    attention_factor = std::sqrt(1.0 + std::log(factor) / std::log(l0));
  }
  // Strictly longer than L0 switches to the long factors; the reference converts the chosen list
  // to float32, which is why 1.05 does not survive the round trip.
  const bool long_regime = seq_len && *seq_len > rule.original_max_positions;
  const std::vector<double>& rescale = long_regime ? rule.long_factor : rule.short_factor;
  std::vector<T> inv_freq = BasePowers<T>(base, rotary_dim / 2, rotary_dim);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = T(1) / (static_cast<T>(rescale[i]) * inv_freq[i]);
  }
  return {std::move(inv_freq), attention_factor};
}

template <typename T>
Scaled<T> Frequencies(const Llama3Scaling& rule, double base, int64_t rotary_dim,
                      std::optional<int64_t>) {
  const double l0 = static_cast<double>(rule.original_max_positions);
  const T low_freq_wavelength = static_cast<T>(l0 / rule.low_freq_factor);
  const T high_freq_wavelength = static_cast<T>(l0 / rule.high_freq_factor);
  const T factor = static_cast<T>(rule.factor);
  std::vector<T> inv_freq = PlainInvFreq<T>(base, rotary_dim);
  for (T& w : inv_freq) {
    // The reference divides a scalar by a tensor as reciprocal-then-multiply.
    const T wavelength = (T(1) / w) * static_cast<T>(2.0 * std::numbers::pi);
    const T kept_or_divided = wavelength > low_freq_wavelength ? w / factor : w;
    // With low_freq_factor == high_freq_factor (Llama 4) the band is empty: a hard cutoff. The
    // reference would divide 0 by 0 for a wavelength exactly at the cutoff; posenc keeps it.
    const bool medium = rule.high_freq_factor > rule.low_freq_factor &&
                        !(wavelength < high_freq_wavelength) && !(wavelength > low_freq_wavelength);
    if (medium) {
      const T smooth =
          ((T(1) / wavelength) * static_cast<T>(l0) - static_cast<T>(rule.low_freq_factor)) /
          static_cast<T>(rule.high_freq_factor - rule.low_freq_factor);
      w = (T(1) - smooth) * kept_or_divided / factor + smooth * kept_or_divided;
    } else {
      w = kept_or_divided;
    }
  }
  return {std::move(inv_freq)};
}

template <typename T>
Scaled<T> Frequencies(const ProportionalScaling& rule, double base, int64_t head_dim,
                      std::optional<int64_t>) {
  // The exponent is over the whole head (2i / h), not over the rotated width; the pairs past
  // floor(p h / 2) get frequency 0 (ref §7).
  const auto rotated = static_cast<int64_t>(rule.partial_rotary_factor * head_dim / 2.0);
  std::vector<T> inv_freq = Reciprocals(BasePowers<T>(base, rotated, head_dim));
  inv_freq.resize(head_dim / 2, T(0));
  for (T& w : inv_freq) w /= static_cast<T>(rule.factor);
  return {std::move(inv_freq)};
}

template <typename T>
RopeFrequencies Compute(double base, int64_t rotary_dim, const RopeScaling& scaling,
                        std::optional<int64_t> seq_len) {
  Scaled<T> scaled = std::visit(
      [&](const auto& rule) { return Frequencies<T>(rule, base, rotary_dim, seq_len); }, scaling);
  return {std::vector<double>(scaled.inv_freq.begin(), scaled.inv_freq.end()),
          scaled.attention_factor};
}

}  // namespace

std::string_view RopeTypeName(const RopeScaling& scaling) {
  static constexpr std::string_view kNames[] = {"default",  "linear", "dynamic",     "yarn",
                                                "longrope", "llama3", "proportional"};
  static_assert(std::size(kNames) == std::variant_size_v<RopeScaling>);
  return kNames[scaling.index()];
}

namespace {
constexpr std::pair<YarnRules, std::string_view> kYarnRuleNames[] = {
    {YarnRules::kTransformers5, "transformers5"},
    {YarnRules::kTransformers4_50, "transformers4_50"},
    {YarnRules::kTransformers4_51, "transformers4_51"}};
}  // namespace

std::string_view YarnRulesName(YarnRules rules) {
  for (const auto& [value, name] : kYarnRuleNames) {
    if (value == rules) return name;
  }
  return "unknown";
}

YarnRules ParseYarnRules(std::string_view name, std::string_view function,
                         std::string_view parameter) {
  for (const auto& [value, known] : kYarnRuleNames) {
    if (known == name) return value;
  }
  throw Error(ErrorMessage(function, parameter,
                           "be transformers5, transformers4_50 or transformers4_51",
                           "\"" + std::string(name) + "\""));
}

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

RopeFrequencies ComputeRopeFrequencies(double base, int64_t rotary_dim, const RopeScaling& scaling,
                                       const RopeFrequencyOptions& options) {
  Require(std::isfinite(base) && base > 0, kFn, "base", "be finite and > 0", base);
  Require(rotary_dim > 0 && rotary_dim % 2 == 0, kFn, "rotary_dim", "be even and > 0", rotary_dim);
  if (options.seq_len) Require(*options.seq_len > 0, kFn, "seq_len", "be > 0", *options.seq_len);
  Require(
      options.precision == RopePrecision::kReference || options.precision == RopePrecision::kExact,
      kFn, "precision", "be kReference or kExact", static_cast<int>(options.precision));
  if (const auto* yarn = std::get_if<YarnScaling>(&scaling);
      yarn != nullptr && (yarn->rules != YarnRules::kTransformers5 || options.yarn_rules)) {
    return ComputeRopeFrequencies(
        base, rotary_dim, Resolve(*yarn, options.yarn_rules.value_or(yarn->rules)),
        {.precision = options.precision, .seq_len = options.seq_len, .yarn_rules = {}});
  }
  const RopeScaling& resolved = scaling;
  std::visit([&](const auto& rule) { Validate(rule, base, rotary_dim); }, resolved);
  RopeFrequencies frequencies = options.precision == RopePrecision::kReference
                                    ? Compute<float>(base, rotary_dim, resolved, options.seq_len)
                                    : Compute<double>(base, rotary_dim, resolved, options.seq_len);
  // Valid but extreme inputs (a base or factor near the float32 range, mscales near the double
  // range) can overflow; report that instead of returning inf or NaN.
  for (size_t i = 0; i < frequencies.inv_freq.size(); ++i) {
    Require(std::isfinite(frequencies.inv_freq[i]) && frequencies.inv_freq[i] >= 0, kFn,
            "inv_freq[" + std::to_string(i) + "]",
            "be finite and >= 0 (the base or a factor overflows this precision)",
            frequencies.inv_freq[i]);
  }
  // The attention factor scales cos and sin in float32 (Rope::Validate checks the same).
  Require(internal::IsPositiveFloat32(frequencies.attention_factor), kFn, "attention_factor",
          "be " + std::string(internal::kPositiveFloat32) +
              " (mscale or attention_factor is out of range)",
          frequencies.attention_factor);
  return frequencies;
}

int64_t SeqLenOf(std::span<const int64_t> positions) {
  Require(!positions.empty(), kFn, "positions", "be non-empty", "[]");
  const int64_t max_position = *std::max_element(positions.begin(), positions.end());
  const int64_t min_position = *std::min_element(positions.begin(), positions.end());
  Require(min_position >= 0, kFn, "positions", "be >= 0", min_position);
  Require(max_position < INT64_MAX, kFn, "positions", "be < 2^63 - 1", max_position);
  return max_position + 1;
}

}  // namespace posenc
