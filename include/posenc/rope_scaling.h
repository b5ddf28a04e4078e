// Context stretching for RoPE: scaling rules that turn a base and a rotary width into inverse
// frequencies and an attention factor. The rotation itself (rope.h) never changes; only its
// frequencies do. The rules are those of Hugging Face transformers' modeling_rope_utils
// (commit c49429ed; written out in reference/rope-scaling.md, cited below as "ref §n").
//
// With d = rotary_dim, theta = base, i = 0 .. d/2-1 and plain frequencies w_i = theta^(-2i/d):
//
//   NoScaling           "default"   w_i                                            (ref §1)
//   LinearScaling       "linear"    w_i / s: position interpolation (arXiv:2306.15595) (ref §2)
//   DynamicNtkScaling   "dynamic"   theta' = theta (s L/M - (s-1))^(d/(d-2)), L = max(seq_len, M)
//                                                                                  (ref §3)
//   YarnScaling         "yarn"      fast pairs kept, slow pairs / s, a ramp in between;
//                                   attention factor 0.1 ln s + 1 (arXiv:2309.00071) (ref §4);
//                                   earlier transformers releases' rules as YarnRules
//   LongRopeScaling     "longrope"  w_i / lambda_i with per-pair short or long factors (ref §5)
//   Llama3Scaling       "llama3"    wavelength bands: kept, smoothed, / s          (ref §6)
//   ProportionalScaling "proportional"  exponent over head_dim, k rotated pairs, rest 0 (ref §7)
//
// Length-dependent rules. Only "dynamic" and "longrope" read the length, and posenc is stateless:
// the frequencies are a pure function of RopeFrequencyOptions::seq_len. The length Hugging Face
// uses at run time is max(position_ids) + 1 of the batch (not the token count): use SeqLenOf().
//   dynamic:  L = max(seq_len, M), so L <= M (or no seq_len) gives exactly the default
//             frequencies; there is no hidden cache to reset. Hugging Face's rotary module caches:
//             it recomputes when L grows past the cached length and restores the originals only
//             when L < M strictly, so a request of exactly M positions after a longer one keeps
//             the scaled frequencies there (ref §3 (b)); keys already in a KV cache keep the
//             rotation they were given (ref §3 (a)). HfRopeCache (hf_rope_cache.h) reproduces
//             that stateful behaviour for parity with a Hugging Face serving loop.
//   longrope: the long factors when seq_len > L0 strictly, else the short ones (the module's
//             construction-time choice). The attention factor is the same in both regimes.
//
// Precision (ref §9). kReference (the default) reproduces the reference's float32 arithmetic step
// by step (float32 exponent grid, power, reciprocal, ramp, wavelength tests, float32 LongRoPE
// factor lists) and returns each frequency as the double holding that float32 value: within one
// float32 ulp of the reference's stored bits, because the models were trained with these
// frequencies. kExact evaluates the same formulas in double throughout. Attention factors, the
// YaRN correction range and the dynamic base are double in both modes, as in the reference.
// Nothing here ever passes through bf16 or fp16.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

namespace posenc {

enum class RopePrecision {
  kReference,  // float32 exactly as Hugging Face computes it (what the models were trained with)
  kExact,      // double throughout
};

struct NoScaling {};

struct LinearScaling {
  double factor = 1.0;  // s: finite, >= 1
};

// Dynamic NTK-aware scaling. Reads the length L (RopeFrequencyOptions::seq_len); see the header
// comment for what L is and when the frequencies return to the originals.
struct DynamicNtkScaling {
  double factor = 1.0;        // s: finite, >= 1
  int64_t max_positions = 0;  // M = max_position_embeddings (not L0, which dynamic ignores), > 0
};

// Which transformers release's YaRN a YarnScaling follows (docs/MODELS.md, "YaRN by release";
// tests/golden/yarn_releases/ holds each release's own numbers). With M = max_position_embeddings:
enum class YarnRules {
  // transformers 4.56.2 and later (checked against 5.23.0), as the paper: the correction range
  // spans L0, the attention factor follows mscale / mscale_all_dim when both are set, `truncate`
  // is honoured, the factor is the explicit one.
  kTransformers5,
  // transformers 4.45.0 - 4.50.3: the correction range spans M (L0 is not read), the attention
  // factor is attention_factor or 0.1 ln s + 1 (mscale and mscale_all_dim are not read), and the
  // range is always truncated (`truncate` is not read).
  kTransformers4_50,
  // transformers 4.51.0 - 4.56.1: as kTransformers5, but L0 is read from the scaling dict only
  // (parameters_original_max_positions; absent: M) and, when the dict gives L0, the factor is
  // M / L0 whatever `factor` says (Qwen2.5's snippet, M = L0, then scales nothing).
  kTransformers4_51,
};

// "transformers5", "transformers4_50", "transformers4_51".
std::string_view YarnRulesName(YarnRules rules);
// The inverse of YarnRulesName; posenc::Error naming `function` and `parameter` for any other.
YarnRules ParseYarnRules(std::string_view name, std::string_view function = "rope_scaling",
                         std::string_view parameter = "yarn_rules");

struct YarnScaling {
  double factor = 1.0;                     // s: finite, >= 1
  int64_t original_max_positions = 0;      // L0, the trained context, > 0
  double beta_fast = 32.0;                 // rotations over L0 above which a pair is kept
  double beta_slow = 1.0;                  // rotations below which a pair is divided by s
  bool truncate = true;                    // round the ramp bounds outwards to whole pairs
  std::optional<double> attention_factor;  // overrides the mscale rule when set; finite, > 0
  // DeepSeek's convention: when both are non-zero the attention factor is
  // g(s, mscale) / g(s, mscale_all_dim) with g(s, m) = 0.1 m ln s + 1; otherwise g(s, 1).
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  YarnRules rules = YarnRules::kTransformers5;  // RopeFrequencyOptions::yarn_rules overrides
  // M, read by kTransformers4_50 and kTransformers4_51 (> 0 there; 0: unknown).
  int64_t max_positions = 0;
  // L0 as the scaling dict itself gives it (not the top level), read by kTransformers4_51.
  std::optional<int64_t> parameters_original_max_positions;
};

// LongRoPE (Phi-3 "su"). Both lists have rotary_dim / 2 entries, finite and > 0.
struct LongRopeScaling {
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  int64_t original_max_positions = 0;      // L0, > 0
  int64_t max_positions = 0;               // M, > 0; the factor defaults to M / L0
  std::optional<double> factor;            // f, finite and > 0 when set
  std::optional<double> attention_factor;  // default sqrt(1 + ln f / ln L0) for f > 1, else 1
};

struct Llama3Scaling {
  double factor = 1.0;                 // s: finite, >= 1
  double low_freq_factor = 1.0;        // alpha: finite, > 0
  double high_freq_factor = 4.0;       // beta: finite, >= alpha (equal: a hard cutoff, Llama 4)
  int64_t original_max_positions = 0;  // L0, > 0
};

// Gemma 4's global layers. Pass head_dim as the rotary_dim of ComputeRopeFrequencies: the result
// has head_dim / 2 entries, the first floor(p * head_dim / 2) with exponent 2i / head_dim and the
// rest 0 (cos 1, sin 0), and the rotation spans the whole head. This is not partial rotary.
struct ProportionalScaling {
  double factor = 1.0;                 // s: finite, >= 1
  double partial_rotary_factor = 1.0;  // p: in (0, 1]
};

using RopeScaling = std::variant<NoScaling, LinearScaling, DynamicNtkScaling, YarnScaling,
                                 LongRopeScaling, Llama3Scaling, ProportionalScaling>;

// Hugging Face's rope_type name of a rule: "default", "linear", "dynamic", "yarn", "longrope",
// "llama3" or "proportional".
std::string_view RopeTypeName(const RopeScaling& scaling);

struct RopeFrequencyOptions {
  RopePrecision precision = RopePrecision::kReference;
  // L for the length-dependent rules (dynamic, longrope): max position + 1 of the batch. Absent
  // means the construction-time value (dynamic: M; longrope: the short factors). Must be > 0.
  std::optional<int64_t> seq_len;
  // The release rules of a YarnScaling (see YarnRules); absent: the scaling's own `rules`.
  std::optional<YarnRules> yarn_rules;
};

struct RopeFrequencies {
  std::vector<double> inv_freq;   // rotary_dim / 2 entries
  double attention_factor = 1.0;  // multiplies cos and sin
};

// Throws posenc::Error for a bad base, rotary_dim, scaling field or seq_len.
RopeFrequencies ComputeRopeFrequencies(double base, int64_t rotary_dim, const RopeScaling& scaling,
                                       const RopeFrequencyOptions& options = {});

// The length Hugging Face's rotary module uses for a batch: max(positions) + 1 (not the number of
// tokens, so offset or left-padded position ids change it). Throws posenc::Error when positions
// is empty or holds a negative position.
int64_t SeqLenOf(std::span<const int64_t> positions);

// g(s, m) of YaRN: 1 for s <= 1, else 0.1 m ln s + 1. DeepSeek V2/V3 attention also multiplies
// its softmax scale by g(s, mscale_all_dim)^2 (ref §4, "The DeepSeek convention").
double YarnMscale(double factor, double mscale = 1.0);

}  // namespace posenc
