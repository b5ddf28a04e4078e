// The fused attention kernel body, compiled once per Highway target by attention_kernels.cc.
//
// Flash attention (Dao et al. 2022, "FlashAttention", arXiv:2205.14135) on the CPU: the
// [q_tokens, kv_tokens] score matrix never exists. A work item is one key/value head g and one
// query tile of kQueryTile rows, a row being a (query token, query head reading g) pair, so that
// grouped query heads share every key and value they read. Keys stream through in tiles:
//
//   query tile  32 rows x head_dim     (times scale, widened to float32, zero-padded to vectors)
//   key tile    64 keys x head_dim     value tile 64 keys x value_dim   (widened, padded)
//   scores       4 x 64                output accumulator 32 x value_dim, running max m, sum l
//
// A key and value tile is made ready once and then used by the whole query tile, four rows at a
// time (a row block: four score accumulators, then four output accumulators, in registers).
// Value rows are always packed (widened, padded) into the tile; key rows too, except float32
// rows of whole vectors, which are scored where they lie while the next tile's rows are
// prefetched (rows one token apart are pages apart, where the hardware prefetchers stop).
// Each key tile goes through three passes, for every row block:
//   (1) scores: s_j = (scale c q) . k_j (MulAdd over head_dim, then the four rows' sums of lanes
//       reduced together; c the row's query scale), plus the ALiBi bias slope (kpos_j - anchor)
//       or T5's bias at kpos_j - qpos, and -inf where a mask hides key j: causal, the sliding
//       window, chunks and a minimum distance together leave each row one interval [lo, hi]
//       of key positions;
//   (2) online max and sum: m' = max(m, max_j s_j), p_j = exp(s_j - m'),
//       l' = l exp(m - m') + sum_j p_j;
//   (3) weighted values: o' = o exp(m - m') + sum_j p_j v_j.
// Tiles whose keys are all hidden from the tile's (or row block's) queries, outside every row's
// interval (ahead of them under causal, behind them by at least the window, in another chunk),
// are skipped; only tiles that straddle a mask edge pay for the per-key mask. After the last
// tile, out = o / l, or zeros when no key was visible. Memory beyond the inputs is one set of
// tiles per thread (a query tile per KV head in decode) and the split-K partials.
//
// Decode (a single query tile per KV head): a work item takes every KV head of its keys and
// reads the keys and values where they lie, token by token, every head of a token before the
// next token (one token's heads are adjacent in a KV cache), so that it streams the cache front
// to back instead of touching one row per page; the query rows of all heads lie side by side.
//
// bfloat16 inputs on CPUs with AVX512-BF16 (attention_bf16.h): the scores come from bfloat16
// dot products (vdpbf16ps, key rows read in place), and the weighted values from the weights
// rounded to bfloat16 times value rows paired two keys at a time, twice the multiply-adds per
// instruction of float32; elsewhere bfloat16 tiles are widened to float32 and run the float32
// loops.
//
// Split-K (Flash-Decoding, Dao et al. 2023): when there are few (KV head, query tile) items, as
// in decode, the keys are cut into chunks that run as separate work items, each with its own
// m, l and o; a second pass merges the chunks of each row by the log-sum-exp rule,
// out = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c with M = max_c m_c. Its partials take
// chunks x rows x value_dim floats, which only few items allow.
//
// T5's bias depends only on d = kpos_j - qpos: attention.cc tabulates it per head for every d up
// to where the buckets stop changing (plus a key tile's reach), so a row adds it to a tile of
// consecutive keys with one unaligned load per vector, as a constant when the whole tile lies in
// the last bucket, and key by key from the table otherwise. No [queries, keys] buffer exists.
//
// ALiBi: -slope (qpos - kpos_j) = slope (kpos_j - anchor) - slope (qpos - anchor). The second
// term is the same for every key of a row, and softmax ignores it. The anchor is qpos clamped to
// the range of key positions, so that the float distance kpos_j - anchor is small, and exact, for
// the keys that carry weight even at positions in the millions (float32 holds integers up to 2^24
// exactly; the distances are formed in int64 relative to the tile's smallest key position).

#if defined(POSENC_ATTENTION_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_KERNELS_INL_H_
#undef POSENC_ATTENTION_KERNELS_INL_H_
#else
#define POSENC_ATTENTION_KERNELS_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_backward_kernels.h"
#include "attention_bf16.h"
#include "attention_kernels.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernel_threads.h"
#include "relative_bias_internal.h"
#include "simd_storage-inl.h"
#include "tile_gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// The tile shape. Four rows share each key vector load (the four accumulators are named below,
// as scalable vectors cannot live in arrays). 32 query rows amortise widening each key and value
// tile, which comes from L3 or memory, over eight row blocks; 64 keys keep a key and a value tile
// of head_dim 128 within 64 KiB.
constexpr size_t kRowBlock = 4;
constexpr size_t kQueryTile = 32;
constexpr size_t kKeyTile = 64;

// The targets whose vectors match attention_bf16.h's (AVX-512, 16 floats), where the bfloat16
// kernel may hand its arithmetic to AVX512-BF16 when the CPU has it.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kBf16DotTarget = true;
#else
constexpr bool kBf16DotTarget = false;
#endif

// Split-K: decode has one query tile per KV head, so 8 KV heads make 8 work items, too few to
// balance over threads (and one KV head would leave all but one thread idle). Key chunks of at
// least kMinChunkKeys keys keep the merge negligible; the count does not depend on the number of
// threads, so neither do the results.
constexpr int64_t kMinItems = 16;
constexpr int64_t kMinChunkKeys = 256;
constexpr int64_t kMaxKeyChunks = 64;  // bounds MergePartials' stack arrays

// The last partial vector of an input row, `count` elements at `in`, widened to float32 and
// zero-padded. It goes through a zeroed stack buffer: reading past the row could fault, and
// could pick up NaN from a neighbouring row that 0 * NaN would spread.
template <class DF, typename T>
HWY_INLINE hn::Vec<DF> LoadPartialF32(DF df, const T* HWY_RESTRICT in, size_t count) {
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  T stage[kMaxLanes] = {};
  std::memcpy(stage, in, count * sizeof(T));
  return LoadF32(df, stage);
}

// Writes `dim` elements of `in`, widened to float32 and multiplied by `mul`, to `out`, zero-padded
// to whole vectors so that the dot products and the value loop need no tail.
template <class DF, typename T>
HWY_INLINE void PackRow(DF df, const T* HWY_RESTRICT in, size_t dim, float mul,
                        float* HWY_RESTRICT out) {
  const size_t n = hn::Lanes(df);
  const auto vmul = hn::Set(df, mul);
  size_t i = 0;
  for (; i + n <= dim; i += n) hn::StoreU(hn::Mul(LoadF32(df, in + i), vmul), df, out + i);
  if (i < dim) hn::StoreU(hn::Mul(LoadPartialF32(df, in + i, dim - i), vmul), df, out + i);
}

// The per-thread tiles, float32, each row padded to whole vectors.
struct Tiles {
  bool bf16_dot;        // the arithmetic of the call: bfloat16 inputs multiplied by AVX512-BF16
                        // (attention_bf16.h; q holds bfloat16 rows), else float32 FMAs
  size_t dim;           // head_dim rounded up to whole vectors
  size_t value_dim;     // value_dim rounded up to whole vectors
  size_t score_stride;  // kKeyTile rounded up to whole vectors
  float* scores;        // [rows, score_stride]: scores, then weights p (prefill: the query
                        // tile's rows; decode: every row of every head)
  float* key_offset;    // [score_stride]: key position - the tile's smallest key position
};

// Prefetches `bytes` bytes at p, one cache line at a time.
HWY_INLINE void PrefetchBytes(const void* p, size_t bytes) {
  constexpr size_t kLine = 64;
  const char* line = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += kLine) hwy::Prefetch(line + i);
}

// max(a, b), NaN when either is NaN (std::max and Highway's Max may return the other operand).
inline float MaxKeepingNaN(float a, float b) { return a > b || std::isnan(a) ? a : b; }

// The running state of one query row.
struct RowState {
  int64_t pos = 0;
  // The key positions the row sees, [lo, hi]: every mask (causal, window, chunk) leaves one
  // interval, so that one pair of comparisons masks a key and skips a tile.
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
  int64_t head = 0;
  int64_t anchor = 0;  // ALiBi distances are measured from here (see the top of the file)
  float slope = 0.0f;
  float score_mul = 1.0f;       // AVX512-BF16 with query scales: the row's scale, applied here
  const float* bias = nullptr;  // T5: the head's bias at distance 0 (AttentionKernelArgs)
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  float correction = 1.0f;  // exp(old max - new max) of the current key tile
};

// Writes the lane sums of a0..a3 to s[0], s[stride], s[2 stride] and s[3 stride]. Two rounds of
// interleaves and adds leave every 128-bit block holding partial sums of a0..a3 in its lanes
// 0..3, and the blocks are then added: about a third of the shuffles of four SumOfLanes, which
// on AVX-512 cost as much as the score's eight FMAs.
template <class DF, class V>
HWY_INLINE void SumOfLanes4(DF df, V a0, V a1, V a2, V a3, float* HWY_RESTRICT s, size_t stride) {
#if HWY_TARGET == HWY_SCALAR
  (void)df;
  s[0] = hn::GetLane(a0);
  s[stride] = hn::GetLane(a1);
  s[2 * stride] = hn::GetLane(a2);
  s[3 * stride] = hn::GetLane(a3);
#else
  const hn::Repartition<uint64_t, DF> du64;
  // Per block: [a0 0+2, a1 0+2, a0 1+3, a1 1+3], and the same for a2, a3.
  const auto t01 =
      hn::BitCast(du64, hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1)));
  const auto t23 =
      hn::BitCast(du64, hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3)));
  // Per block: [a0, a1, a2, a3], each the sum of its four lanes of the block.
  const auto sum = hn::Add(hn::BitCast(df, hn::InterleaveLower(du64, t01, t23)),
                           hn::BitCast(df, hn::InterleaveUpper(du64, t01, t23)));
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  float lanes[kMaxLanes];
  hn::StoreU(sum, df, lanes);
  const hn::CappedTag<float, 4> d4;
  auto total = hn::LoadU(d4, lanes);
  for (size_t i = 4; i < hn::Lanes(df); i += 4) total = hn::Add(total, hn::LoadU(d4, lanes + i));
  float out[4];
  hn::StoreU(total, d4, out);
  s[0] = out[0];
  s[stride] = out[1];
  s[2 * stride] = out[2];
  s[3 * stride] = out[3];
#endif
}

// Pass (1) for one key: s[r stride] = q_r . k for the four rows of the block at q (padded rows,
// `q_stride` floats apart), k an input or tile row of `dim` elements.
template <class DF, typename T>
HWY_INLINE void ScoreKey(DF df, const float* HWY_RESTRICT q, size_t q_stride,
                         const T* HWY_RESTRICT k, size_t dim, float* HWY_RESTRICT s,
                         size_t stride) {
  static_assert(kRowBlock == 4, "one named accumulator per row");
  const size_t n = hn::Lanes(df);
  const float* HWY_RESTRICT q0 = q;
  const float* HWY_RESTRICT q1 = q0 + q_stride;
  const float* HWY_RESTRICT q2 = q1 + q_stride;
  const float* HWY_RESTRICT q3 = q2 + q_stride;
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  const auto add = [&](size_t d, hn::Vec<DF> kd) HWY_ATTR {
    a0 = hn::MulAdd(hn::LoadU(df, q0 + d), kd, a0);
    a1 = hn::MulAdd(hn::LoadU(df, q1 + d), kd, a1);
    a2 = hn::MulAdd(hn::LoadU(df, q2 + d), kd, a2);
    a3 = hn::MulAdd(hn::LoadU(df, q3 + d), kd, a3);
  };
  size_t d = 0;
  for (; d + n <= dim; d += n) add(d, LoadF32(df, k + d));
  if (d < dim) add(d, LoadPartialF32(df, k + d, dim - d));
  SumOfLanes4(df, a0, a1, a2, a3, s, stride);
}

// The key positions of a key tile.
struct TileKeys {
  const int64_t* pos;
  size_t keys;
  int64_t min, max;
  bool contiguous;  // pos[j] = min + j (asked only with the T5 bias)
};

inline TileKeys KeysOf(const internal::AttentionKernelArgs& a, int64_t key0, size_t keys) {
  const int64_t* pos = a.key_pos + key0;
  const auto [min_it, max_it] = std::minmax_element(pos, pos + keys);
  TileKeys tk{pos, keys, *min_it, *max_it, false};
  if (a.relative_bias != nullptr) {
    tk.contiguous = true;
    for (size_t j = 0; j < keys; ++j) tk.contiguous &= pos[j] == tk.min + static_cast<int64_t>(j);
  }
  return tk;
}

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
HWY_INLINE void AddRelativeBias(DF df, const internal::AttentionKernelArgs& a, const Tiles& t,
                                float* HWY_RESTRICT s, const TileKeys& tk, const RowState& row) {
  const size_t n = hn::Lanes(df);
  const int64_t extent = a.relative_extent;
  const int64_t d_min = tk.min - row.pos, d_max = tk.max - row.pos;
  const auto add_constant = [&](float bias) HWY_ATTR {
    const auto vbias = hn::Set(df, bias);
    for (size_t j = 0; j < t.score_stride; j += n) {
      hn::StoreU(hn::Add(hn::LoadU(df, s + j), vbias), df, s + j);
    }
  };
  if (a.relative_far == nullptr && d_max <= -extent) return add_constant(row.bias[-extent]);
  if (a.relative_far == nullptr && d_min >= extent) return add_constant(row.bias[extent]);
  if (tk.contiguous && d_min >= -extent &&
      d_min + static_cast<int64_t>(t.score_stride) - 1 <= extent) {
    // Past `keys` the scores are -inf, which the bias leaves -inf.
    const float* bias = row.bias + d_min;
    for (size_t j = 0; j < t.score_stride; j += n) {
      hn::StoreU(hn::Add(hn::LoadU(df, s + j), hn::LoadU(df, bias + j)), df, s + j);
    }
    return;
  }
  for (size_t j = 0; j < tk.keys; ++j) s[j] += RelativeBiasAt(a, row, tk.pos[j] - row.pos);
}

// Passes (1), the query scale, bias and mask, and (2) for one row: turns its scores into
// weights p and updates its running max and sum.
template <class DF>
HWY_INLINE void OnlineSoftmaxRow(DF df, const internal::AttentionKernelArgs& a, const Tiles& t,
                                 float* HWY_RESTRICT s, const TileKeys& tk, RowState& row) {
  const size_t n = hn::Lanes(df);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t* key_pos = tk.pos;
  const size_t keys = tk.keys;
  const int64_t key_min = tk.min;
  std::fill(s + keys, s + t.score_stride, kNegInf);  // keys past the end of a short last tile
  if (row.score_mul != 1.0f) {
    for (size_t j = 0; j < keys; ++j) s[j] *= row.score_mul;
  }
  if (a.alibi_slopes != nullptr) {
    const auto slope = hn::Set(df, row.slope);
    const auto anchor = hn::Set(df, static_cast<float>(row.anchor - key_min));
    for (size_t j = 0; j < t.score_stride; j += n) {
      const auto distance = hn::Sub(hn::LoadU(df, t.key_offset + j), anchor);
      hn::StoreU(hn::MulAdd(slope, distance, hn::LoadU(df, s + j)), df, s + j);
    }
  }
  if (row.bias != nullptr) AddRelativeBias(df, a, t, s, tk, row);
  // Masks: only tiles that straddle an edge of the row's interval pay for this.
  if (key_min < row.lo || tk.max > row.hi) {
    for (size_t j = 0; j < keys; ++j) {
      if (key_pos[j] < row.lo || key_pos[j] > row.hi) s[j] = kNegInf;
    }
  }

  // NaN: a NaN score (a NaN in q or k, or inf - inf) must make the row NaN, as softmax does in
  // the math and in PyTorch. Max may drop NaN (x86 keeps its second operand), so NaN is carried
  // by the weights instead: Exp turns NaN into 0, and the blend below restores it, which makes
  // the sum and the output NaN. A max that drops every NaN stays finite or -inf; -inf is checked.
  auto vmax = hn::Set(df, kNegInf);
  for (size_t j = 0; j < t.score_stride; j += n) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  float new_max = MaxKeepingNaN(row.max, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  if (new_max == kNegInf) {
    if (std::none_of(s, s + keys, [](float x) { return std::isnan(x); })) {
      // nothing visible yet: all weights 0, state unchanged
      std::fill(s, s + t.score_stride, 0.0f);
      row.correction = 1.0f;
      return;
    }
    new_max = std::numeric_limits<float>::quiet_NaN();
  }
  row.correction = std::exp(row.max - new_max);  // exp(-inf) = 0 on the first visible tile
  row.max = new_max;
  const auto vnew_max = hn::Set(df, new_max);
  auto vsum = hn::Zero(df);
  for (size_t j = 0; j < t.score_stride; j += n) {
    const auto x = hn::Sub(hn::LoadU(df, s + j), vnew_max);
    const auto p = hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(df, x));  // exp(-inf) = 0
    vsum = hn::Add(vsum, p);
    hn::StoreU(p, df, s + j);
  }
  row.sum = row.sum * row.correction + hn::GetLane(hn::SumOfLanes(df, vsum));
}

// Pass (3): o_r = o_r correction_r + sum_j p_rj v_j for the four rows of the block at o (rows
// o_stride floats apart, padded to whole vectors), the weights of row r at p + r p_stride, value
// row j at v + j v_stride (value_dim elements, float32 or bfloat16), one vector of value_dim at
// a time so that the four accumulators stay in registers across all `keys` keys. Not inlined:
// inlined into the bfloat16 instantiation of the caller, its four weight pointers were spilled
// to the stack and reloaded on every key (bfloat16 prefill 20% slower); on its own it keeps
// them in registers, and the call costs nothing per row block.
template <class DF, typename T>
HWY_NOINLINE void WeightedValues(DF df, const float* HWY_RESTRICT p, size_t p_stride,
                                 const T* HWY_RESTRICT v, size_t v_stride, size_t keys,
                                 size_t value_dim, const float* correction, float* HWY_RESTRICT o,
                                 size_t o_stride) {
  static_assert(kRowBlock == 4, "one named accumulator per row");
  const size_t n = hn::Lanes(df);
  const float* HWY_RESTRICT p0 = p;
  const float* HWY_RESTRICT p1 = p0 + p_stride;
  const float* HWY_RESTRICT p2 = p1 + p_stride;
  const float* HWY_RESTRICT p3 = p2 + p_stride;
  float* HWY_RESTRICT o0 = o;
  float* HWY_RESTRICT o1 = o0 + o_stride;
  float* HWY_RESTRICT o2 = o1 + o_stride;
  float* HWY_RESTRICT o3 = o2 + o_stride;
  const auto c0 = hn::Set(df, correction[0]), c1 = hn::Set(df, correction[1]);
  const auto c2 = hn::Set(df, correction[2]), c3 = hn::Set(df, correction[3]);
  const auto accumulate = [&](size_t e, auto load) HWY_ATTR {
    auto a0 = hn::Mul(hn::LoadU(df, o0 + e), c0), a1 = hn::Mul(hn::LoadU(df, o1 + e), c1);
    auto a2 = hn::Mul(hn::LoadU(df, o2 + e), c2), a3 = hn::Mul(hn::LoadU(df, o3 + e), c3);
    for (size_t j = 0; j < keys; ++j) {
      const auto vj = load(v + j * v_stride + e);
      a0 = hn::MulAdd(hn::Set(df, p0[j]), vj, a0);
      a1 = hn::MulAdd(hn::Set(df, p1[j]), vj, a1);
      a2 = hn::MulAdd(hn::Set(df, p2[j]), vj, a2);
      a3 = hn::MulAdd(hn::Set(df, p3[j]), vj, a3);
    }
    hn::StoreU(a0, df, o0 + e);
    hn::StoreU(a1, df, o1 + e);
    hn::StoreU(a2, df, o2 + e);
    hn::StoreU(a3, df, o3 + e);
  };
  size_t e = 0;
  for (; e + n <= value_dim; e += n) {
    accumulate(e, [df](const T* row) HWY_ATTR { return LoadF32(df, row); });
  }
  if (e < value_dim) {
    const size_t count = value_dim - e;
    accumulate(e, [df, count](const T* row) HWY_ATTR { return LoadPartialF32(df, row, count); });
  }
}

// A value element as float32, for the scalar paths below.
inline float ValueF32(float x) { return x; }
inline float ValueF32(hwy::bfloat16_t x) { return hwy::F32FromBF16(x); }

// Whether key j at key_pos is hidden from `row` by a mask.
inline bool Hidden(const RowState& row, int64_t key_pos) {
  return key_pos < row.lo || key_pos > row.hi;
}

// Whether any of the `keys` value rows at v (v_stride apart, value_dim elements) holds inf or
// NaN. Asked only for tiles that straddle a mask edge.
template <typename T>
bool AnyNonFinite(const T* v, size_t v_stride, size_t keys, size_t value_dim) {
  for (size_t j = 0; j < keys; ++j) {
    for (size_t e = 0; e < value_dim; ++e) {
      if (!std::isfinite(ValueF32(v[j * v_stride + e]))) return true;
    }
  }
  return false;
}

// Pass (3) that skips hidden keys, for a row block that straddles a mask edge in a tile whose
// values hold inf or NaN: there the fast pass would add 0 * inf = NaN from a key the row never
// sees, which the math (a sum over visible keys) does not. Visible keys still add p v, so a
// non-finite value the row does see reaches it even with a weight that underflowed to 0.
// Plain and scalar: only hostile input comes here.
template <typename T>
void WeightedVisibleValues(const float* p, size_t p_stride, const T* v, size_t v_stride,
                           size_t keys, size_t value_dim, const int64_t* key_pos,
                           const RowState* rows, float* o, size_t o_stride) {
  for (size_t r = 0; r < kRowBlock; ++r) {
    float* o_r = o + r * o_stride;
    for (size_t e = 0; e < value_dim; ++e) o_r[e] *= rows[r].correction;
    for (size_t j = 0; j < keys; ++j) {
      if (Hidden(rows[r], key_pos[j])) continue;
      const float weight = p[r * p_stride + j];
      for (size_t e = 0; e < value_dim; ++e) o_r[e] += weight * ValueF32(v[j * v_stride + e]);
    }
  }
}

// The last step, the log-sum-exp merge of `count` partial results of one row over disjoint key
// ranges, partial c being (o_c, m_c, l_c) = (o + c stride, max[c stride], sum[c stride]):
// dst = sum_c w_c o_c / sum_c w_c l_c with w_c = exp(m_c - max_c m_c). One partial is plain
// normalisation, out = o / l. A row that saw no visible key (every l_c = 0) gets zeros, not NaN;
// a row with a NaN max or sum (a NaN score) gets NaN.
// Writes value_dim floats of dst (the padding of o stays in scratch), and with `lse` the row's
// log-sum-exp, max_c m_c + log(sum_c w_c l_c) (-inf when nothing was visible).
template <class DF>
HWY_INLINE void MergePartials(DF df, const float* HWY_RESTRICT o, const float* HWY_RESTRICT max,
                              const float* HWY_RESTRICT sum, size_t stride, size_t count,
                              size_t value_dim, float* HWY_RESTRICT dst, float* HWY_RESTRICT lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  HWY_DASSERT(count <= static_cast<size_t>(kMaxKeyChunks));
  float global_max = kNegInf;
  for (size_t c = 0; c < count; ++c) global_max = MaxKeepingNaN(global_max, max[c * stride]);
  float weight[kMaxKeyChunks];
  float total = 0.0f;
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

// One (KV head g, query tile) between key tiles: query rows [first_row, first_row + kQueryTile)
// of g, where row m is query token m / group and query head g * group + m % group. A short last
// row block repeats its last row (computed, not stored) so that the passes never branch on the
// row count.
struct QueryTile {
  int64_t g = 0;
  int64_t first_row = 0;
  size_t valid_rows = 0;
  size_t blocks = 0;
  // The rows' visible intervals [lo, hi] (RowState), bounded over the tile and each row block:
  // keys above the largest hi or below the smallest lo are hidden from every row (a tile to
  // skip); keys within the smallest hi and the largest lo are visible to every row.
  int64_t max_hi = 0;
  int64_t min_lo = 0;
  int64_t block_max_hi[kQueryTile / kRowBlock] = {};
  int64_t block_min_hi[kQueryTile / kRowBlock] = {};
  int64_t block_max_lo[kQueryTile / kRowBlock] = {};
  int64_t block_min_lo[kQueryTile / kRowBlock] = {};
  RowState rows[kQueryTile];
  float* q = nullptr;    // [kQueryTile, dim], times scale
  float* out = nullptr;  // [kQueryTile, value_dim]: the unnormalised output o
};

// The scale ScoresBf16 applies: with query scales, each row's own scale is applied after it
// (RowState::score_mul).
inline float Bf16ScoreScale(const internal::AttentionKernelArgs& a) {
  return a.query_scales != nullptr ? 1.0f : a.scale;
}

// The bfloat16 query rows' stride in elements when t.bf16_dot: the float32 row's bytes.
inline size_t BFloat16RowStride(const Tiles& t) { return 2 * t.dim; }

// The bfloat16 query rows of row block b when t.bf16_dot.
inline const uint16_t* QueryBits(const Tiles& t, const QueryTile& qt, size_t b) {
  return reinterpret_cast<const uint16_t*>(qt.q + b * kRowBlock * t.dim);
}

// bfloat16 rows as the bits attention_bf16.h takes (float32 rows never go there).
inline const uint16_t* Bits(const hwy::bfloat16_t* p) {
  return reinterpret_cast<const uint16_t*>(p);
}
inline const uint16_t* Bits(const float*) { return nullptr; }

// Packs the query rows of qt (g, first_row, q and out set) and resets their state.
template <typename T>
void BeginQueryTile(const internal::AttentionKernelArgs& a, const Tiles& t, int64_t key_min_all,
                    int64_t key_max_all, QueryTile& qt) {
  const hn::ScalableTag<float> df;
  const int64_t group = a.num_heads / a.num_kv_heads;
  qt.valid_rows = static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(kQueryTile), a.q_tokens * group - qt.first_row));
  qt.blocks = hwy::DivCeil(qt.valid_rows, kRowBlock);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr size_t kBlocks = kQueryTile / kRowBlock;
  std::fill(qt.block_max_hi, qt.block_max_hi + kBlocks, kMin);
  std::fill(qt.block_min_hi, qt.block_min_hi + kBlocks, kMax);
  std::fill(qt.block_max_lo, qt.block_max_lo + kBlocks, kMin);
  std::fill(qt.block_min_lo, qt.block_min_lo + kBlocks, kMax);
  for (size_t r = 0; r < qt.blocks * kRowBlock; ++r) {
    const int64_t m = qt.first_row + static_cast<int64_t>(std::min(r, qt.valid_rows - 1));
    const int64_t token = m / group, head = qt.g * group + m % group;
    const T* q =
        static_cast<const T*>(a.q.data) + token * a.q.token_stride + head * a.q.head_stride;
    if (t.bf16_dot) {  // unscaled bfloat16 bits, zero-padded (ScoresBf16 applies the scale)
      uint16_t* row = reinterpret_cast<uint16_t*>(qt.q + r * t.dim);
      std::memcpy(row, q, static_cast<size_t>(a.head_dim) * sizeof(T));
      std::fill(row + a.head_dim, row + BFloat16RowStride(t), uint16_t{0});
    } else {
      PackRow(df, q, static_cast<size_t>(a.head_dim),
              a.query_scales != nullptr ? a.query_scales[token] : a.scale, qt.q + r * t.dim);
    }
    std::fill(qt.out + r * t.value_dim, qt.out + (r + 1) * t.value_dim, 0.0f);
    RowState& row = qt.rows[r];
    row = RowState();
    row.pos = a.query_pos[token];
    row.head = head;
    // Positions are in [0, 2^32] and window, chunk_size, min_distance in [1, 2^32] where used:
    // no overflow.
    if (a.causal) row.hi = row.pos;
    if (a.window > 0) row.lo = row.pos - a.window + 1;
    if (a.chunk_size > 0) {
      const int64_t chunk_begin = row.pos - row.pos % a.chunk_size;
      row.lo = std::max(row.lo, chunk_begin);
      row.hi = std::min(row.hi, chunk_begin + (a.chunk_size - 1));
    }
    if (a.min_distance > 0) row.hi = std::min(row.hi, row.pos - a.min_distance);
    row.anchor = internal::AlibiAnchor(row.pos, key_min_all, key_max_all);
    row.slope = a.alibi_slopes != nullptr ? a.alibi_slopes[head] : 0.0f;
    if (t.bf16_dot && a.query_scales != nullptr) row.score_mul = a.query_scales[token];
    if (a.relative_bias != nullptr) {
      row.bias = a.relative_bias + head * (2 * a.relative_extent + 1) + a.relative_extent;
    }
    const size_t b = r / kRowBlock;
    qt.block_max_hi[b] = std::max(qt.block_max_hi[b], row.hi);
    qt.block_min_hi[b] = std::min(qt.block_min_hi[b], row.hi);
    qt.block_max_lo[b] = std::max(qt.block_max_lo[b], row.lo);
    qt.block_min_lo[b] = std::min(qt.block_min_lo[b], row.lo);
  }
  qt.max_hi = *std::max_element(qt.block_max_hi, qt.block_max_hi + qt.blocks);
  qt.min_lo = *std::min_element(qt.block_min_lo, qt.block_min_lo + qt.blocks);
}

// Prefill: every key tile of every KV head is packed once per call, keys along the vector lanes,
// so that passes (1) and (3) are register-blocked outer products over the whole query tile, as
// in a GEMM microkernel, and no block ends in a lane reduction:
//   (1) S = (scale q) K^T, (3) O = O correction + P V.
// The arithmetic is chosen once per call (Tiles::bf16_dot): float32 FMAs (TileGemm on K^T and
// value rows widened to float32), or for bfloat16 inputs on CPUs with AVX512-BF16, bfloat16 dot
// products (ScoreTileBf16 on key pairs, WeightedValuesBf16 on value pairs; attention_bf16.h).
// Each packed tile is then read by every query tile of its head from L2 or L3.
struct PackedKeyTile {
  const float* k_t;         // float32: [head_dim, kKeyTile]; bfloat16: key pairs (uint32)
  const float* v;           // float32: [kKeyTile, value_stride]; bfloat16: value pairs
  const float* key_offset;  // [kKeyTile]: key position - min, 0 past `keys`
  TileKeys keys;
  const void* v_rows;  // the input's value rows (for WeightedVisibleValues)
  bool non_finite;     // a value row holds inf or NaN (masked keys must then be skipped)
};

struct PackedKeys {
  hwy::AlignedFreeUniquePtr<float[]> data;
  size_t tile_floats = 0;
  int64_t key_tiles = 0;
  std::vector<PackedKeyTile> tiles;  // [num_kv_heads, key_tiles]
  const PackedKeyTile& At(int64_t g, int64_t tile) const {
    return tiles[static_cast<size_t>(g * key_tiles + tile)];
  }
};

template <typename T>
void PackKeys(const internal::AttentionKernelArgs& a, const Tiles& t, PackedKeys& packed) {
  const hn::ScalableTag<float> df;
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_dim = static_cast<size_t>(a.value_dim);
  static_assert(kKeyTile == internal::kKeyPairRow, "one key tile per row of key pairs");
  packed.key_tiles = hwy::DivCeil(a.kv_tokens, static_cast<int64_t>(kKeyTile));
  packed.tile_floats = head_dim * kKeyTile + kKeyTile * t.value_dim + kKeyTile;
  const int64_t count = a.num_kv_heads * packed.key_tiles;
  packed.data = hwy::AllocateAligned<float>(static_cast<size_t>(count) * packed.tile_floats);
  packed.tiles.resize(static_cast<size_t>(count));
  const int64_t elements = a.kv_tokens * a.num_kv_heads * (a.head_dim + a.value_dim);
  internal::ForRanges(count, elements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t g = i / packed.key_tiles, key0 = i % packed.key_tiles * kKeyTile;
      const size_t keys = static_cast<size_t>(
          std::min<int64_t>(static_cast<int64_t>(kKeyTile), a.kv_tokens - key0));
      float* k_t = packed.data.get() + static_cast<size_t>(i) * packed.tile_floats;
      float* v = k_t + head_dim * kKeyTile;
      float* key_offset = v + kKeyTile * t.value_dim;
      const T* k_rows =
          static_cast<const T*>(a.k.data) + g * a.k.head_stride + key0 * a.k.token_stride;
      const T* v_rows =
          static_cast<const T*>(a.v.data) + g * a.v.head_stride + key0 * a.v.token_stride;
      const size_t k_stride = static_cast<size_t>(a.k.token_stride);
      const size_t v_stride = static_cast<size_t>(a.v.token_stride);
      if (t.bf16_dot) {
        internal::TransposeKeyPairsBf16(Bits(k_rows), k_stride, keys, head_dim,
                                        reinterpret_cast<uint32_t*>(k_t));
        internal::PairValueRowsBf16(Bits(v_rows), v_stride, keys, value_dim, t.value_dim,
                                    reinterpret_cast<uint32_t*>(v));
      } else {
        std::fill(k_t, k_t + head_dim * kKeyTile, 0.0f);
        for (size_t j = 0; j < keys; ++j) {
          const T* k = k_rows + j * k_stride;
          for (size_t d = 0; d < head_dim; ++d) k_t[d * kKeyTile + j] = ValueF32(k[d]);
          PackRow(df, v_rows + j * v_stride, value_dim, 1.0f, v + j * t.value_dim);
        }
        std::fill(v + keys * t.value_dim, v + kKeyTile * t.value_dim, 0.0f);
      }
      PackedKeyTile& tile = packed.tiles[static_cast<size_t>(i)];
      tile.keys = KeysOf(a, key0, keys);
      for (size_t j = 0; j < kKeyTile; ++j) {
        key_offset[j] = j < keys ? static_cast<float>(tile.keys.pos[j] - tile.keys.min) : 0.0f;
      }
      tile.k_t = k_t;
      tile.v = v;
      tile.key_offset = key_offset;
      tile.v_rows = v_rows;
      tile.non_finite = AnyNonFinite(v_rows, v_stride, keys, value_dim);
    }
  });
}

// Passes (1) to (3) of one packed key tile for the query tile qt, over the row blocks that see
// a key of it (with ordered positions, causal leaves a contiguous run of them).
template <typename T>
void AttendPackedTile(const internal::AttentionKernelArgs& a, Tiles& t, const PackedKeyTile& kt,
                      QueryTile& qt) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  const TileKeys& tk = kt.keys;
  if (tk.min > qt.max_hi || tk.max < qt.min_lo) return;
  size_t first = qt.blocks, last = 0;
  for (size_t b = 0; b < qt.blocks; ++b) {
    if (tk.min > qt.block_max_hi[b] || tk.max < qt.block_min_lo[b]) continue;
    first = std::min(first, b);
    last = b + 1;
  }
  const size_t r0 = first * kRowBlock, rows = (last - first) * kRowBlock;
  float* scores = t.scores + r0 * t.score_stride;
  // (1) S = (scale q) K^T, then bias, mask and (2) the online softmax, row by row.
  if (t.bf16_dot) {
    internal::ScoreTileBf16(reinterpret_cast<const uint32_t*>(QueryBits(t, qt, first)), t.dim,
                            reinterpret_cast<const uint32_t*>(kt.k_t),
                            static_cast<size_t>(a.head_dim + 1) / 2, Bf16ScoreScale(a), scores,
                            t.score_stride, rows);
  } else {
    TileGemm(df, qt.q + r0 * t.dim, t.dim, 1, kt.k_t, kKeyTile, static_cast<size_t>(a.head_dim),
             scores, t.score_stride, rows, kKeyTile, false);
  }
  t.key_offset = const_cast<float*>(kt.key_offset);
  for (size_t r = 0; r < rows; ++r) {
    OnlineSoftmaxRow(df, a, t, scores + r * t.score_stride, tk, qt.rows[r0 + r]);
  }
  // (3) O = O correction + P V; row blocks at a mask edge of a tile whose values hold inf or
  // NaN skip the keys they do not see (WeightedVisibleValues), as in decode.
  const auto weighted_values = [&](size_t b0, size_t b1) HWY_ATTR {
    if (t.bf16_dot) {  // weights rounded to bfloat16 (attention_bf16.h), four rows at a time
      for (size_t b = b0; b < b1; ++b) {
        float correction[kRowBlock];
        for (size_t r = 0; r < kRowBlock; ++r) {
          correction[r] = qt.rows[b * kRowBlock + r].correction;
        }
        internal::WeightedValuesBf16(t.scores + b * kRowBlock * t.score_stride, t.score_stride,
                                     tk.keys, reinterpret_cast<const uint32_t*>(kt.v), t.value_dim,
                                     correction, qt.out + b * kRowBlock * t.value_dim, t.value_dim);
      }
      return;
    }
    for (size_t r = b0 * kRowBlock; r < b1 * kRowBlock; ++r) {
      float* o = qt.out + r * t.value_dim;
      const auto c = hn::Set(df, qt.rows[r].correction);
      for (size_t e = 0; e < t.value_dim; e += n) {
        hn::StoreU(hn::Mul(hn::LoadU(df, o + e), c), df, o + e);
      }
    }
    const size_t r = b0 * kRowBlock;
    TileGemm(df, t.scores + r * t.score_stride, t.score_stride, 1, kt.v, t.value_dim, tk.keys,
             qt.out + r * t.value_dim, t.value_dim, (b1 - b0) * kRowBlock, t.value_dim, true);
  };
  if (!kt.non_finite) return weighted_values(first, last);
  for (size_t b = first; b < last; ++b) {
    const bool straddles = tk.max > qt.block_min_hi[b] || tk.min < qt.block_max_lo[b];
    if (straddles) {
      WeightedVisibleValues(t.scores + b * kRowBlock * t.score_stride, t.score_stride,
                            static_cast<const T*>(kt.v_rows), static_cast<size_t>(a.v.token_stride),
                            tk.keys, static_cast<size_t>(a.value_dim), tk.pos,
                            qt.rows + b * kRowBlock, qt.out + b * kRowBlock * t.value_dim,
                            t.value_dim);
    } else {
      weighted_values(b, b + 1);
    }
  }
}

// Decode (a single query tile per KV head): passes (1) to (3) of keys [key0, key0 + keys) for
// the query tile of every KV head in `tiles`, reading the KV cache where it lies, token by
// token: one token's rows of all heads are adjacent, so both passes walk the cache front to
// back (head by head, every key would start a new page, where the hardware prefetchers stop).
// Scores are [head, row, key], `rows` rows per head.
template <typename T>
void AttendKeyTileEveryHead(const internal::AttentionKernelArgs& a, const Tiles& t, int64_t key0,
                            size_t keys, std::vector<QueryTile>& tiles) {
  const hn::ScalableTag<float> df;
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_dim = static_cast<size_t>(a.value_dim);
  const TileKeys tk = KeysOf(a, key0, keys);
  const int64_t* key_pos = tk.pos;
  const int64_t key_min = tk.min, key_max = tk.max;
  // Every head's tile holds the same query tokens, so one tile's positions decide what is
  // hidden (see AttendKeyTile).
  const QueryTile& first = tiles.front();
  size_t blocks[kQueryTile / kRowBlock];  // the row blocks that see a key of this tile
  size_t block_count = 0;
  for (size_t b = 0; b < first.blocks; ++b) {
    if (key_min > first.block_max_hi[b] || key_max < first.block_min_lo[b]) continue;
    blocks[block_count++] = b;
  }
  if (block_count == 0) return;
  for (size_t j = 0; j < keys; ++j) t.key_offset[j] = static_cast<float>(key_pos[j] - key_min);
  std::fill(t.key_offset + keys, t.key_offset + t.score_stride, 0.0f);
  const size_t rows = first.blocks * kRowBlock;
  const auto scores = [&](size_t h, size_t b) {
    return t.scores + (h * rows + b * kRowBlock) * t.score_stride;
  };
  const T* k_tile = static_cast<const T*>(a.k.data) + key0 * a.k.token_stride;
  const T* v_tile = static_cast<const T*>(a.v.data) + key0 * a.v.token_stride;

  // (1) scores.
  for (size_t j = 0; j < keys; ++j) {
    for (size_t h = 0; h < tiles.size(); ++h) {
      const T* k =
          k_tile + static_cast<int64_t>(j) * a.k.token_stride + tiles[h].g * a.k.head_stride;
      // bfloat16: the token's value rows are fetched now, for pass (3) (decode on a bfloat16
      // cache 2.1-2.2 -> 1.6-1.7 ms; the same for float32's twice longer rows made its decode
      // slower, 2.4-2.5 -> 3.0-3.3 ms, so float32 does not).
      if constexpr (sizeof(T) == 2) {
        PrefetchBytes(
            v_tile + static_cast<int64_t>(j) * a.v.token_stride + tiles[h].g * a.v.head_stride,
            value_dim * sizeof(T));
      }
      for (size_t i = 0; i < block_count; ++i) {
        const size_t b = blocks[i];
        if (t.bf16_dot) {  // the same products and sums as in prefill
          internal::ScoresBf16(QueryBits(t, tiles[h], b), BFloat16RowStride(t), Bits(k), 0, 1,
                               head_dim, Bf16ScoreScale(a), scores(h, b) + j, t.score_stride);
        } else {
          ScoreKey(df, tiles[h].q + b * kRowBlock * t.dim, t.dim, k, head_dim, scores(h, b) + j,
                   t.score_stride);
        }
      }
    }
  }
  // (1) bias and mask, (2) online max and sum.
  for (size_t h = 0; h < tiles.size(); ++h) {
    for (size_t i = 0; i < block_count; ++i) {
      const size_t b = blocks[i];
      for (size_t r = 0; r < kRowBlock; ++r) {
        float* p = scores(h, b) + r * t.score_stride;
        OnlineSoftmaxRow(df, a, t, p, tk, tiles[h].rows[b * kRowBlock + r]);
      }
    }
  }
  // (3) weighted values, a few tokens at a time: every head's rows of those tokens, the
  // accumulators in registers across the tokens (the old outputs scaled by the correction with
  // the first few).
  constexpr size_t kTokenBlock = 8;
  const float ones[kRowBlock] = {1.0f, 1.0f, 1.0f, 1.0f};
  // Row blocks that straddle a mask edge in a tile whose values hold inf or NaN skip the keys
  // they do not see (WeightedVisibleValues).
  std::vector<char> visible_only;  // [head, row block], allocated only at a mask edge
  for (size_t i = 0; i < block_count; ++i) {
    const size_t b = blocks[i];
    if (key_max <= first.block_min_hi[b] && key_min >= first.block_max_lo[b]) {
      continue;
    }
    visible_only.resize(tiles.size() * (kQueryTile / kRowBlock), 0);
    for (size_t h = 0; h < tiles.size(); ++h) {
      visible_only[h * (kQueryTile / kRowBlock) + b] =
          AnyNonFinite(v_tile + tiles[h].g * a.v.head_stride, static_cast<size_t>(a.v.token_stride),
                       keys, value_dim);
    }
  }
  for (size_t j = 0; j < keys; j += kTokenBlock) {
    const size_t count = std::min(kTokenBlock, keys - j);
    for (size_t h = 0; h < tiles.size(); ++h) {
      const T* v =
          v_tile + static_cast<int64_t>(j) * a.v.token_stride + tiles[h].g * a.v.head_stride;
      for (size_t i = 0; i < block_count; ++i) {
        const size_t b = blocks[i];
        float correction[kRowBlock];
        for (size_t r = 0; r < kRowBlock; ++r) {
          correction[r] = j == 0 ? tiles[h].rows[b * kRowBlock + r].correction : 1.0f;
        }
        float* o = tiles[h].out + b * kRowBlock * t.value_dim;
        const size_t v_stride = static_cast<size_t>(a.v.token_stride);
        if (!visible_only.empty() && visible_only[h * (kQueryTile / kRowBlock) + b]) {
          if (j == 0) {  // every key of the tile at once: the correction applies once
            WeightedVisibleValues(scores(h, b), t.score_stride, v, v_stride, keys, value_dim,
                                  key_pos, tiles[h].rows + b * kRowBlock, o, t.value_dim);
          }
        } else if (t.bf16_dot) {  // weights rounded to bfloat16 as in prefill: decode = prefill's
                                  // row
          internal::WeightedValueRowsBf16(scores(h, b) + j, t.score_stride, count, Bits(v),
                                          v_stride, value_dim, t.value_dim,
                                          j == 0 ? correction : ones, o, t.value_dim);
        } else {
          WeightedValues(df, scores(h, b) + j, t.score_stride, v, v_stride, count, value_dim,
                         j == 0 ? correction : ones, o, t.value_dim);
        }
      }
    }
  }
}

// Without `partial`, writes the rows' outputs; with it (one key chunk of several), leaves their
// state there for MergePartials.
inline void FinishQueryTile(const internal::AttentionKernelArgs& a, const Tiles& t,
                            const QueryTile& qt, float* HWY_RESTRICT partial) {
  const hn::ScalableTag<float> df;
  if (partial != nullptr) {
    for (size_t r = 0; r < qt.valid_rows; ++r) {
      partial[r] = qt.rows[r].max;
      partial[kQueryTile + r] = qt.rows[r].sum;
    }
    std::memcpy(partial + 2 * kQueryTile, qt.out, qt.valid_rows * t.value_dim * sizeof(float));
    return;
  }
  const int64_t group = a.num_heads / a.num_kv_heads;
  for (size_t r = 0; r < qt.valid_rows; ++r) {
    const int64_t m = qt.first_row + static_cast<int64_t>(r);
    const int64_t token = m / group, head = qt.g * group + m % group;
    MergePartials(df, qt.out + r * t.value_dim, &qt.rows[r].max, &qt.rows[r].sum, 0, 1,
                  static_cast<size_t>(a.value_dim),
                  a.out + token * a.out_token_stride + head * a.out_head_stride,
                  a.lse != nullptr ? a.lse + token * a.num_heads + head : nullptr);
  }
}

// Split-K (flash-decoding): the keys of each (KV head, query tile) are cut into chunks of
// whole key tiles, at least kMinChunkKeys each, so that every call makes at least kMinItems work
// items (see the top of the file).
inline int64_t KeyChunkKeys(int64_t items, int64_t kv_tokens) {
  const int64_t wanted = std::min(hwy::DivCeil(kMinItems, items), kMaxKeyChunks);
  const int64_t chunks = std::max<int64_t>(1, std::min(wanted, kv_tokens / kMinChunkKeys));
  const int64_t keys = hwy::DivCeil(kv_tokens, chunks);
  return static_cast<int64_t>(
      hwy::RoundUpTo(static_cast<size_t>(std::max<int64_t>(keys, 1)), kKeyTile));
}

template <typename T>
void AttentionKernelT(const internal::AttentionKernelArgs& a) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t rows_total = a.q_tokens * group;
  const int64_t tiles = hwy::DivCeil(rows_total, static_cast<int64_t>(kQueryTile));
  // With a single query tile per KV head (decode), an item takes every KV head of its key chunk
  // and reads the keys and values where they lie, token by token (AttendKeyTileEveryHead).
  const bool every_head = tiles == 1;
  // AVX512-BF16 for bfloat16 inputs where the CPU has it (attention_bf16.h).
  const bool bf16_dot =
      std::is_same_v<T, hwy::bfloat16_t> && kBf16DotTarget && internal::HasBf16DotProducts();
  const int64_t heads_per_item = every_head ? a.num_kv_heads : 1;
  const int64_t head_groups = a.num_kv_heads / heads_per_item;
  const int64_t chunk_keys = KeyChunkKeys(tiles * head_groups, a.kv_tokens);
  const int64_t chunks = std::max<int64_t>(1, hwy::DivCeil(a.kv_tokens, chunk_keys));
  const int64_t tile_items = tiles * a.num_kv_heads;  // (KV head, query tile) pairs
  const int64_t items = tiles * head_groups * chunks;

  int64_t key_min_all = 0, key_max_all = 0;
  if (a.alibi_slopes != nullptr && a.kv_tokens > 0) {
    const auto [min_it, max_it] = std::minmax_element(a.key_pos, a.key_pos + a.kv_tokens);
    key_min_all = *min_it;
    key_max_all = *max_it;
  }

  const size_t dim = hwy::RoundUpTo(static_cast<size_t>(a.head_dim), n);
  const size_t value_dim = hwy::RoundUpTo(static_cast<size_t>(a.value_dim), n);
  const size_t score_stride = hwy::RoundUpTo(kKeyTile, n);
  // The query tiles' q rows, then their outputs o, each [heads_per_item, tile_rows, dim]: a
  // single query tile per KV head has only as many rows as there are, and the heads' rows lie
  // next to each other (tiles a power of two apart would share the same few L1 sets).
  const size_t tile_rows =
      every_head ? hwy::RoundUpTo(static_cast<size_t>(rows_total), kRowBlock) : kQueryTile;
  const size_t query_floats = tile_rows * (dim + value_dim);  // q and o of one QueryTile
  // Scores of the query tile, or in decode of every row of every head.
  const size_t score_rows = static_cast<size_t>(heads_per_item) * tile_rows;
  const size_t tile_floats =
      static_cast<size_t>(heads_per_item) * query_floats + score_rows * score_stride + score_stride;
  const int64_t work = a.q_tokens * a.num_heads * a.kv_tokens * (a.head_dim + a.value_dim);
  const bool threaded = work >= internal::kMinElementsForThreads && omp_get_max_threads() > 1;
  // Split-K partials: one slot per (KV head, query tile, key chunk); nothing without chunks.
  const size_t partial_floats = PartialFloats(value_dim);
  hwy::AlignedFreeUniquePtr<float[]> partials;
  if (chunks > 1) {
    partials =
        hwy::AllocateAligned<float>(static_cast<size_t>(tile_items * chunks) * partial_floats);
  }

  // Prefill reads key tiles packed once per call (AttendPackedTile); decode reads the cache
  // where it lies.
  PackedKeys packed;
  if (!every_head) {
    Tiles shape;
    shape.bf16_dot = bf16_dot;
    shape.value_dim = value_dim;
    PackKeys<T>(a, shape, packed);
  }

#pragma omp parallel if (threaded)
  {
    internal::Scratch<float> scratch(tile_floats);
    Tiles t;
    t.bf16_dot = bf16_dot;
    t.dim = dim;
    t.value_dim = value_dim;
    t.score_stride = score_stride;
    std::vector<QueryTile> query_tiles(static_cast<size_t>(heads_per_item));
    float* const q_rows = scratch.get();
    float* const out_rows = q_rows + query_tiles.size() * tile_rows * dim;
    for (size_t h = 0; h < query_tiles.size(); ++h) {
      query_tiles[h].q = q_rows + h * tile_rows * dim;
      query_tiles[h].out = out_rows + h * tile_rows * value_dim;
    }
    t.scores = out_rows + query_tiles.size() * tile_rows * value_dim;
    t.key_offset = t.scores + score_rows * score_stride;

    // Dynamic: causal work grows with the query tile, so the largest tiles are handed out first
    // and the small ones fill the gaps at the end. Item i is key chunk i % chunks of heads
    // [g0, g0 + heads_per_item) and one query tile; (KV head g, tile) is tile item
    // (tiles - 1 - tile) num_kv_heads + g, and its chunk c has partial slot
    // tile_item chunks + c.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t chunk = item % chunks, group_item = item / chunks;
      const int64_t tile = tiles - 1 - group_item / head_groups;
      const int64_t g0 = group_item % head_groups * heads_per_item;
      const int64_t key_begin = chunk * chunk_keys;
      const int64_t key_end = std::min(a.kv_tokens, key_begin + chunk_keys);
      for (int64_t h = 0; h < heads_per_item; ++h) {
        query_tiles[h].g = g0 + h;
        query_tiles[h].first_row = tile * static_cast<int64_t>(kQueryTile);
        BeginQueryTile<T>(a, t, key_min_all, key_max_all, query_tiles[h]);
      }
      for (int64_t key0 = key_begin; key0 < key_end; key0 += static_cast<int64_t>(kKeyTile)) {
        const size_t keys =
            static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kKeyTile), key_end - key0));
        if (every_head) {
          AttendKeyTileEveryHead<T>(a, t, key0, keys, query_tiles);
        } else {
          AttendPackedTile<T>(a, t, packed.At(g0, key0 / static_cast<int64_t>(kKeyTile)),
                              query_tiles[0]);
        }
      }
      for (int64_t h = 0; h < heads_per_item; ++h) {
        const int64_t tile_item = (tiles - 1 - tile) * a.num_kv_heads + g0 + h;
        FinishQueryTile(
            a, t, query_tiles[h],
            chunks > 1 ? partials.get() + (tile_item * chunks + chunk) * partial_floats : nullptr);
      }
    }

    // Split-K's second pass (after the loop's barrier): merge each row's chunks.
    if (chunks > 1) {
#pragma omp for schedule(static)
      for (int64_t tile_item = 0; tile_item < tile_items; ++tile_item) {
        const int64_t tile = tiles - 1 - tile_item / a.num_kv_heads;
        const int64_t g = tile_item % a.num_kv_heads;
        const int64_t first_row = tile * static_cast<int64_t>(kQueryTile);
        const float* slot = partials.get() + tile_item * chunks * partial_floats;
        const int64_t valid_rows =
            std::min<int64_t>(static_cast<int64_t>(kQueryTile), rows_total - first_row);
        for (int64_t r = 0; r < valid_rows; ++r) {
          const int64_t m = first_row + r;
          const int64_t token = m / group, head = g * group + m % group;
          MergePartials(df, slot + 2 * kQueryTile + r * value_dim, slot + r, slot + kQueryTile + r,
                        partial_floats, static_cast<size_t>(chunks),
                        static_cast<size_t>(a.value_dim),
                        a.out + token * a.out_token_stride + head * a.out_head_stride,
                        a.lse != nullptr ? a.lse + token * a.num_heads + head : nullptr);
        }
      }
    }
  }
}

// The per-target entry point: picks the storage type.
HWY_NOINLINE void AttentionKernelImpl(const internal::AttentionKernelArgs& args) {
  HWY_DASSERT(args.storage == StorageType::kFloat32 || args.storage == StorageType::kBFloat16);
  if (args.storage == StorageType::kBFloat16) return AttentionKernelT<hwy::bfloat16_t>(args);
  return AttentionKernelT<float>(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_KERNELS_INL_H_
