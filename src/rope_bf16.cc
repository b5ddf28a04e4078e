#include "rope_bf16.h"

#include "simd/cpu_features.h"
#include "simd/prefetch.h"

#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 10)
#define POSENC_ROPE_HAVE_AVX512_BF16 1
#include <immintrin.h>
#else
#define POSENC_ROPE_HAVE_AVX512_BF16 0
#endif

namespace posenc::internal {

#if POSENC_ROPE_HAVE_AVX512_BF16

#define POSENC_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// GCC 12 reports its own shift intrinsics' _mm512_undefined_epi32() pass-through operand as
// maybe uninitialized (a false positive in avx512fintrin.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

bool HasBf16Narrowing() { return HasAvx512Bf16(); }

namespace {

// bfloat16 (and float32) elements per step: one vcvtne2ps2bf16 narrows two float32 vectors.
constexpr size_t kStep = 32;

// Lanes [0, count) set, for the masked loads and stores of a row's last partial step (AVX-512
// masks suppress faults, so nothing past the row is touched).
POSENC_AVX512_BF16 inline __mmask16 FirstLanes16(size_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
}

// The lanes of one step: all of them, or the first `count` of a row's tail.
struct StepLanes {
  __mmask16 low, high;  // float32 lanes [0, 16) and [16, 32)
  __mmask32 all;        // bfloat16 lanes [0, 32)
};

POSENC_AVX512_BF16 inline StepLanes TailLanes(size_t count) {
  const __mmask16 low = FirstLanes16(count), high = FirstLanes16(count > 16 ? count - 16 : 0);
  return {low, high, static_cast<__mmask32>(low | (static_cast<uint32_t>(high) << 16))};
}

// 16 bfloat16 values at p as float32 (exact: the bits move to the upper half), as Highway's
// PromoteTo does; with kMasked only the lanes of `lanes` are read, the others are zero.
template <bool kMasked>
POSENC_AVX512_BF16 inline __m512 Load16(const uint16_t* p, __mmask16 lanes) {
  const __m256i h = kMasked ? _mm256_maskz_loadu_epi16(lanes, p)
                            : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <bool kMasked>
POSENC_AVX512_BF16 inline __m512 LoadTable16(const float* p, __mmask16 lanes) {
  return kMasked ? _mm512_maskz_loadu_ps(lanes, p) : _mm512_loadu_ps(p);
}

// The portable rounding, the integer steps of StoreF32 in simd_storage-inl.h (and of
// BFloat16::FromFloat), to 16 bfloat16: for vectors holding a denormal.
POSENC_AVX512_BF16 inline __m256i NarrowPortable16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet_nan));
}

// Lanes of v that hold a float32 denormal (exponent bits zero, mantissa not): integer tests, so
// that MXCSR's denormals-are-zero flag cannot hide one.
POSENC_AVX512_BF16 inline __mmask16 Denormals(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __mmask16 tiny = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_test_epi32_mask(tiny, bits, _mm512_set1_epi32(0x007FFFFF));
}

// low (bfloat16 lanes 0-15) and high (16-31) rounded to bfloat16, to nearest even.
// vcvtne2ps2bf16 takes its operands high first. It treats denormal inputs as zero, where the
// portable rounding keeps them (a float32 denormal may round to a bfloat16 denormal or to the
// smallest normal); such vectors take the portable steps. Under a flush-to-zero MXCSR the
// multiplies before this produce no denormals at all.
POSENC_AVX512_BF16 inline __m512i Narrow32(__m512 low, __m512 high) {
  if (__builtin_expect((Denormals(low) | Denormals(high)) != 0, 0)) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(NarrowPortable16(low)), NarrowPortable16(high),
                              1);
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
}

template <bool kMasked>
POSENC_AVX512_BF16 inline void Store32(uint16_t* p, __m512i bits, __mmask32 lanes) {
  if (kMasked) {
    _mm512_mask_storeu_epi16(p, lanes, bits);
  } else {
    _mm512_storeu_si512(p, bits);
  }
}

// One step of half-split pairs (x0[i], x1[i]) -> (y0[i], y1[i]), the float32 arithmetic of
// RotateHalfSplitVec in rope_kernels-inl.h operation for operation (so the same bits):
// y0 = a c - b s and y1 = a s + b c, each one multiply and one fused multiply-add. In place is
// fine: everything is loaded before anything is stored.
template <bool kMasked>
POSENC_AVX512_BF16 inline void HalfSplitStep(const uint16_t* x0, const uint16_t* x1, const float* c,
                                             const float* s, uint16_t* y0, uint16_t* y1,
                                             StepLanes lanes) {
  const __m512 a_lo = Load16<kMasked>(x0, lanes.low), a_hi = Load16<kMasked>(x0 + 16, lanes.high);
  const __m512 b_lo = Load16<kMasked>(x1, lanes.low), b_hi = Load16<kMasked>(x1 + 16, lanes.high);
  const __m512 c_lo = LoadTable16<kMasked>(c, lanes.low);
  const __m512 c_hi = LoadTable16<kMasked>(c + 16, lanes.high);
  const __m512 s_lo = LoadTable16<kMasked>(s, lanes.low);
  const __m512 s_hi = LoadTable16<kMasked>(s + 16, lanes.high);
  const __m512i first = Narrow32(_mm512_fmsub_ps(a_lo, c_lo, _mm512_mul_ps(b_lo, s_lo)),
                                 _mm512_fmsub_ps(a_hi, c_hi, _mm512_mul_ps(b_hi, s_hi)));
  const __m512i second = Narrow32(_mm512_fmadd_ps(a_lo, s_lo, _mm512_mul_ps(b_lo, c_lo)),
                                  _mm512_fmadd_ps(a_hi, s_hi, _mm512_mul_ps(b_hi, c_hi)));
  Store32<kMasked>(y0, first, lanes.all);
  Store32<kMasked>(y1, second, lanes.all);
}

// One step of interleaved pairs, as RotateInterleavedVec: y = x c + swap_pairs(x) s, with s
// carrying the signs (vpermilps swaps the two floats of each pair, as Highway's Reverse2).
template <bool kMasked>
POSENC_AVX512_BF16 inline void InterleavedStep(const uint16_t* x, const float* c, const float* s,
                                               uint16_t* y, StepLanes lanes) {
  const __m512 lo = Load16<kMasked>(x, lanes.low), hi = Load16<kMasked>(x + 16, lanes.high);
  const __m512 swapped_lo = _mm512_permute_ps(lo, _MM_SHUFFLE(2, 3, 0, 1));
  const __m512 swapped_hi = _mm512_permute_ps(hi, _MM_SHUFFLE(2, 3, 0, 1));
  const __m512i y32 = Narrow32(
      _mm512_fmadd_ps(lo, LoadTable16<kMasked>(c, lanes.low),
                      _mm512_mul_ps(swapped_lo, LoadTable16<kMasked>(s, lanes.low))),
      _mm512_fmadd_ps(hi, LoadTable16<kMasked>(c + 16, lanes.high),
                      _mm512_mul_ps(swapped_hi, LoadTable16<kMasked>(s + 16, lanes.high))));
  Store32<kMasked>(y, y32, lanes.all);
}

}  // namespace

POSENC_AVX512_BF16 void NarrowToBf16Native(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    Store32<false>(out + i, Narrow32(_mm512_loadu_ps(in + i), _mm512_loadu_ps(in + i + 16)),
                   ~__mmask32{0});
  }
  if (i == n) return;
  const StepLanes lanes = TailLanes(n - i);
  Store32<true>(
      out + i,
      Narrow32(LoadTable16<true>(in + i, lanes.low), LoadTable16<true>(in + i + 16, lanes.high)),
      lanes.all);
}

POSENC_AVX512_BF16 void RotateRowsBf16(bool interleaved, size_t rotary_dim, const float* cos_table,
                                       const float* sin_table, const uint16_t* in,
                                       ptrdiff_t in_stride, uint16_t* out, ptrdiff_t out_stride,
                                       int64_t rows) {
  const StepLanes full = TailLanes(kStep);
  if (interleaved) {
    const size_t whole = rotary_dim / kStep * kStep;
    const StepLanes tail = TailLanes(rotary_dim - whole);
    for (int64_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
      PrefetchAhead(in, rotary_dim * sizeof(uint16_t));
      for (size_t j = 0; j < whole; j += kStep) {
        InterleavedStep<false>(in + j, cos_table + j, sin_table + j, out + j, full);
      }
      if (whole != rotary_dim) {
        InterleavedStep<true>(in + whole, cos_table + whole, sin_table + whole, out + whole, tail);
      }
    }
    return;
  }
  const size_t half = rotary_dim / 2;
  const size_t whole = half / kStep * kStep;
  const StepLanes tail = TailLanes(half - whole);
  for (int64_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    PrefetchAhead(in, rotary_dim * sizeof(uint16_t));
    for (size_t i = 0; i < whole; i += kStep) {
      HalfSplitStep<false>(in + i, in + half + i, cos_table + i, sin_table + i, out + i,
                           out + half + i, full);
    }
    if (whole != half) {
      HalfSplitStep<true>(in + whole, in + half + whole, cos_table + whole, sin_table + whole,
                          out + whole, out + half + whole, tail);
    }
  }
}

#else  // no AVX512-BF16 code on this machine or compiler

bool HasBf16Narrowing() { return false; }
void NarrowToBf16Native(const float*, size_t, uint16_t*) {}
void RotateRowsBf16(bool, size_t, const float*, const float*, const uint16_t*, ptrdiff_t, uint16_t*,
                    ptrdiff_t, int64_t) {}

#endif

}  // namespace posenc::internal
