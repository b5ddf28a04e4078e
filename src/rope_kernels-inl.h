// The RoPE kernel body, compiled once per Highway target by rope_kernels.cc.
//
// Per token: cos and sin of every pair are formed once (angles in double, see angles-inl.h; for
// consecutive positions by one exact rotation step from the previous token) into
// a small per-thread table, scaled by attention_factor and signed for the direction, then every
// head of q and k is rotated with float32 FMAs, each row's data prefetched a few rows ahead
// (simd/prefetch.h). Tokens are split across OpenMP threads.
//
//   kHalfSplit:   y[i]        = x[i] c[i] - x[i + h] s[i]        one table entry per pair
//                 y[i + h]    = x[i] s[i] + x[i + h] c[i]        h = rotary_dim / 2
//   kInterleaved: y = x * [c0 c0 c1 c1 ...] + swap_pairs(x) * [-s0 s0 -s1 s1 ...]
//
// Only features [rotary_offset, rotary_offset + rotary_dim) of a row rotate (pairs counted from
// rotary_offset); out of place, the features before and after them are copied unchanged.
//
// A row's last partial vector goes through a small stack buffer: Highway 1.0.3's MaskedLoad
// reads the whole vector on SSE4 and for 16-bit lanes on AVX2 (and needs alignment there), so it
// is not safe at the end of a row.

#if defined(POSENC_ROPE_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ROPE_KERNELS_INL_H_
#undef POSENC_ROPE_KERNELS_INL_H_
#else
#define POSENC_ROPE_KERNELS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "angles-inl.h"
#include "hwy/aligned_allocator.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "rope_bf16.h"
#include "rope_kernels.h"
#include "simd/kernel_threads.h"
#include "simd/prefetch.h"
#include "simd/simd_storage-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Consecutive positions (a prefill) advance the previous token's cos and sin by one step of
// each frequency, a rotation in double (4 multiplies instead of a Sin and a Cos, which the
// profile showed to be 16% of the whole kernel), restarting from the exact angle every
// kMaxAdvances tokens: each step adds ~2e-16 of error, so after 63 steps the values are still
// within 1.5e-14 of exact, far below a float32 ulp.
constexpr int64_t kMaxAdvances = 63;

// The per-thread double cos and sin of the current token, unscaled.
struct AngleState {
  double* cos;
  double* sin;
};

// cos and sin of pos * freq[i] for i < pairs (freq = freq_hi + freq_lo, see angles-inl.h; pairs
// a multiple of the double vector length, zero-padded; with several position streams pair i's
// position is pair_pos[i] instead of pos, the same double value when the streams agree, so the
// same bits as 1-D RoPE): exactly, or by advancing `state` (the
// previous position's values) by one step (step_cos, step_sin: cos and sin of freq). The result
// is kept in `state` and written, times cos_scale and sin_scale, as float32 tables. Half-split:
// entry i is pair i. Interleaved: entries 2i and 2i + 1 are pair i, sin negated in the first.
template <class DD>
HWY_INLINE void FillCosSin(DD dd, int64_t pos, const double* HWY_RESTRICT pair_pos, bool advance,
                           const double* HWY_RESTRICT freq_hi, const double* HWY_RESTRICT freq_lo,
                           const double* HWY_RESTRICT step_cos, const double* HWY_RESTRICT step_sin,
                           size_t pairs, double cos_scale, double sin_scale, bool interleaved,
                           AngleState state, float* HWY_RESTRICT cos_out,
                           float* HWY_RESTRICT sin_out) {
  const hn::Rebind<float, DD> dfh;      // one float per double lane
  const hn::Repartition<float, DD> df;  // two floats per double lane
  const hn::RebindToUnsigned<DD> du64;
  const hn::Rebind<uint32_t, DD> du32h;
  const auto vpos = hn::Set(dd, static_cast<double>(pos));
  const auto vcos_scale = hn::Set(dd, cos_scale), vsin_scale = hn::Set(dd, sin_scale);
  for (size_t i = 0; i < pairs; i += hn::Lanes(dd)) {
    hn::Vec<DD> cd, sd;
    if (advance) {
      const auto pc = hn::Load(dd, state.cos + i), ps = hn::Load(dd, state.sin + i);
      const auto sc = hn::Load(dd, step_cos + i), ss = hn::Load(dd, step_sin + i);
      cd = hn::MulSub(pc, sc, hn::Mul(ps, ss));
      sd = hn::MulAdd(ps, sc, hn::Mul(pc, ss));
    } else {
      const auto p = pair_pos != nullptr ? hn::Load(dd, pair_pos + i) : vpos;
      const auto r = AngleMod2Pi(dd, p, hn::Load(dd, freq_hi + i), hn::Load(dd, freq_lo + i));
      cd = hn::Cos(dd, r);
      sd = hn::Sin(dd, r);
    }
    hn::Store(cd, dd, state.cos + i);
    hn::Store(sd, dd, state.sin + i);
    const auto c = hn::DemoteTo(dfh, hn::Mul(cd, vcos_scale));
    const auto s = hn::DemoteTo(dfh, hn::Mul(sd, vsin_scale));
    if (!interleaved) {
      hn::StoreU(c, dfh, cos_out + i);
      hn::StoreU(s, dfh, sin_out + i);
      continue;
    }
#if HWY_TARGET == HWY_SCALAR
    // One lane: write the two entries of the pair directly.
    (void)df, (void)du64, (void)du32h;
    cos_out[2 * i] = cos_out[2 * i + 1] = hn::GetLane(c);
    sin_out[2 * i] = -hn::GetLane(s);
    sin_out[2 * i + 1] = hn::GetLane(s);
#else
    // Duplicate each float into both halves of a 64-bit lane: [c0 c0 c1 c1 ...] in order.
    const auto cu = hn::PromoteTo(du64, hn::BitCast(du32h, c));
    const auto su = hn::PromoteTo(du64, hn::BitCast(du32h, s));
    const auto negate_low = hn::Set(du64, uint64_t{0x80000000});
    hn::Store(hn::BitCast(df, hn::Or(hn::ShiftLeft<32>(cu), cu)), df, cos_out + 2 * i);
    hn::Store(hn::BitCast(df, hn::Or(hn::ShiftLeft<32>(su), hn::Xor(su, negate_low))), df,
              sin_out + 2 * i);
#endif
  }
}

// One vector of pairs (x0[i], x1[i]) -> (y0[i], y1[i]). In place is fine: both are loaded first.
template <class DF, typename T>
HWY_INLINE void RotateHalfSplitVec(DF df, const T* x0, const T* x1, const float* c, const float* s,
                                   T* y0, T* y1) {
  const auto a = LoadF32(df, x0), b = LoadF32(df, x1);
  const auto vc = hn::LoadU(df, c), vs = hn::LoadU(df, s);
  StoreF32(hn::MulSub(a, vc, hn::Mul(b, vs)), df, y0);
  StoreF32(hn::MulAdd(a, vs, hn::Mul(b, vc)), df, y1);
}

// One vector of interleaved pairs: y = x c + swap_pairs(x) s, with s carrying the signs.
template <class DF, typename T>
HWY_INLINE void RotateInterleavedVec(DF df, const T* x, const float* c, const float* s, T* y) {
#if HWY_TARGET == HWY_SCALAR
  // One lane holds no pair: rotate the pair at x as two one-lane vectors.
  RotateHalfSplitVec(df, x, x + 1, c, s + 1, y, y + 1);
#else
  const auto v = LoadF32(df, x);
  StoreF32(hn::MulAdd(v, hn::LoadU(df, c), hn::Mul(hn::Reverse2(df, v), hn::LoadU(df, s))), df, y);
#endif
}

template <class DF, typename T>
HWY_INLINE void RotateRowHalfSplit(DF df, const T* in, T* out, size_t half, const float* c,
                                   const float* s) {
  const size_t n = hn::Lanes(df);
  size_t i = 0;
  for (; i + n <= half; i += n) {
    RotateHalfSplitVec(df, in + i, in + half + i, c + i, s + i, out + i, out + half + i);
  }
  if (i == half) return;
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  T stage[2 * kMaxLanes] = {};
  const size_t bytes = (half - i) * sizeof(T);
  std::memcpy(stage, in + i, bytes);
  std::memcpy(stage + n, in + half + i, bytes);
  RotateHalfSplitVec(df, stage, stage + n, c + i, s + i, stage, stage + n);
  std::memcpy(out + i, stage, bytes);
  std::memcpy(out + half + i, stage + n, bytes);
}

template <class DF, typename T>
HWY_INLINE void RotateRowInterleaved(DF df, const T* in, T* out, size_t rotary_dim, const float* c,
                                     const float* s) {
  // Whole pairs per step: the one-lane HWY_SCALAR target takes a pair at a time.
  const size_t n = HWY_TARGET == HWY_SCALAR ? 2 : hn::Lanes(df);
  size_t j = 0;
  for (; j + n <= rotary_dim; j += n) RotateInterleavedVec(df, in + j, c + j, s + j, out + j);
  if (j == rotary_dim) return;
  // rotary_dim and n are even, so the tail holds whole pairs.
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  T stage[kMaxLanes] = {};
  const size_t bytes = (rotary_dim - j) * sizeof(T);
  std::memcpy(stage, in + j, bytes);
  RotateInterleavedVec(df, stage, c + j, s + j, stage);
  std::memcpy(out + j, stage, bytes);
}

// The positions of the kernel's tokens, in one stream or several.
struct PositionReader {
  const internal::RopeKernelArgs& args;
  size_t half;  // pairs that rotate
  bool multi = args.pair_stream != nullptr;

  int64_t At(int stream, int64_t t) const {
    return args.positions[stream * args.position_stream_stride + t * args.position_token_stride];
  }
  // Whether every pair may advance its angle from token `prev` to token t by a rotation: each
  // stream moved by 0 or 1 and at least one by 1 (moved[s] says which). With one stream, or
  // equal streams, this is 1-D RoPE's rule (the next position), so equal streams keep its bits.
  // Image tokens qualify along a row: time and row stay, the column moves by one.
  bool Advances(int64_t prev, int64_t t, bool* moved) const {
    bool any = false;
    for (int s = 0; s < args.num_streams; ++s) {
      const int64_t delta = At(s, t) - At(s, prev);
      if (delta != 0 && delta != 1) return false;
      moved[s] = delta == 1;
      any = any || moved[s];
    }
    return any;
  }
  // The step of each pair when not every stream moved: one step of its frequency (step_cos,
  // step_sin) where its stream moved, none (cos 1, sin 0: the state is kept exactly) elsewhere.
  // Zero-padded pairs take a step of frequency 0 either way.
  void PairSteps(const bool* moved, const double* step_cos, const double* step_sin, size_t pairs,
                 double* HWY_RESTRICT cos_out, double* HWY_RESTRICT sin_out) const {
    for (size_t i = 0; i < pairs; ++i) {
      const bool step = i >= half || moved[args.pair_stream[i]];
      cos_out[i] = step ? step_cos[i] : 1.0;
      sin_out[i] = step ? step_sin[i] : 0.0;
    }
  }
  // Pair i's position as a double (exact: positions are at most 2^32), zero-padded to `pairs`.
  void PairPositions(int64_t t, size_t pairs, double* HWY_RESTRICT out) const {
    double stream_pos[internal::kMaxRopeStreams];
    for (int s = 0; s < args.num_streams; ++s) stream_pos[s] = static_cast<double>(At(s, t));
    for (size_t i = 0; i < half; ++i) out[i] = stream_pos[args.pair_stream[i]];
    for (size_t i = half; i < pairs; ++i) out[i] = 0.0;
  }
};

template <typename T>
void RopeKernelT(const internal::RopeKernelArgs& args) {
  const hn::ScalableTag<float> df;
  const hn::ScalableTag<double> dd;
  const size_t rotary_dim = static_cast<size_t>(args.rotary_dim);
  const size_t half = rotary_dim / 2;
  const bool interleaved = args.layout == RopeLayout::kInterleaved;
  // Pairs rounded up to whole float vectors, so that table reads never need a tail.
  const size_t pairs = hwy::RoundUpTo(half, hn::Lanes(df));
  internal::Scratch<double> freq(2 * pairs);  // hi parts, then lo parts
  double* HWY_RESTRICT freq_hi = freq.get();
  double* HWY_RESTRICT freq_lo = freq.get() + pairs;
  for (size_t i = 0; i < pairs; ++i) {
    SplitFrequency(i < half ? args.inv_freq[i] : 0.0, freq_hi + i, freq_lo + i);
  }
  // cos and sin of one step of each frequency, exactly (position 1); a single token (a decode
  // step) never advances and skips them.
  internal::Scratch<double> step(2 * pairs);
  if (args.tokens > 1) {
    internal::Scratch<float> unused(4 * pairs);
    FillCosSin(dd, 1, nullptr, false, freq_hi, freq_lo, nullptr, nullptr, pairs, 1.0, 1.0, false,
               AngleState{step.get(), step.get() + pairs}, unused.get(), unused.get() + 2 * pairs);
  }
  const double* HWY_RESTRICT step_cos = step.get();
  const double* HWY_RESTRICT step_sin = step.get() + pairs;
  int64_t rows = 0;
  for (int n = 0; n < args.num_tensors; ++n) rows += args.tensors[n].num_heads;
  // Pass-through features: [0, rotary_offset) before the rotated block, [rotary_end, head_dim)
  // after it.
  const size_t rotary_offset = static_cast<size_t>(args.rotary_offset);
  const size_t rotary_end = rotary_offset + rotary_dim;
  const size_t lead_bytes = rotary_offset * sizeof(T);
  const size_t tail_bytes = (static_cast<size_t>(args.head_dim) - rotary_end) * sizeof(T);

  const PositionReader streams{args, half};

  // bfloat16 rows go through rope_bf16.h's AVX512-BF16 rotation where the CPU has it (its
  // narrowing is one instruction instead of eight, and it prefetches; see that header). Only the
  // AVX-512 targets take it, so that the AVX2 target, which the tests run on the same CPU, still
  // covers the portable narrowing; the bits are the same either way.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr bool kMayNarrowNatively = std::is_same_v<T, hwy::bfloat16_t>;
#else
  constexpr bool kMayNarrowNatively = false;
#endif
  const bool native_bf16 = kMayNarrowNatively && internal::HasBf16Narrowing();

  internal::ForRanges(
      args.tokens, args.tokens * rows * args.head_dim, [&](int64_t begin, int64_t end) {
        internal::Scratch<float> table(4 * pairs);  // cos, then sin; 2 * pairs each
        float* HWY_RESTRICT cos_table = table.get();
        float* HWY_RESTRICT sin_table = table.get() + 2 * pairs;
        internal::Scratch<double> state(2 * pairs);
        internal::Scratch<double> pair_pos(streams.multi ? pairs : 0);
        internal::Scratch<double> pair_step(streams.multi ? 2 * pairs : 0);  // cos, then sin
        int step_pattern = 0;  // the streams that moved, as bits, when pair_step was last filled
        int64_t advances = 0;
        for (int64_t t = begin; t < end; ++t) {
          bool moved[internal::kMaxRopeStreams] = {};  // filled only as far as Advances looked
          const bool advance =
              t > begin && streams.Advances(t - 1, t, moved) && advances < kMaxAdvances;
          advances = advance ? advances + 1 : 0;
          const double* token_step_cos = step_cos;
          const double* token_step_sin = step_sin;
          if (streams.multi) {
            // Pair positions only for exact angles; steps per pair only when some stream stayed.
            if (!advance) streams.PairPositions(t, pairs, pair_pos.get());
            int pattern = 0;  // the streams that moved, as bits (read only when advancing)
            for (int k = 0; advance && k < args.num_streams; ++k) pattern |= moved[k] ? 1 << k : 0;
            if (advance && pattern != (1 << args.num_streams) - 1) {
              // Along an image row the same streams move token after token: fill once per row.
              if (pattern != step_pattern) {
                streams.PairSteps(moved, step_cos, step_sin, pairs, pair_step.get(),
                                  pair_step.get() + pairs);
                step_pattern = pattern;
              }
              token_step_cos = pair_step.get();
              token_step_sin = pair_step.get() + pairs;
            }
          }
          FillCosSin(dd, streams.At(0, t), streams.multi ? pair_pos.get() : nullptr, advance,
                     freq_hi, freq_lo, token_step_cos, token_step_sin, pairs, args.cos_scale,
                     args.sin_scale, interleaved, AngleState{state.get(), state.get() + pairs},
                     cos_table, sin_table);
          for (int n = 0; n < args.num_tensors; ++n) {
            const internal::RopeTensor& x = args.tensors[n];
            const T* in_token = static_cast<const T*>(x.in) + t * x.in_token_stride;
            T* out_token = static_cast<T*>(x.out) + t * x.out_token_stride;
            if (native_bf16) {
              internal::RotateRowsBf16(interleaved, rotary_dim, cos_table, sin_table,
                                       reinterpret_cast<const uint16_t*>(in_token + rotary_offset),
                                       x.in_head_stride,
                                       reinterpret_cast<uint16_t*>(out_token + rotary_offset),
                                       x.out_head_stride, x.num_heads);
            }
            for (int64_t h = 0; h < x.num_heads; ++h) {
              const T* in = in_token + h * x.in_head_stride;
              T* out = out_token + h * x.out_head_stride;
              // native_bf16: rotated above, every head at once; only the pass-through features
              // are left.
              if (!native_bf16) {
                internal::PrefetchAhead(in + rotary_offset, rotary_dim * sizeof(T));
                if (interleaved) {
                  RotateRowInterleaved(df, in + rotary_offset, out + rotary_offset, rotary_dim,
                                       cos_table, sin_table);
                } else {
                  RotateRowHalfSplit(df, in + rotary_offset, out + rotary_offset, half, cos_table,
                                     sin_table);
                }
              }
              if (in != out) {
                if (lead_bytes != 0) std::memcpy(out, in, lead_bytes);
                if (tail_bytes != 0) std::memcpy(out + rotary_end, in + rotary_end, tail_bytes);
              }
            }
          }
        }
      });
}

// The per-target entry point: picks the storage type.
HWY_NOINLINE void RopeKernelImpl(const internal::RopeKernelArgs& args) {
  switch (args.storage) {
    case StorageType::kFloat32:
      return RopeKernelT<float>(args);
    case StorageType::kBFloat16:
      return RopeKernelT<hwy::bfloat16_t>(args);
    case StorageType::kFloat16:
      return RopeKernelT<hwy::float16_t>(args);
  }
}

HWY_NOINLINE const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ROPE_KERNELS_INL_H_
