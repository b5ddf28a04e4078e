// RoPE: rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864).
//
// Each pair (a, b) of features of q and k is turned by the angle pos * inv_freq[i]:
//
//   a' = a cos(phi) - b sin(phi)        phi = pos * inv_freq[i]
//   b' = a sin(phi) + b cos(phi)
//
// so that q_m . k_n depends only on m - n. Which features form pair i is the layout:
//
//   kHalfSplit  (GPT-NeoX, Llama in Hugging Face):  pair i = (i, i + rotary_dim/2)
//       features  [ x0  x1  x2  x3 | x4  x5  x6  x7 | pass ... ]      cos table [c0 c1 c2 c3 c0 c1 c2 c3]
//   kInterleaved (RoFormer, GPT-J, Meta's reference):  pair i = (2i, 2i + 1)
//       features  [ x0  x1 | x2  x3 | x4  x5 | x6  x7 | pass ... ]    cos table [c0 c0 c1 c1 c2 c2 c3 c3]
//
// Features at and past rotary_dim pass through untouched (partial rotary, e.g. GPT-NeoX, Phi).
// The two layouts are equivalent up to a fixed permutation of the projection weights, but are not
// interchangeable on the same weights.
//
// With rotary_offset r > 0 the rotated block starts at feature r instead of 0: features
// [r, r + rotary_dim) rotate in the layout above, pairs counted from r (half-split pair i =
// (r + i, r + i + rotary_dim/2); interleaved pair i = (r + 2i, r + 2i + 1)), and every other
// feature passes through untouched. DeepSeek V2/V3 multi-head latent attention (MLA) keeps each
// q and k head as [128 unrotated "nope" features | 64 rotated "rope" features]: head_dim 192,
// rotary_offset 128, rotary_dim 64, rotated in place inside the full head.
//
//       rotary_offset = 4, rotary_dim = 4, kHalfSplit:
//       features  [ pass pass pass pass | x0  x1 | x2  x3 | pass ... ]  pairs (x0, x2), (x1, x3)
//
// Scaling rules (position interpolation, NTK, YaRN, ...) only change inv_freq and
// attention_factor; the rotation itself never changes. Both cos and sin are multiplied by
// attention_factor, as Hugging Face does, so q . k gains attention_factor^2.
//
// Precision: inverse frequencies and angles are double; positions are int64. The kernel forms
// each angle in double, reduces it mod 2 pi in double and rounds cos and sin to float32 once:
// within 2 float32 ulps of the exact values for positions up to 2^24 (no float32 angle products).
//
// Speed: SIMD (Google Highway, the best instruction set of the running CPU) and OpenMP threads
// over tokens; cos and sin are formed once per (token, pair) and reused by every head of q and k.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "posenc/batch.h"
#include "posenc/heads.h"
#include "posenc/storage.h"

namespace posenc {

enum class RopeLayout { kHalfSplit, kInterleaved };

// With attention factor a, kForward is the linear map y = a R(phi) x on each pair. kInverse is
// its transpose, x' = a R(-phi) y: the backward pass of kForward (the gradient with respect to
// x, given the gradient with respect to y). With a == 1 (plain RoPE and most scaling rules; YaRN
// and LongRoPE may set a != 1) the transpose is also the exact undo of kForward; with a != 1 the
// round trip gives a^2 x: to undo, apply kInverse with a copy of the Rope whose attention_factor
// is 1/a.
enum class RopeDirection {
  kForward,  // a R(+phi): the embedding itself
  kInverse,  // a R(-phi): the transpose of kForward, i.e. its backward pass
};

// The plain RoPE frequencies inv_freq[i] = base^(-2i / rotary_dim), i < rotary_dim / 2, in double.
std::vector<double> DefaultInvFreq(double base, int64_t rotary_dim);

struct Rope {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // even, 2 <= rotary_dim <= head_dim - rotary_offset
  RopeLayout layout = RopeLayout::kHalfSplit;
  std::vector<double> inv_freq;   // rotary_dim / 2 entries, finite and >= 0
  double attention_factor = 1.0;  // finite and > 0; multiplies cos and sin
  // Features [rotary_offset, rotary_offset + rotary_dim) rotate, in `layout` with pairs counted
  // from rotary_offset; all others pass through untouched. rotary_offset >= 0 (odd is allowed)
  // and rotary_offset + rotary_dim <= head_dim. Last, so that positional initialisers of the
  // fields above keep their meaning.
  int64_t rotary_offset = 0;  // first rotated feature

  // Plain RoPE over the rotary_dim features from rotary_offset (rotary_dim 0 means
  // head_dim - rotary_offset: everything from rotary_offset on). inv_freq, and so any cos and
  // sin table, has rotary_dim / 2 entries and does not depend on the offset.
  static Rope Default(int64_t head_dim, double base = 10000.0,
                      RopeLayout layout = RopeLayout::kHalfSplit, int64_t rotary_dim = 0,
                      int64_t rotary_offset = 0);

  // Throws posenc::Error naming the field, value and rule.
  void Validate() const;

  friend bool operator==(const Rope&, const Rope&) = default;
};

// Every form validates all its arguments (rope, views, positions, shapes, aliasing) before
// writing anything, and reports the first failure as posenc::Error naming function "rope", the
// parameter, the rule and the value. Two views alias when a row of one shares a byte with a row
// of the other (an exact test, so q and k slices of one fused qkv buffer are accepted).

// T is the storage: float, BFloat16 and Float16 run the SIMD kernels (bfloat16 and float16 are
// widened to float32, rotated in float32 with float32 cos and sin, which come from double angles
// as above, and rounded back to nearest even: one rounding of the storage type per element);
// double is the double-precision reference (no SIMD, no rounding), for gradient checks in double,
// validated like the others.

// In place: rotates x [tokens, heads, head_dim] by its tokens' positions.
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions, Heads<T> x,
               RopeDirection direction = RopeDirection::kForward);

// In place, q [tokens, num_heads, head_dim] and k [tokens, num_kv_heads, head_dim] in one call:
// the angles of a token are shared by all its heads. Everything is validated before either
// buffer is written.
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions, Heads<T> q, Heads<T> k,
               RopeDirection direction = RopeDirection::kForward);

// Out of place: writes the rotated x_in into x_out (same shape; must not overlap x_in).
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions,
               std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
               RopeDirection direction = RopeDirection::kForward);

// Out of place, q and k in one call.
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions,
               std::type_identity_t<Heads<const T>> q_in, Heads<T> q_out,
               std::type_identity_t<Heads<const T>> k_in, Heads<T> k_out,
               RopeDirection direction = RopeDirection::kForward);

// Batched: the four forms above over a batch (posenc/batch.h), x [..., tokens, heads, head_dim]
// with any batch strides and positions [tokens] shared by the batch or [..., tokens] per element.
// Every element is validated, and the memory the elements share, before anything is written; a
// later element's error ends "(in batch element b)". A C-contiguous batch runs as one call over
// batch x tokens, Hugging Face's [batch, heads, seq, dim] with shared positions as one call over
// batch x heads, others one call per element. The forms above are a batch of one.
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions, const Batched<Heads<T>>& x,
               RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions, const Batched<Heads<T>>& q,
               const Batched<Heads<T>>& k, RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions,
               const std::type_identity_t<Batched<Heads<const T>>>& x_in,
               const Batched<Heads<T>>& x_out, RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions,
               const std::type_identity_t<Batched<Heads<const T>>>& q_in,
               const Batched<Heads<T>>& q_out,
               const std::type_identity_t<Batched<Heads<const T>>>& k_in,
               const Batched<Heads<T>>& k_out, RopeDirection direction = RopeDirection::kForward);

// cos and sin of the angle pos * inv_freq, in double: the accurate angle every kernel must match.
// The angle is one double product (error <= half an ulp: <= 2^-30 rad below 2^24), never
// a float32 product as in Hugging Face (~pos * 2^-24 rad); not scaled by attention_factor.
struct CosSin {
  double cos;
  double sin;
};
CosSin RopeAngle(int64_t pos, double inv_freq);

// The scalar reference twin of ApplyRope, in double arithmetic: the definition the fast kernels
// are tested against. Same contract as the out-of-place ApplyRope for one tensor; in place when
// x_in and x_out are the same memory (partial overlap is not allowed). cos and sin are computed
// once per (token, pair) and shared by all heads; features outside [rotary_offset, rotary_offset +
// rotary_dim) are copied when not in place. Assumes validated input (no checks).
// The double result is rounded to float, then to bfloat16 or float16 storage; float64 storage
// keeps it unrounded: the path for gradient checks in double.
template <typename T>
void ApplyRopeReference(const Rope& rope, std::span<const int64_t> positions,
                        std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                        RopeDirection direction);

}  // namespace posenc
