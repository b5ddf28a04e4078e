// Passes (1) and (2) of the forward attention kernel after the products, row by row, and the
// log-sum-exp merge of partial results:
//   (1) the row's query scale, soft-capping, its position bias (ALiBi or T5) and its mask added
//       to the scores;
//   (2) online max and sum: m' = max(m, max_j s_j), p_j = exp(s_j - m'),
//       l' = l exp(m - m') + sum_j p_j, and the correction exp(m - m') of the row's output;
//   merge: out = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c with M = max_c m_c.
//
// ALiBi: -slope (qpos - kpos_j) = slope (kpos_j - anchor) - slope (qpos - anchor). The second
// term is the same for every key of a row, and softmax ignores it. The anchor is qpos clamped to
// the range of key positions, so that the float distance kpos_j - anchor is small, and exact, for
// the keys that carry weight even at positions in the millions (float32 holds integers up to 2^24
// exactly; the distances are formed in int64 relative to the tile's smallest key position).
//
// T5's bias depends only on d = kpos_j - qpos: attention_call.cc tabulates it per head for every
// d up to where the buckets stop changing (plus a key tile's reach), so a row adds it to a tile
// of consecutive keys with one unaligned load per vector, as a constant when the whole tile lies
// in the last bucket, and key by key from the table otherwise.
#if defined(POSENC_ATTENTION_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_SOFTMAX_INL_H_
#undef POSENC_ATTENTION_SOFTMAX_INL_H_
#else
#define POSENC_ATTENTION_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention_kernels.h"
#include "attention_tiles-inl.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "relative_bias_internal.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// T5: the bias of `row` at distance d = key_pos - query_pos (AttentionKernelArgs).
inline float RelativeBiasAt(const internal::AttentionKernelArgs& a, const RowState& row,
                            int64_t d) {
  return internal::RelativeBiasAt(a, row.bias, row.head, d);
}

// T5's bias, fused: no [queries, keys] buffer. The bias depends only on the distance, so the row
// reads it from its head's per-distance table: a tile of consecutive key positions is one
// unaligned vector load per vector of keys, a tile wholly beyond the last bucket's edge is a
// constant, and only other tiles look up key by key.
template <class DF>
HWY_INLINE void AddRelativeBias(DF df, const internal::AttentionKernelArgs& a, size_t width,
                                float* HWY_RESTRICT s, const TileKeys& tk, const RowState& row) {
  const size_t n = hn::Lanes(df);
  const int64_t extent = a.relative_extent;
  const int64_t d_min = tk.min - row.pos, d_max = tk.max - row.pos;
  const auto add_constant = [&](float bias) HWY_ATTR {
    const auto vbias = hn::Set(df, bias);
    for (size_t j = 0; j < width; j += n) {
      hn::StoreU(hn::Add(hn::LoadU(df, s + j), vbias), df, s + j);
    }
  };
  if (a.relative_far == nullptr && d_max <= -extent) return add_constant(row.bias[-extent]);
  if (a.relative_far == nullptr && d_min >= extent) return add_constant(row.bias[extent]);
  if (tk.contiguous && d_min >= -extent && d_min + static_cast<int64_t>(width) - 1 <= extent) {
    // Past `keys` the scores are -inf, which the bias leaves -inf.
    const float* bias = row.bias + d_min;
    for (size_t j = 0; j < width; j += n) {
      hn::StoreU(hn::Add(hn::LoadU(df, s + j), hn::LoadU(df, bias + j)), df, s + j);
    }
    return;
  }
  for (size_t j = 0; j < tk.keys; ++j) s[j] += RelativeBiasAt(a, row, tk.pos[j] - row.pos);
}

// Logit soft-capping of `width` scores at s: s = cap tanh(s / cap) (cap > 0). With cap_grad,
// also writes there the derivative of each capped score by its input, 1 - tanh^2, for the
// backward pass.
template <class DF>
HWY_INLINE void SoftCap(DF df, float cap, size_t width, float* HWY_RESTRICT s,
                        float* HWY_RESTRICT cap_grad) {
  const size_t n = hn::Lanes(df);
  const auto vcap = hn::Set(df, cap);
  const auto inv_cap = hn::Set(df, 1.0f / cap);
  const auto one = hn::Set(df, 1.0f);
  for (size_t j = 0; j < width; j += n) {
    const auto t = hn::Tanh(df, hn::Mul(hn::LoadU(df, s + j), inv_cap));
    hn::StoreU(hn::Mul(vcap, t), df, s + j);
    if (cap_grad != nullptr) hn::StoreU(hn::NegMulAdd(t, t, one), df, cap_grad + j);
  }
}

// Pass (1) after the product, for one row: the row's score multiplier, soft-capping, -inf for
// keys past the end of a short last tile, the row's ALiBi or T5 bias and its mask (-inf where a
// mask hides the key), on `width` scores at s (whole vectors); key_offset[j] is key j's
// position - tk.min. Shared by the forward and the backward pass, so both see the same scores;
// the backward pass takes soft-capping's derivative in cap_grad (SoftCap).
template <class DF>
HWY_INLINE void BiasAndMask(DF df, const internal::AttentionKernelArgs& a, size_t width,
                            const float* HWY_RESTRICT key_offset, float* HWY_RESTRICT s,
                            const TileKeys& tk, const RowState& row,
                            float* HWY_RESTRICT cap_grad = nullptr) {
  const size_t n = hn::Lanes(df);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t* key_pos = tk.pos;
  const size_t keys = tk.keys;
  const int64_t key_min = tk.min;
  if (row.score_mul != 1.0f) {
    const auto mul = hn::Set(df, row.score_mul);
    for (size_t j = 0; j < width; j += n) hn::StoreU(hn::Mul(hn::LoadU(df, s + j), mul), df, s + j);
  }
  // Soft-capping, before the biases and masks (Gemma 2, ggml), and before the short tile's -inf,
  // which tanh would turn into -cap.
  if (a.softcap > 0.0f) SoftCap(df, a.softcap, width, s, cap_grad);
  std::fill(s + keys, s + width, kNegInf);
  if (a.alibi_slopes != nullptr) {
    const auto slope = hn::Set(df, row.slope);
    const auto anchor = hn::Set(df, static_cast<float>(row.anchor - key_min));
    for (size_t j = 0; j < width; j += n) {
      const auto distance = hn::Sub(hn::LoadU(df, key_offset + j), anchor);
      hn::StoreU(hn::MulAdd(slope, distance, hn::LoadU(df, s + j)), df, s + j);
    }
  }
  if (row.bias != nullptr) AddRelativeBias(df, a, width, s, tk, row);
  // Masks: only tiles that straddle an edge of the row's interval pay for this.
  if (key_min < row.lo || tk.max > row.hi) {
    for (size_t j = 0; j < keys; ++j) {
      if (key_pos[j] < row.lo || key_pos[j] > row.hi) s[j] = kNegInf;
    }
  }
}

// exp(x) for the softmax's x = s - max <= 0, in 17 operations where Highway's general Exp takes
// about 26 (the exp was about 8% of float32 prefill's time): 2^n e^r with n = round(x / ln 2) and
// r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] (ln 2 in two parts, so that r stays exact), e^r by
// Highway's polynomial for float32, 2^n written into the exponent bits. Within 1 float32 ulp of
// exp in double (softmax_exp_test.cc), also for small positive x (the backward pass's recomputed
// scores may pass its saved lse by rounding). x below ln(2^-126) gives 0, so exp(-inf) = 0 for
// hidden keys; NaN gives NaN (every step carries it, and NaN < -87 is false), which OnlineSoftmaxRow
// relies on.
template <class DF, class V>
HWY_INLINE V ExpOfNonPositive(DF df, V x) {
  const hn::RebindToSigned<DF> di;
  // Adding 1.5 2^23 rounds x / ln 2 to the nearest integer, which lands in the low mantissa bits.
  constexpr float kRound = 12582912.0f;
  constexpr int32_t kRoundBits = 0x4B400000;
  const auto shifted = hn::MulAdd(x, hn::Set(df, 1.44269504088896341f), hn::Set(df, kRound));
  const auto n = hn::Sub(shifted, hn::Set(df, kRound));
  auto r = hn::NegMulAdd(n, hn::Set(df, 0.693145751953125f), x);
  r = hn::NegMulAdd(n, hn::Set(df, 1.428606765330187045e-6f), r);
  // e^r = 1 + r + r^2 (k0 + k1 r + ... + k5 r^5), Highway's ExpImpl<float> coefficients.
  auto poly = hn::Set(df, 0.000198527617612853646278381f);
  poly = hn::MulAdd(poly, r, hn::Set(df, 0.00139304355252534151077271f));
  poly = hn::MulAdd(poly, r, hn::Set(df, 0.00833336077630519866943359f));
  poly = hn::MulAdd(poly, r, hn::Set(df, 0.0416664853692054748535156f));
  poly = hn::MulAdd(poly, r, hn::Set(df, 0.166666671633720397949219f));
  poly = hn::MulAdd(poly, r, hn::Set(df, 0.5f));
  const auto exp_r = hn::Add(hn::MulAdd(poly, hn::Mul(r, r), r), hn::Set(df, 1.0f));
  // 2^n: n + 127 in the exponent field; shifted's bits are kRoundBits + n.
  const auto biased = hn::Add(hn::BitCast(di, shifted), hn::Set(di, 127 - kRoundBits));
  const auto two_n = hn::BitCast(df, hn::ShiftLeft<23>(biased));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -87.33654f)), hn::Mul(exp_r, two_n));
}

// Passes (1) after the product and (2) for one row: turns its `width` scores at s into weights p
// and updates its running max and sum (key_offset as for BiasAndMask).
template <class DF>
HWY_INLINE void OnlineSoftmaxRow(DF df, const internal::AttentionKernelArgs& a, size_t width,
                                 const float* HWY_RESTRICT key_offset, float* HWY_RESTRICT s,
                                 const TileKeys& tk, RowState& row) {
  const size_t n = hn::Lanes(df);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t keys = tk.keys;
  BiasAndMask(df, a, width, key_offset, s, tk, row);

  // NaN: a NaN score (a NaN in q or k, or inf - inf) must make the row NaN, as softmax does in
  // the math and in PyTorch. Max may drop NaN (x86 keeps its second operand), so NaN is carried
  // by the weights instead: ExpOfNonPositive keeps NaN, which makes the sum and the output NaN.
  // A max that drops every NaN stays finite or -inf; -inf is checked.
  auto vmax = hn::Set(df, kNegInf);
  for (size_t j = 0; j < width; j += n) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  float new_max = MaxKeepingNaN(row.max, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  if (new_max == kNegInf) {
    if (std::none_of(s, s + keys, [](float x) { return std::isnan(x); })) {
      // nothing visible yet: all weights 0, state unchanged
      std::fill(s, s + width, 0.0f);
      row.correction = 1.0f;
      return;
    }
    new_max = std::numeric_limits<float>::quiet_NaN();
  }
  // exp(-inf) = 0 on the first visible tile; once a row's max settles, most tiles leave it
  // unchanged, and exp(0) = 1 needs no call.
  row.correction = new_max == row.max ? 1.0f : std::exp(row.max - new_max);
  row.max = new_max;
  const auto vnew_max = hn::Set(df, new_max);
  auto vsum = hn::Zero(df);
  for (size_t j = 0; j < width; j += n) {
    const auto p = ExpOfNonPositive(df, hn::Sub(hn::LoadU(df, s + j), vnew_max));
    vsum = hn::Add(vsum, p);
    hn::StoreU(p, df, s + j);
  }
  row.sum = row.sum * row.correction + hn::GetLane(hn::SumOfLanes(df, vsum));
}

// The last step, the log-sum-exp merge of `count` partial results of one row over disjoint key
// ranges, partial c being (o_c, m_c, l_c) = (o + c stride, max[c stride], sum[c stride]):
// dst = sum_c w_c o_c / sum_c w_c l_c with w_c = exp(m_c - max_c m_c). One partial is plain
// normalisation, out = o / l. A row that saw no visible key (every l_c = 0) gets zeros, not NaN;
// a row with a NaN max or sum (a NaN score) gets NaN.
// Writes value_dim floats of dst (the padding of o stays in scratch), and with `lse` the row's
// log-sum-exp, max_c m_c + log(sum_c w_c l_c) (-inf when nothing was visible).
// An attention sink (finite; -inf: none) is one more partial with m = sink, l = 1 and o = 0: it
// joins the denominator and the log-sum-exp once, whatever the number of partials; a row that
// sees no key then gets zeros and lse = sink.
template <class DF>
HWY_INLINE void MergePartials(DF df, const float* HWY_RESTRICT o, const float* HWY_RESTRICT max,
                              const float* HWY_RESTRICT sum, size_t stride, size_t count,
                              size_t value_dim, float* HWY_RESTRICT dst, float* HWY_RESTRICT lse,
                              float sink) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  HWY_DASSERT(count <= static_cast<size_t>(kMaxKeyChunks));
  float global_max = sink;
  for (size_t c = 0; c < count; ++c) global_max = MaxKeepingNaN(global_max, max[c * stride]);
  float weight[kMaxKeyChunks];
  float total = global_max == kNegInf || sink == kNegInf ? 0.0f : std::exp(sink - global_max);
  for (size_t c = 0; c < count; ++c) {
    // exp(-inf) = 0 for a chunk that saw nothing; global_max = -inf only when none saw anything.
    weight[c] = global_max == kNegInf ? 0.0f : std::exp(max[c * stride] - global_max);
    total += weight[c] * sum[c * stride];
  }
  const float inv_total = total != 0.0f ? 1.0f / total : 0.0f;  // NaN stays NaN
  if (lse != nullptr) *lse = global_max == kNegInf ? kNegInf : global_max + std::log(total);
  for (size_t c = 0; c < count; ++c) weight[c] *= inv_total;

  const size_t n = hn::Lanes(df);
  for (size_t e = 0; e < value_dim; e += n) {
    auto acc = hn::Zero(df);
    for (size_t c = 0; c < count; ++c) {
      acc = hn::MulAdd(hn::Set(df, weight[c]), hn::LoadU(df, o + c * stride + e), acc);
    }
    if (e + n <= value_dim) {
      hn::StoreU(acc, df, dst + e);
    } else {  // the row's last partial vector: dst may be followed by other rows
      constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
      float stage[kMaxLanes];
      hn::StoreU(acc, df, stage);
      std::memcpy(dst + e, stage, (value_dim - e) * sizeof(float));
    }
  }
}

// A partial result of one work item with a key range (split-K): the rows' running max and sum,
// then their unnormalised outputs, [kQueryTile, padded value_dim].
inline size_t PartialFloats(size_t value_dim) { return 2 * kQueryTile + kQueryTile * value_dim; }

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_SOFTMAX_INL_H_
