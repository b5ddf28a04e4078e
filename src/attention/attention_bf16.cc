#include "attention_bf16.h"

#include "posenc/cpu.h"
#include "simd/cpu_features.h"

#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 10)
#define POSENC_HAVE_AVX512_BF16 1
#include <immintrin.h>
#else
#define POSENC_HAVE_AVX512_BF16 0
#endif

namespace posenc::internal {

#if POSENC_HAVE_AVX512_BF16

#define POSENC_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// GCC 12 reports its own unpack intrinsics' _mm512_undefined_ps() pass-through operand as
// maybe uninitialized (a false positive in avx512fintrin.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

bool HasBf16DotProducts() { return HasAvx512Bf16(); }

namespace {
int bf16_dot_override = -1;  // SetBf16DotProductsForTest: -1 none, else 0 or 1
}  // namespace

bool Bf16DotProductsPay() {
  static const bool pay =
      HasBf16DotProducts() && Bf16DotProductsDoubleFmas(ThisCpu().microarchitecture);
  return bf16_dot_override >= 0 ? bf16_dot_override == 1 && HasBf16DotProducts() : pay;
}

void SetBf16DotProductsForTest(int use) { bf16_dot_override = use; }

namespace {

// Lanes [0, count) set, for masked loads of a row's last partial vector.
POSENC_AVX512_BF16 inline __mmask32 FirstLanes32(size_t count) {
  return count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
}
POSENC_AVX512_BF16 inline __mmask16 FirstLanes16(size_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
}

POSENC_AVX512_BF16 inline __m512bh AsBf16(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// The four lane sums of a0..a3 times scale, at s[0], s[stride], s[2 stride], s[3 stride]: two
// rounds of interleaves leave every 128-bit block holding partial sums of a0..a3, then the
// blocks are added (the same reduction as the float32 path's SumOfLanes4).
POSENC_AVX512_BF16 inline void StoreSums4(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float scale,
                                          float* s, size_t stride) {
  const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512 sum = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))));
  const __m256 halves =
      _mm256_add_ps(_mm512_castps512_ps256(sum),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
  const __m128 total =
      _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(halves), _mm256_extractf128_ps(halves, 1)),
                 _mm_set1_ps(scale));
  alignas(16) float out[4];
  _mm_store_ps(out, total);
  s[0] = out[0];
  s[stride] = out[1];
  s[2 * stride] = out[2];
  s[3 * stride] = out[3];
}

// The weighted values for E consecutive vectors of the value rows, starting at float e0:
// 4 x E accumulators stay in registers across every key pair; pair(jp, e) returns the value
// pairs of keys 2jp and 2jp + 1 at floats [e, e + 16).
template <int E, typename Pair>
POSENC_AVX512_BF16 inline void WeightedValuesGroup(const uint32_t (&weights)[4][32],
                                                   size_t pair_count, const Pair& pair,
                                                   const float* correction, float* o,
                                                   size_t o_stride, size_t e0) {
  __m512 acc[4][E];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m512 c = _mm512_set1_ps(correction[r]);
#pragma GCC unroll 4
    for (int x = 0; x < E; ++x) {
      acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(o + r * o_stride + e0 + x * kFloatsPerVector), c);
    }
  }
  for (size_t jp = 0; jp < pair_count; ++jp) {
    __m512i v[E];
#pragma GCC unroll 4
    for (int x = 0; x < E; ++x) v[x] = pair(jp, e0 + x * kFloatsPerVector);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512bh w = AsBf16(_mm512_set1_epi32(static_cast<int>(weights[r][jp])));
#pragma GCC unroll 4
      for (int x = 0; x < E; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], w, AsBf16(v[x]));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < E; ++x) {
      _mm512_storeu_ps(o + r * o_stride + e0 + x * kFloatsPerVector, acc[r][x]);
    }
  }
}

// o_r = o_r correction_r + sum_j bf16(p_rj) v_j for the four rows (keys <= 64), the value pairs
// from pair(jp, e). The weights become bfloat16 pairs (p_2jp low, p_2jp+1 high), rounded to
// nearest even, 32 float32 weights to a vector of 16 pairs; masked loads read only `keys`.
template <typename Pair>
POSENC_AVX512_BF16 inline void WeightedValuesOfPairs(const float* p, size_t p_stride, size_t keys,
                                                     const Pair& pair, size_t value_stride,
                                                     const float* correction, float* o,
                                                     size_t o_stride) {
  alignas(64) uint32_t weights[4][32];
  const size_t pair_count = (keys + 1) / 2;
  for (size_t r = 0; r < 4; ++r) {
    const float* pr = p + r * p_stride;
    for (size_t j = 0; j < keys; j += 2 * kFloatsPerVector) {
      const size_t left = keys - j;
      const __m512 first = _mm512_maskz_loadu_ps(FirstLanes16(left), pr + j);
      const __m512 second =
          _mm512_maskz_loadu_ps(FirstLanes16(left > kFloatsPerVector ? left - kFloatsPerVector : 0),
                                pr + j + kFloatsPerVector);
      _mm512_store_si512(&weights[r][j / 2],
                         reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(second, first)));
    }
  }
  size_t e0 = 0;
  for (; e0 + 4 * kFloatsPerVector <= value_stride; e0 += 4 * kFloatsPerVector) {
    WeightedValuesGroup<4>(weights, pair_count, pair, correction, o, o_stride, e0);
  }
  for (; e0 < value_stride; e0 += kFloatsPerVector) {
    WeightedValuesGroup<1>(weights, pair_count, pair, correction, o, o_stride, e0);
  }
}

}  // namespace

POSENC_AVX512_BF16 void ScoresBf16(const uint16_t* q, size_t q_stride, const uint16_t* k,
                                   size_t k_stride, size_t keys, size_t dim, float scale, float* s,
                                   size_t s_stride) {
  const uint16_t* q0 = q;
  const uint16_t* q1 = q0 + q_stride;
  const uint16_t* q2 = q1 + q_stride;
  const uint16_t* q3 = q2 + q_stride;
  const size_t full = dim / kBf16PerVector * kBf16PerVector;
  const __mmask32 tail = FirstLanes32(dim - full);
  for (size_t j = 0; j < keys; ++j) {
    const uint16_t* kj = k + j * k_stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const auto add = [&](size_t d, __m512i kd) POSENC_AVX512_BF16 {
      const __m512bh kb = AsBf16(kd);
      a0 = _mm512_dpbf16_ps(a0, AsBf16(_mm512_loadu_si512(q0 + d)), kb);
      a1 = _mm512_dpbf16_ps(a1, AsBf16(_mm512_loadu_si512(q1 + d)), kb);
      a2 = _mm512_dpbf16_ps(a2, AsBf16(_mm512_loadu_si512(q2 + d)), kb);
      a3 = _mm512_dpbf16_ps(a3, AsBf16(_mm512_loadu_si512(q3 + d)), kb);
    };
    size_t d = 0;
    for (; d < full; d += kBf16PerVector) add(d, _mm512_loadu_si512(kj + d));
    if (d < dim) add(d, _mm512_maskz_loadu_epi16(tail, kj + d));
    StoreSums4(a0, a1, a2, a3, scale, s + j, s_stride);
  }
}

namespace {

// One register block of ScoreTileBf16: R rows, V vectors of 16 keys.
template <int R, int V>
POSENC_AVX512_BF16 inline void ScoreBlockBf16(const uint32_t* q, size_t q_stride,
                                              const uint32_t* k_pairs, size_t pairs, float scale,
                                              float* s, size_t s_stride) {
  __m512 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < V; ++x) acc[r][x] = _mm512_setzero_ps();
  }
  for (size_t dp = 0; dp < pairs; ++dp) {
    __m512bh k[V];
#pragma GCC unroll 4
    for (int x = 0; x < V; ++x) {
      k[x] = AsBf16(_mm512_loadu_si512(k_pairs + dp * kKeyPairRow + x * kFloatsPerVector));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh qr = AsBf16(_mm512_set1_epi32(static_cast<int>(q[r * q_stride + dp])));
#pragma GCC unroll 4
      for (int x = 0; x < V; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], qr, k[x]);
    }
  }
  const __m512 vscale = _mm512_set1_ps(scale);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < V; ++x) {
      _mm512_storeu_ps(s + r * s_stride + x * kFloatsPerVector, _mm512_mul_ps(acc[r][x], vscale));
    }
  }
}

template <int R>
POSENC_AVX512_BF16 inline void ScoreRowsBf16(const uint32_t* q, size_t q_stride,
                                             const uint32_t* k_pairs, size_t pairs, float scale,
                                             float* s, size_t s_stride) {
  for (size_t x = 0; x < kKeyPairRow; x += 4 * kFloatsPerVector) {
    ScoreBlockBf16<R, 4>(q, q_stride, k_pairs + x, pairs, scale, s + x, s_stride);
  }
}

}  // namespace

POSENC_AVX512_BF16 void ScoreTileBf16(const uint32_t* q, size_t q_stride, const uint32_t* k_pairs,
                                      size_t pairs, float scale, float* s, size_t s_stride,
                                      size_t rows) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    ScoreRowsBf16<4>(q + r * q_stride, q_stride, k_pairs, pairs, scale, s + r * s_stride, s_stride);
  }
  q += r * q_stride;
  s += r * s_stride;
  switch (rows - r) {
    case 1:
      ScoreRowsBf16<1>(q, q_stride, k_pairs, pairs, scale, s, s_stride);
      break;
    case 2:
      ScoreRowsBf16<2>(q, q_stride, k_pairs, pairs, scale, s, s_stride);
      break;
    case 3:
      ScoreRowsBf16<3>(q, q_stride, k_pairs, pairs, scale, s, s_stride);
      break;
    default:
      break;
  }
}

POSENC_AVX512_BF16 void TransposeKeyPairsBf16(const uint16_t* k, size_t k_stride, size_t keys,
                                              size_t dim, uint32_t* out) {
  const size_t pairs = (dim + 1) / 2;
  for (size_t dp = 0; dp < pairs; ++dp) {
    uint32_t* row = out + dp * kKeyPairRow;
    for (size_t j = 0; j < kKeyPairRow; ++j) {
      if (j >= keys) {
        row[j] = 0;
        continue;
      }
      const uint16_t* kj = k + j * k_stride;
      const uint32_t low = kj[2 * dp];
      const uint32_t high = 2 * dp + 1 < dim ? kj[2 * dp + 1] : 0;
      row[j] = low | high << 16;
    }
  }
}

POSENC_AVX512_BF16 void PairValueRowsBf16(const uint16_t* v, size_t v_stride, size_t keys,
                                          size_t value_dim, size_t value_stride, uint32_t* out) {
  for (size_t j = 0; j < keys; j += 2) {
    const uint16_t* low = v + j * v_stride;
    const uint16_t* high = j + 1 < keys ? low + v_stride : nullptr;
    uint32_t* row = out + j / 2 * value_stride;
    for (size_t e = 0; e < value_stride; e += kFloatsPerVector) {
      const __mmask16 lanes = FirstLanes16(value_dim > e ? value_dim - e : 0);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, low + e));
      const __m512i hi = high != nullptr
                             ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, high + e))
                             : _mm512_setzero_si512();
      _mm512_storeu_si512(row + e, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

POSENC_AVX512_BF16 void WeightedValuesBf16(const float* p, size_t p_stride, size_t keys,
                                           const uint32_t* pairs, size_t value_stride,
                                           const float* correction, float* o, size_t o_stride) {
  const auto pair = [pairs, value_stride](size_t jp, size_t e) POSENC_AVX512_BF16 {
    return _mm512_loadu_si512(pairs + jp * value_stride + e);
  };
  WeightedValuesOfPairs(p, p_stride, keys, pair, value_stride, correction, o, o_stride);
}

POSENC_AVX512_BF16 void WeightedValueRowsBf16(const float* p, size_t p_stride, size_t keys,
                                              const uint16_t* v, size_t v_stride, size_t value_dim,
                                              size_t value_stride, const float* correction,
                                              float* o, size_t o_stride) {
  // Lane 2i takes element i of the first row, lane 2i + 1 element i of the second (index 32+).
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const auto pair = [=](size_t jp, size_t e) POSENC_AVX512_BF16 {
    const __mmask16 lanes = FirstLanes16(value_dim > e ? value_dim - e : 0);
    const uint16_t* low = v + 2 * jp * v_stride + e;
    const __m256i first = _mm256_maskz_loadu_epi16(lanes, low);
    const __m256i second =
        _mm256_maskz_loadu_epi16(2 * jp + 1 < keys ? lanes : __mmask16{0}, low + v_stride);
    return _mm512_permutex2var_epi16(_mm512_castsi256_si512(first), interleave,
                                     _mm512_castsi256_si512(second));
  };
  WeightedValuesOfPairs(p, p_stride, keys, pair, value_stride, correction, o, o_stride);
}

#else  // no AVX512-BF16 code on this machine or compiler

bool HasBf16DotProducts() { return false; }
bool Bf16DotProductsPay() { return false; }
void SetBf16DotProductsForTest(int) {}
void ScoresBf16(const uint16_t*, size_t, const uint16_t*, size_t, size_t, size_t, float, float*,
                size_t) {}
void PairValueRowsBf16(const uint16_t*, size_t, size_t, size_t, size_t, uint32_t*) {}
void ScoreTileBf16(const uint32_t*, size_t, const uint32_t*, size_t, float, float*, size_t,
                   size_t) {}
void TransposeKeyPairsBf16(const uint16_t*, size_t, size_t, size_t, uint32_t*) {}
void WeightedValuesBf16(const float*, size_t, size_t, const uint32_t*, size_t, const float*, float*,
                        size_t) {}
void WeightedValueRowsBf16(const float*, size_t, size_t, const uint16_t*, size_t, size_t, size_t,
                           const float*, float*, size_t) {}

#endif

}  // namespace posenc::internal
