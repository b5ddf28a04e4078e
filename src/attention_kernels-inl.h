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
// A key and value tile is widened once and then used by the whole query tile, four rows at a
// time (a row block: four score accumulators, then four output accumulators, in registers).
// Each key tile goes through three passes, for every row block:
//   (1) scores: s_j = (scale q) . k_j (MulAdd over head_dim, then a sum of lanes), plus the ALiBi
//       bias slope (kpos_j - anchor), and -inf where the causal mask hides key j;
//   (2) online max and sum: m' = max(m, max_j s_j), p_j = exp(s_j - m'),
//       l' = l exp(m - m') + sum_j p_j;
//   (3) weighted values: o' = o exp(m - m') + sum_j p_j v_j.
// After the last tile, out = o / l, or zeros when no key was visible. Memory beyond the inputs
// is one set of tiles per thread.
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

#include "attention_kernels.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernel_threads.h"
#include "simd_storage-inl.h"

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

// Writes `dim` elements of `in`, widened to float32 and multiplied by `mul`, to `out`, zero-padded
// to whole vectors so that the dot products and the value loop need no tail. The row's last
// partial vector goes through a zeroed stack buffer: reading past the row could fault, and could
// pick up NaN from a neighbouring row that 0 * NaN would spread.
template <class DF, typename T>
HWY_INLINE void PackRow(DF df, const T* HWY_RESTRICT in, size_t dim, float mul,
                        float* HWY_RESTRICT out) {
  const size_t n = hn::Lanes(df);
  const auto vmul = hn::Set(df, mul);
  size_t i = 0;
  for (; i + n <= dim; i += n) hn::StoreU(hn::Mul(LoadF32(df, in + i), vmul), df, out + i);
  if (i == dim) return;
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  T stage[kMaxLanes] = {};
  std::memcpy(stage, in + i, (dim - i) * sizeof(T));
  hn::StoreU(hn::Mul(LoadF32(df, stage), vmul), df, out + i);
}

// The per-thread tiles, float32, each row padded to whole vectors.
struct Tiles {
  size_t dim;           // head_dim rounded up to whole vectors
  size_t value_dim;     // value_dim rounded up to whole vectors
  size_t score_stride;  // kKeyTile rounded up to whole vectors
  float* q;             // [kQueryTile, dim], times scale
  float* k;             // [kKeyTile, dim]
  float* v;             // [kKeyTile, value_dim]
  float* scores;        // [kRowBlock, score_stride]: scores, then weights p
  float* key_offset;    // [score_stride]: key position - the tile's smallest key position
  float* out;           // [kQueryTile, value_dim]: the unnormalised output o
};

// The running state of one query row.
struct RowState {
  int64_t pos = 0;
  int64_t anchor = 0;  // ALiBi distances are measured from here (see the top of the file)
  float slope = 0.0f;
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  float correction = 1.0f;  // exp(old max - new max) of the current key tile
};

// Pass (1), the dot products: scores[r][j] = q_r . k_j for the four rows of the block at q and
// `keys` keys.
template <class DF>
HWY_INLINE void DotProducts(DF df, const Tiles& t, const float* HWY_RESTRICT q, size_t keys) {
  static_assert(kRowBlock == 4, "one named accumulator per row");
  const size_t n = hn::Lanes(df);
  const float* HWY_RESTRICT q0 = q;
  const float* HWY_RESTRICT q1 = q0 + t.dim;
  const float* HWY_RESTRICT q2 = q1 + t.dim;
  const float* HWY_RESTRICT q3 = q2 + t.dim;
  float* HWY_RESTRICT s = t.scores;
  for (size_t j = 0; j < keys; ++j) {
    const float* HWY_RESTRICT k = t.k + j * t.dim;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (size_t d = 0; d < t.dim; d += n) {
      const auto kd = hn::LoadU(df, k + d);
      a0 = hn::MulAdd(hn::LoadU(df, q0 + d), kd, a0);
      a1 = hn::MulAdd(hn::LoadU(df, q1 + d), kd, a1);
      a2 = hn::MulAdd(hn::LoadU(df, q2 + d), kd, a2);
      a3 = hn::MulAdd(hn::LoadU(df, q3 + d), kd, a3);
    }
    s[j] = hn::GetLane(hn::SumOfLanes(df, a0));
    s[t.score_stride + j] = hn::GetLane(hn::SumOfLanes(df, a1));
    s[2 * t.score_stride + j] = hn::GetLane(hn::SumOfLanes(df, a2));
    s[3 * t.score_stride + j] = hn::GetLane(hn::SumOfLanes(df, a3));
  }
}

// Passes (1), the bias and mask, and (2) for one row: turns its scores into weights p and
// updates its running max and sum. `key_pos` and `keys` are the tile's key positions.
template <class DF>
HWY_INLINE void OnlineSoftmaxRow(DF df, const Tiles& t, float* HWY_RESTRICT s,
                                 const int64_t* key_pos, size_t keys, int64_t key_min,
                                 int64_t key_max, bool causal, bool alibi, RowState& row) {
  const size_t n = hn::Lanes(df);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::fill(s + keys, s + t.score_stride, kNegInf);  // keys past the end of a short last tile
  if (alibi) {
    const auto slope = hn::Set(df, row.slope);
    const auto anchor = hn::Set(df, static_cast<float>(row.anchor - key_min));
    for (size_t j = 0; j < t.score_stride; j += n) {
      const auto distance = hn::Sub(hn::LoadU(df, t.key_offset + j), anchor);
      hn::StoreU(hn::MulAdd(slope, distance, hn::LoadU(df, s + j)), df, s + j);
    }
  }
  if (causal && key_max > row.pos) {  // only tiles that straddle the diagonal pay for this
    for (size_t j = 0; j < keys; ++j) {
      if (key_pos[j] > row.pos) s[j] = kNegInf;
    }
  }

  auto vmax = hn::Set(df, kNegInf);
  for (size_t j = 0; j < t.score_stride; j += n) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  const float new_max = std::max(row.max, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  if (new_max == kNegInf) {  // nothing visible yet: all weights 0, state unchanged
    std::fill(s, s + t.score_stride, 0.0f);
    row.correction = 1.0f;
    return;
  }
  row.correction = std::exp(row.max - new_max);  // exp(-inf) = 0 on the first visible tile
  row.max = new_max;
  const auto vnew_max = hn::Set(df, new_max);
  auto vsum = hn::Zero(df);
  for (size_t j = 0; j < t.score_stride; j += n) {
    const auto p = hn::Exp(df, hn::Sub(hn::LoadU(df, s + j), vnew_max));  // exp(-inf) = 0
    vsum = hn::Add(vsum, p);
    hn::StoreU(p, df, s + j);
  }
  row.sum = row.sum * row.correction + hn::GetLane(hn::SumOfLanes(df, vsum));
}

// Pass (3): o_r = o_r correction_r + sum_j p_rj v_j for the four rows of the block at out, one
// vector of value_dim at a time so that the four accumulators stay in registers across the whole
// key tile.
template <class DF>
HWY_INLINE void WeightedValues(DF df, const Tiles& t, size_t keys, const RowState* rows,
                               float* HWY_RESTRICT out) {
  static_assert(kRowBlock == 4, "one named accumulator per row");
  const size_t n = hn::Lanes(df);
  const float* HWY_RESTRICT p0 = t.scores;
  const float* HWY_RESTRICT p1 = p0 + t.score_stride;
  const float* HWY_RESTRICT p2 = p1 + t.score_stride;
  const float* HWY_RESTRICT p3 = p2 + t.score_stride;
  float* HWY_RESTRICT o0 = out;
  float* HWY_RESTRICT o1 = o0 + t.value_dim;
  float* HWY_RESTRICT o2 = o1 + t.value_dim;
  float* HWY_RESTRICT o3 = o2 + t.value_dim;
  const auto c0 = hn::Set(df, rows[0].correction), c1 = hn::Set(df, rows[1].correction);
  const auto c2 = hn::Set(df, rows[2].correction), c3 = hn::Set(df, rows[3].correction);
  for (size_t e = 0; e < t.value_dim; e += n) {
    auto a0 = hn::Mul(hn::LoadU(df, o0 + e), c0), a1 = hn::Mul(hn::LoadU(df, o1 + e), c1);
    auto a2 = hn::Mul(hn::LoadU(df, o2 + e), c2), a3 = hn::Mul(hn::LoadU(df, o3 + e), c3);
    for (size_t j = 0; j < keys; ++j) {
      const auto v = hn::LoadU(df, t.v + j * t.value_dim + e);
      a0 = hn::MulAdd(hn::Set(df, p0[j]), v, a0);
      a1 = hn::MulAdd(hn::Set(df, p1[j]), v, a1);
      a2 = hn::MulAdd(hn::Set(df, p2[j]), v, a2);
      a3 = hn::MulAdd(hn::Set(df, p3[j]), v, a3);
    }
    hn::StoreU(a0, df, o0 + e);
    hn::StoreU(a1, df, o1 + e);
    hn::StoreU(a2, df, o2 + e);
    hn::StoreU(a3, df, o3 + e);
  }
}

// One work item: key/value head g, query rows [first_row, first_row + kQueryTile) of g, where
// row m is query token m / group and query head g * group + m % group. A short last row block
// repeats its last row (computed, not stored) so that the passes never branch on the row count.
template <typename T>
void AttendQueryTile(const internal::AttentionKernelArgs& a, const Tiles& t, int64_t g,
                     int64_t first_row, int64_t key_min_all, int64_t key_max_all) {
  const hn::ScalableTag<float> df;
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t rows_total = a.q_tokens * group;
  const size_t valid_rows = static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(kQueryTile), rows_total - first_row));
  const size_t blocks = hwy::DivCeil(valid_rows, kRowBlock);
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_dim = static_cast<size_t>(a.value_dim);
  const bool alibi = a.alibi_slopes != nullptr;

  RowState rows[kQueryTile];
  int64_t block_max_pos[kQueryTile / kRowBlock] = {};
  for (size_t r = 0; r < blocks * kRowBlock; ++r) {
    const int64_t m = first_row + static_cast<int64_t>(std::min(r, valid_rows - 1));
    const int64_t token = m / group, head = g * group + m % group;
    const T* q = static_cast<const T*>(a.q.data) + token * a.q.token_stride +
                 head * a.q.head_stride;
    PackRow(df, q, head_dim, a.scale, t.q + r * t.dim);
    std::fill(t.out + r * t.value_dim, t.out + (r + 1) * t.value_dim, 0.0f);
    rows[r].pos = a.query_pos[token];
    rows[r].anchor = std::clamp(rows[r].pos, key_min_all, key_max_all);
    rows[r].slope = alibi ? a.alibi_slopes[head] : 0.0f;
    block_max_pos[r / kRowBlock] = std::max(block_max_pos[r / kRowBlock], rows[r].pos);
  }
  const int64_t max_query_pos = *std::max_element(block_max_pos, block_max_pos + blocks);

  const T* k_head = static_cast<const T*>(a.k.data) + g * a.k.head_stride;
  const T* v_head = static_cast<const T*>(a.v.data) + g * a.v.head_stride;
  for (int64_t key0 = 0; key0 < a.kv_tokens; key0 += static_cast<int64_t>(kKeyTile)) {
    const size_t keys =
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kKeyTile), a.kv_tokens - key0));
    const int64_t* key_pos = a.key_pos + key0;
    const auto [min_it, max_it] = std::minmax_element(key_pos, key_pos + keys);
    const int64_t key_min = *min_it, key_max = *max_it;
    // Causal: a tile whose every key lies after every query of the tile (or row block) adds
    // nothing; with ordered positions, the upper triangle is skipped tile by tile.
    if (a.causal && key_min > max_query_pos) continue;

    for (size_t j = 0; j < keys; ++j) {
      const int64_t token = key0 + static_cast<int64_t>(j);
      PackRow(df, k_head + token * a.k.token_stride, head_dim, 1.0f, t.k + j * t.dim);
      PackRow(df, v_head + token * a.v.token_stride, value_dim, 1.0f, t.v + j * t.value_dim);
      t.key_offset[j] = static_cast<float>(key_pos[j] - key_min);
    }
    std::fill(t.key_offset + keys, t.key_offset + t.score_stride, 0.0f);

    for (size_t b = 0; b < blocks; ++b) {
      if (a.causal && key_min > block_max_pos[b]) continue;
      RowState* block = rows + b * kRowBlock;
      // (1) scores, then (1) bias and mask and (2) online max and sum, row by row.
      DotProducts(df, t, t.q + b * kRowBlock * t.dim, keys);
      for (size_t r = 0; r < kRowBlock; ++r) {
        OnlineSoftmaxRow(df, t, t.scores + r * t.score_stride, key_pos, keys, key_min, key_max,
                         a.causal, alibi, block[r]);
      }
      // (3) weighted values.
      WeightedValues(df, t, keys, block, t.out + b * kRowBlock * t.value_dim);
    }
  }

  // out = o / l; a row that saw no visible key (l = 0) gets zeros, not NaN.
  const size_t n = hn::Lanes(df);
  for (size_t r = 0; r < valid_rows; ++r) {
    const int64_t m = first_row + static_cast<int64_t>(r);
    const int64_t token = m / group, head = g * group + m % group;
    float* o = t.out + r * t.value_dim;
    const auto inv_sum = hn::Set(df, rows[r].sum > 0.0f ? 1.0f / rows[r].sum : 0.0f);
    for (size_t e = 0; e < t.value_dim; e += n) {
      hn::StoreU(hn::Mul(hn::LoadU(df, o + e), inv_sum), df, o + e);
    }
    std::memcpy(a.out + token * a.out_token_stride + head * a.out_head_stride, o,
                value_dim * sizeof(float));
  }
}

template <typename T>
void AttentionKernelT(const internal::AttentionKernelArgs& a) {
  const hn::ScalableTag<float> df;
  const size_t n = hn::Lanes(df);
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t rows_total = a.q_tokens * group;
  const int64_t tiles = hwy::DivCeil(rows_total, static_cast<int64_t>(kQueryTile));
  const int64_t items = tiles * a.num_kv_heads;

  int64_t key_min_all = 0, key_max_all = 0;
  if (a.alibi_slopes != nullptr) {
    const auto [min_it, max_it] = std::minmax_element(a.key_pos, a.key_pos + a.kv_tokens);
    key_min_all = *min_it;
    key_max_all = *max_it;
  }

  const size_t dim = hwy::RoundUpTo(static_cast<size_t>(a.head_dim), n);
  const size_t value_dim = hwy::RoundUpTo(static_cast<size_t>(a.value_dim), n);
  const size_t score_stride = hwy::RoundUpTo(kKeyTile, n);
  const size_t tile_floats = kQueryTile * dim + kKeyTile * dim + kKeyTile * value_dim +
                             kRowBlock * score_stride + score_stride + kQueryTile * value_dim;
  const int64_t work = a.q_tokens * a.num_heads * a.kv_tokens * (a.head_dim + a.value_dim);
  const bool threaded = work >= internal::kMinElementsForThreads && omp_get_max_threads() > 1;

#pragma omp parallel if (threaded)
  {
    internal::Scratch<float> scratch(tile_floats);
    Tiles t;
    t.dim = dim;
    t.value_dim = value_dim;
    t.score_stride = score_stride;
    t.q = scratch.get();
    t.k = t.q + kQueryTile * dim;
    t.v = t.k + kKeyTile * dim;
    t.scores = t.v + kKeyTile * value_dim;
    t.key_offset = t.scores + kRowBlock * score_stride;
    t.out = t.key_offset + score_stride;

    // Dynamic: causal work grows with the query tile, so the largest tiles are handed out first
    // and the small ones fill the gaps at the end.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t tile = tiles - 1 - item / a.num_kv_heads;
      const int64_t g = item % a.num_kv_heads;
      AttendQueryTile<T>(a, t, g, tile * static_cast<int64_t>(kQueryTile), key_min_all,
                         key_max_all);
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
