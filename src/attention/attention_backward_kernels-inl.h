// The backward attention kernel body, compiled once per Highway target by
// attention_backward_kernels.cc.
//
// FlashAttention-2's backward pass (Dao 2023, arXiv:2307.08691, Algorithm 2) on the CPU. As in
// the forward kernel, a row is a (query token, query head) pair of one KV head g, row m being
// token m / group and head g group + m % group, so that the query heads of a group share every
// key and value tile they read (and dK, dV sum over them for free). Nothing is [q_tokens,
// kv_tokens]: the scores of a query tile (kQueryRows rows) against a key tile (kKeys keys) are
// recomputed from q, k and the saved log-sum-exp, and the pass over that pair of tiles is
//
//   S  = Qs K^T                 Qs: q times scale and the row's query scale
//   P  = exp(cap(S) + bias - lse)  0 where a mask hides the key, or the row sees no key
//   dV += P^T dO                dP = dO V^T
//   dS = P (dP - delta)         delta_i = do_i . o_i, once per row
//   dS *= cap'(S)               with soft-capping: 1 - tanh^2(S / C)
//   dK += dS^T Qs               dQ += dS K   (times the row's scale when written)
//
// five products of one shape, each a TileGemm (tile_gemm-inl.h), and a T5 table gradient that
// adds dS (before cap') into the bucket of each pair's distance. cap is soft-capping,
// C tanh(S / C), or none. An attention sink needs nothing here: the saved lse includes it, so P
// is already the softmax with the sink in the denominator, and delta = do . o is unchanged (the
// sink adds no value); its own gradient, -sum_i exp(sink - lse_i) delta_i, is formed by the
// caller (attention_backward.cc) from lse, out and d_out.
//
// The schedule keeps every gradient element in one thread's hands, so no atomics and no
// thread-dependent order exist:
// - per KV head (enough KV heads for the threads): an item is one KV head; it walks key tiles
//   outside and query tiles inside, holding the key tile's dK and dV and the head's dQ, the
//   five products of FlashAttention-2;
// - two phases (few KV heads): items (KV head, key tile) make dK and dV walking the query tiles,
//   then items (KV head, query tile) make dQ walking the key tiles, recomputing S, P and dS: seven
//   products instead of five, for more items than KV heads.
// Each element of dQ, dK, dV and of the T5 gradient sums the same terms in the same order under
// either schedule (query tiles in order for dK and dV, key tiles in order for dQ, the T5 terms
// per query tile in key tile order, then the query tiles in order), so the result has the same
// bits for every thread count and either schedule; tests hold both to it.
//
// Key tiles are packed three ways: K^T and V^T for S and dP (keys along the vector lanes), and K's
// rows for dQ. The query side (Qs, dO, and each row's interval, lse and delta) is packed once per
// call, widened from bfloat16 where the inputs are.

#if defined(POSENC_ATTENTION_BACKWARD_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_BACKWARD_KERNELS_INL_H_
#undef POSENC_ATTENTION_BACKWARD_KERNELS_INL_H_
#else
#define POSENC_ATTENTION_BACKWARD_KERNELS_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_backward_kernels.h"
#include "attention_softmax-inl.h"
#include "attention_tiles-inl.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "simd/kernel_threads.h"
#include "simd/scratch_memory.h"
#include "simd/simd_storage-inl.h"
#include "tile_gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {
namespace backward {

namespace hn = hwy::HWY_NAMESPACE;

// Tile shape: a query tile of 32 rows and a key tile of 64 keys keep the five [32, 64] and
// [64, dim] blocks of one pair within L1 and L2 for head_dim 128.
constexpr size_t kQueryRows = 32;
constexpr size_t kKeys = 64;

// One query row of a KV head, packed once per call: the forward kernel's row state (its
// interval, ALiBi anchor and slope, T5 bias) so that both passes form the same scores, and what
// the backward adds.
struct Row {
  RowState state;
  int64_t token = 0;
  float lse = 0.0f;      // the forward kernel's: ALiBi measured from the anchor; -inf: sees nothing
  float delta = 0.0f;    // do . o
  float q_scale = 1.0f;  // scale times the row's query scale: Qs = q_scale q
};

// Sizes of one call, in floats, with rows padded to whole vectors.
struct Shape {
  size_t dim = 0;        // head_dim rounded up
  size_t value_dim = 0;  // value_dim rounded up
  int64_t group = 0;     // query heads per KV head
  int64_t rows = 0;      // rows per KV head: q_tokens group
  int64_t query_tiles = 0;
  int64_t key_tiles = 0;
};

// The query side of the whole call, [num_kv_heads, rows]: Qs rows, dO rows, row states, and per
// query tile the union of its rows' intervals.
struct QuerySide {
  internal::ScratchVector<float> q;      // [., dim]
  internal::ScratchVector<float> d_out;  // [., value_dim]
  std::vector<Row> rows;
  std::vector<int64_t> tile_lo, tile_hi;  // [num_kv_heads, query_tiles]
};

// A packed key tile and its accumulators (one per thread).
struct KeyTile {
  float* k_t;         // [dim, kKeys]: K^T
  float* v_t;         // [value_dim, kKeys]: V^T
  float* k_rows;      // [kKeys, dim]
  float* dk;          // [kKeys, dim]
  float* dv;          // [kKeys, value_dim]
  float* key_offset;  // [kKeys]: key position - the tile's smallest, 0 past its keys
  TileKeys tk;
};

// The per-thread scratch of the pair pass: P and dS of one pair, and with soft-capping the
// derivative of each capped score (1 - tanh^2), [kQueryRows, kKeys] each.
struct PairScratch {
  float* p;
  float* ds;
  float* cap_grad;
};

// Scratch floats of one thread: a key tile, its accumulators, and the pair buffers.
inline size_t ThreadFloats(const Shape& s) {
  return 3 * kKeys * s.dim + kKeys * s.value_dim + s.value_dim * kKeys + kKeys * s.value_dim +
         kKeys + 3 * kQueryRows * kKeys;
}

inline void Carve(const Shape& s, float* scratch, KeyTile& kt, PairScratch& ps) {
  kt.k_t = scratch;
  kt.k_rows = kt.k_t + s.dim * kKeys;
  kt.dk = kt.k_rows + kKeys * s.dim;
  kt.v_t = kt.dk + kKeys * s.dim;
  kt.dv = kt.v_t + s.value_dim * kKeys;
  kt.key_offset = kt.dv + kKeys * s.value_dim;
  ps.p = kt.key_offset + kKeys;
  ps.ds = ps.p + kQueryRows * kKeys;
  ps.cap_grad = ps.ds + kQueryRows * kKeys;
}

// Packs key tile [key0, key0 + keys) of KV head g: K's rows (widened), K^T and V^T, and the key
// positions.
template <typename T>
void PackKeyTile(const internal::AttentionBackwardKernelArgs& args, const Shape& s, int64_t g,
                 int64_t key0, size_t keys, KeyTile& kt) {
  const hn::ScalableTag<float> df;
  const internal::AttentionKernelArgs& a = args.forward;
  const T* k = static_cast<const T*>(a.k.data) + g * a.k.head_stride;
  const T* v = static_cast<const T*>(a.v.data) + g * a.v.head_stride;
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_dim = static_cast<size_t>(a.value_dim);
  kt.tk = KeysOf(a, key0, keys);
  // K's rows first (widened), then both transposes from float32: keys past `keys` are zero.
  for (size_t j = 0; j < keys; ++j) {
    PackRow(df, k + (key0 + static_cast<int64_t>(j)) * a.k.token_stride, head_dim, 1.0f,
            kt.k_rows + j * s.dim);
    kt.key_offset[j] = static_cast<float>(kt.tk.pos[j] - kt.tk.min);
  }
  std::fill(kt.key_offset + keys, kt.key_offset + kKeys, 0.0f);
  for (size_t d = 0; d < head_dim; ++d) {
    float* column = kt.k_t + d * kKeys;
    for (size_t j = 0; j < keys; ++j) column[j] = kt.k_rows[j * s.dim + d];
    std::fill(column + keys, column + kKeys, 0.0f);
  }
  for (size_t e = 0; e < value_dim; ++e) {
    float* column = kt.v_t + e * kKeys;
    for (size_t j = 0; j < keys; ++j) {
      column[j] = ValueF32(v[(key0 + static_cast<int64_t>(j)) * a.v.token_stride + e]);
    }
    std::fill(column + keys, column + kKeys, 0.0f);
  }
}

// P of one row: the scores s[0, kKeys) (Qs . k_j) with the row's soft-capping, bias and mask as
// the forward pass forms them (BiasAndMask; with soft-capping, its derivative to cap_grad), then
// exp(s - lse), 0 where the row does not see the key, all of it when the row sees nothing. The
// lse includes the sink, so P is the sink's softmax without its column.
template <class DF>
HWY_INLINE void Weights(DF df, const internal::AttentionBackwardKernelArgs& args, const KeyTile& kt,
                        const Row& row, float* HWY_RESTRICT s, float* HWY_RESTRICT cap_grad) {
  const size_t n = hn::Lanes(df);
  if (row.lse == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + kKeys, 0.0f);
    if (cap_grad != nullptr) std::fill(cap_grad, cap_grad + kKeys, 0.0f);
    return;
  }
  BiasAndMask(df, args.forward, kKeys, kt.key_offset, s, kt.tk, row.state, cap_grad);
  if (std::isnan(row.lse)) {  // a NaN row: NaN weights on the keys it sees, as in the math
    for (size_t j = 0; j < kKeys; ++j) {
      s[j] = s[j] == -std::numeric_limits<float>::infinity() ? 0.0f : row.lse;
    }
    return;
  }
  const auto lse = hn::Set(df, row.lse);
  for (size_t j = 0; j < kKeys; j += n) {
    // s - lse <= 0 (lse >= the row's max), give or take the recomputed scores' rounding, which
    // ExpOfNonPositive also takes exactly; exp(-inf) = 0, and a NaN score stays NaN.
    hn::StoreU(ExpOfNonPositive(df, hn::Sub(hn::LoadU(df, s + j), lse)), df, s + j);
  }
}

// dS of one row in place of dP: p (dP - delta), and 0 wherever p is 0, so that a key the row
// does not see adds nothing even when its value row holds inf; a NaN p stays NaN.
template <class DF>
HWY_INLINE void ScoreGradients(DF df, const float* HWY_RESTRICT p, float delta,
                               float* HWY_RESTRICT ds) {
  const size_t n = hn::Lanes(df);
  const auto vdelta = hn::Set(df, delta);
  const auto zero = hn::Zero(df);
  for (size_t j = 0; j < kKeys; j += n) {
    const auto vp = hn::LoadU(df, p + j);
    const auto grad = hn::Mul(vp, hn::Sub(hn::LoadU(df, ds + j), vdelta));
    hn::StoreU(hn::IfThenZeroElse(hn::Eq(vp, zero), grad), df, ds + j);
  }
}

// Soft-capping's chain rule on dS of one row: the gradient of the uncapped score is dS times
// 1 - tanh^2 (cap_grad); a zero dS (a hidden key) stays 0 whatever cap_grad holds, a NaN one
// NaN.
template <class DF>
HWY_INLINE void CapGradients(DF df, const float* HWY_RESTRICT cap_grad, float* HWY_RESTRICT ds) {
  const size_t n = hn::Lanes(df);
  const auto zero = hn::Zero(df);
  for (size_t j = 0; j < kKeys; j += n) {
    const auto grad = hn::LoadU(df, ds + j);
    hn::StoreU(hn::IfThenZeroElse(hn::Eq(grad, zero), hn::Mul(grad, hn::LoadU(df, cap_grad + j))),
               df, ds + j);
  }
}

// What a pair pass adds to.
struct Targets {
  bool key_grads = false;       // dV and dK of the key tile (in KeyTile)
  float* dq = nullptr;          // the tile's dQ rows, dim apart, or nullptr
  double* bias_grad = nullptr;  // T5: [num_heads, num_buckets] of this query tile, or nullptr
};

// The bucket of distance d (AttentionBackwardKernelArgs).
inline int64_t BucketAt(const internal::AttentionBackwardKernelArgs& args, int64_t d) {
  const int64_t extent = args.forward.relative_extent;
  if (d >= -extent && d <= extent) return args.relative_bucket[extent + d];
  if (args.forward.relative_far == nullptr) {
    return args.relative_bucket[d < 0 ? 0 : 2 * extent];
  }
  return internal::RelativePositionBucketUnchecked(args.forward.relative_far->buckets, d);
}

// The pass over one pair of tiles: rows [0, count) of the query tile (their Qs and dO rows at q
// and d_out, dim and value_dim apart) against the key tile.
template <class DF>
void PairPass(DF df, const internal::AttentionBackwardKernelArgs& args, const Shape& s,
              const KeyTile& kt, const Row* rows, const float* q, const float* d_out, size_t count,
              const PairScratch& ps, const Targets& to) {
  const size_t head_dim = static_cast<size_t>(args.forward.head_dim);
  const size_t value_dim = static_cast<size_t>(args.forward.value_dim);
  // S = Qs K^T, then P row by row.
  TileGemm(df, q, s.dim, 1, kt.k_t, kKeys, head_dim, ps.p, kKeys, count, kKeys, false);
  const bool capped = args.forward.softcap > 0.0f;
  for (size_t r = 0; r < count; ++r) {
    Weights(df, args, kt, rows[r], ps.p + r * kKeys, capped ? ps.cap_grad + r * kKeys : nullptr);
  }
  // dV += P^T dO (A(j, i) = P[i][j]).
  if (to.key_grads) {
    TileGemm(df, ps.p, 1, kKeys, d_out, s.value_dim, count, kt.dv, s.value_dim, kt.tk.keys,
             s.value_dim, true);
  }
  // dP = dO V^T, then dS in its place.
  TileGemm(df, d_out, s.value_dim, 1, kt.v_t, kKeys, value_dim, ps.ds, kKeys, count, kKeys, false);
  for (size_t r = 0; r < count; ++r) {
    ScoreGradients(df, ps.p + r * kKeys, rows[r].delta, ps.ds + r * kKeys);
  }
  // The T5 bias is added after soft-capping: its gradient is dS itself.
  if (to.bias_grad != nullptr) {
    for (size_t r = 0; r < count; ++r) {
      double* head = to.bias_grad + rows[r].state.head * args.num_buckets;
      const float* ds = ps.ds + r * kKeys;
      for (size_t j = 0; j < kt.tk.keys; ++j) {
        if (ds[j] != 0.0f) head[BucketAt(args, kt.tk.pos[j] - rows[r].state.pos)] += ds[j];
      }
    }
  }
  // q and k reach the scores through the cap: dS times its derivative.
  if (capped) {
    for (size_t r = 0; r < count; ++r) CapGradients(df, ps.cap_grad + r * kKeys, ps.ds + r * kKeys);
  }
  // dK += dS^T Qs, dQ += dS K.
  if (to.key_grads) {
    TileGemm(df, ps.ds, 1, kKeys, q, s.dim, count, kt.dk, s.dim, kt.tk.keys, s.dim, true);
  }
  if (to.dq != nullptr) {
    TileGemm(df, ps.ds, kKeys, 1, kt.k_rows, s.dim, kt.tk.keys, to.dq, s.dim, count, s.dim, true);
  }
}

// Packs the query side of the call (QuerySide).
template <typename T>
void PackQuerySide(const internal::AttentionBackwardKernelArgs& args, const Shape& s,
                   QuerySide& side) {
  const hn::ScalableTag<float> df;
  const internal::AttentionKernelArgs& a = args.forward;
  const int64_t total = a.num_kv_heads * s.rows;
  std::pair<int64_t, int64_t> key_range{0, 0};  // of every key position, for ALiBi's anchor
  if (a.alibi_slopes != nullptr && a.kv_tokens > 0) {
    const auto [min_it, max_it] = std::minmax_element(a.key_pos, a.key_pos + a.kv_tokens);
    key_range = {*min_it, *max_it};
  }
  side.q.resize(static_cast<size_t>(total) * s.dim);
  side.d_out.resize(static_cast<size_t>(total) * s.value_dim);
  side.rows.resize(static_cast<size_t>(total));
  const int64_t elements = total * (a.head_dim + 2 * a.value_dim);
  internal::ForRanges(total, elements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t g = i / s.rows, m = i % s.rows;
      Row& row = side.rows[static_cast<size_t>(i)];
      RowState& state = row.state;
      row.token = m / s.group;
      state.head = g * s.group + m % s.group;
      state.pos = a.query_pos[row.token];
      const internal::KeyInterval visible = internal::VisibleKeys(a, state.pos);
      state.lo = visible.lo;
      state.hi = visible.hi;
      state.slope = a.alibi_slopes != nullptr ? a.alibi_slopes[state.head] : 0.0f;
      if (a.relative_bias != nullptr) {
        state.bias = a.relative_bias + state.head * (2 * a.relative_extent + 1) + a.relative_extent;
      }
      // The true log-sum-exp to the forward kernel's, whose ALiBi distances start at the anchor
      // (attention_softmax-inl.h): the same for queries within the keys' range.
      row.lse = args.lse[row.token * a.num_heads + state.head];
      if (a.alibi_slopes != nullptr) {
        state.anchor = internal::AlibiAnchor(state.pos, key_range.first, key_range.second);
        if (std::isfinite(row.lse)) {
          row.lse = static_cast<float>(static_cast<double>(row.lse) +
                                       static_cast<double>(state.slope) *
                                           static_cast<double>(state.pos - state.anchor));
        }
      }
      row.q_scale = a.query_scales != nullptr ? a.query_scales[row.token] : a.scale;
      const T* q = static_cast<const T*>(a.q.data) + row.token * a.q.token_stride +
                   state.head * a.q.head_stride;
      PackRow(df, q, static_cast<size_t>(a.head_dim), row.q_scale,
              side.q.data() + static_cast<size_t>(i) * s.dim);
      float* d_out = side.d_out.data() + static_cast<size_t>(i) * s.value_dim;
      PackRow(df, args.d_out.Row(row.token, state.head), static_cast<size_t>(a.value_dim), 1.0f,
              d_out);
      const float* out = args.out.Row(row.token, state.head);
      float delta = 0.0f;
      for (int64_t e = 0; e < a.value_dim; ++e) delta += d_out[e] * out[e];
      row.delta = delta;
    }
  });
  side.tile_lo.assign(static_cast<size_t>(a.num_kv_heads * s.query_tiles),
                      std::numeric_limits<int64_t>::max());
  side.tile_hi.assign(side.tile_lo.size(), std::numeric_limits<int64_t>::min());
  for (int64_t i = 0; i < total; ++i) {
    const Row& row = side.rows[static_cast<size_t>(i)];
    if (row.lse == -std::numeric_limits<float>::infinity()) continue;  // sees nothing
    const size_t tile = static_cast<size_t>(i / s.rows * s.query_tiles +
                                            i % s.rows / static_cast<int64_t>(kQueryRows));
    side.tile_lo[tile] = std::min(side.tile_lo[tile], row.state.lo);
    side.tile_hi[tile] = std::max(side.tile_hi[tile], row.state.hi);
  }
}

// The key positions' range of every key tile.
inline void KeyTileRanges(const internal::AttentionKernelArgs& a, const Shape& s,
                          std::vector<int64_t>& min, std::vector<int64_t>& max) {
  min.resize(static_cast<size_t>(s.key_tiles));
  max.resize(min.size());
  for (int64_t t = 0; t < s.key_tiles; ++t) {
    const int64_t begin = t * static_cast<int64_t>(kKeys);
    const int64_t end = std::min(a.kv_tokens, begin + static_cast<int64_t>(kKeys));
    const auto [lo, hi] = std::minmax_element(a.key_pos + begin, a.key_pos + end);
    min[static_cast<size_t>(t)] = *lo;
    max[static_cast<size_t>(t)] = *hi;
  }
}

// Writes the first `cols` of each of `count` rows of acc (stride apart) to dst rows.
inline void WriteRows(const float* acc, size_t stride, size_t count, size_t cols,
                      const internal::RowsView<float>& dst, int64_t token0, int64_t head) {
  for (size_t j = 0; j < count; ++j) {
    std::memcpy(dst.Row(token0 + static_cast<int64_t>(j), head), acc + j * stride,
                cols * sizeof(float));
  }
}

template <typename T>
void AttentionBackwardT(const internal::AttentionBackwardKernelArgs& args) {
  const hn::ScalableTag<float> df;
  const internal::AttentionKernelArgs& a = args.forward;
  const size_t n = hn::Lanes(df);
  Shape s;
  s.dim = hwy::RoundUpTo(static_cast<size_t>(a.head_dim), n);
  s.value_dim = hwy::RoundUpTo(static_cast<size_t>(a.value_dim), n);
  s.group = a.num_heads / a.num_kv_heads;
  s.rows = a.q_tokens * s.group;
  s.query_tiles = hwy::DivCeil(s.rows, static_cast<int64_t>(kQueryRows));
  s.key_tiles = hwy::DivCeil(a.kv_tokens, static_cast<int64_t>(kKeys));
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_dim = static_cast<size_t>(a.value_dim);

  // Every thread below, this one included (without threads), flushes subnormals.
  const internal::FlushSubnormals flush;
  QuerySide side;
  PackQuerySide<T>(args, s, side);
  std::vector<int64_t> key_min, key_max;
  KeyTileRanges(a, s, key_min, key_max);
  // Whether query tile qt of head g sees a key of key tile kt.
  const auto meets = [&](int64_t g, int64_t qt, int64_t kt) {
    const size_t tile = static_cast<size_t>(g * s.query_tiles + qt);
    return key_min[static_cast<size_t>(kt)] <= side.tile_hi[tile] &&
           key_max[static_cast<size_t>(kt)] >= side.tile_lo[tile];
  };
  const auto rows_of = [&](int64_t g, int64_t qt) {
    return static_cast<size_t>(g * s.rows + qt * static_cast<int64_t>(kQueryRows));
  };
  const auto count_of = [&](int64_t qt) {
    return static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kQueryRows),
                                                 s.rows - qt * static_cast<int64_t>(kQueryRows)));
  };
  // T5: per query tile, [num_heads, num_buckets] in double (see the top of the file).
  std::vector<double> bias_grad;
  const size_t bias_floats = static_cast<size_t>(a.num_heads * args.num_buckets);
  if (args.relative_table_grad != nullptr) {
    bias_grad.assign(static_cast<size_t>(s.query_tiles) * bias_floats, 0.0);
  }
  const auto bias_of = [&](int64_t qt) {
    return bias_grad.empty() ? nullptr : bias_grad.data() + static_cast<size_t>(qt) * bias_floats;
  };

  // The key tile's dK and dV: the accumulators, walking every query tile of head g in order.
  const auto key_gradients = [&](int64_t g, int64_t kt_index, KeyTile& kt, const PairScratch& ps,
                                 float* dq_rows) {
    std::fill(kt.dk, kt.dk + kKeys * s.dim, 0.0f);
    std::fill(kt.dv, kt.dv + kKeys * s.value_dim, 0.0f);
    for (int64_t qt = 0; qt < s.query_tiles; ++qt) {
      if (!meets(g, qt, kt_index)) continue;
      const size_t first = rows_of(g, qt);
      Targets to;
      to.key_grads = true;
      if (dq_rows != nullptr) {
        to.dq = dq_rows + (first - rows_of(g, 0)) * s.dim;
        to.bias_grad = bias_of(qt);
      }
      PairPass(df, args, s, kt, side.rows.data() + first, side.q.data() + first * s.dim,
               side.d_out.data() + first * s.value_dim, count_of(qt), ps, to);
    }
    const int64_t key0 = kt_index * static_cast<int64_t>(kKeys);
    WriteRows(kt.dk, s.dim, kt.tk.keys, head_dim, args.dk, key0, g);
    WriteRows(kt.dv, s.value_dim, kt.tk.keys, value_dim, args.dv, key0, g);
  };
  // dQ rows [first, first + count) of head g (unscaled sums of dS K) to dq.
  const auto write_dq = [&](const float* acc, size_t first, size_t count) {
    for (size_t r = 0; r < count; ++r) {
      const Row& row = side.rows[first + r];
      float* dst = args.dq.Row(row.token, row.state.head);
      for (size_t d = 0; d < head_dim; ++d) dst[d] = acc[r * s.dim + d] * row.q_scale;
    }
  };
  const auto key_count = [&](int64_t kt) {
    return static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kKeys),
                                                 a.kv_tokens - kt * static_cast<int64_t>(kKeys)));
  };

  const int64_t work = a.q_tokens * a.num_heads * a.kv_tokens * (a.head_dim + a.value_dim);
  const bool threaded = work >= internal::kMinElementsForThreads && omp_get_max_threads() > 1;
  const int64_t threads = threaded ? omp_get_max_threads() : 1;
  const bool per_head = !args.force_two_phase && a.num_kv_heads >= threads;
  const size_t thread_floats = ThreadFloats(s);

  // NOLINTNEXTLINE(bugprone-branch-clone): the branches differ, in their OpenMP work sharing
  if (per_head) {
#pragma omp parallel if (threaded)
    {
      const internal::FlushSubnormals flush;
      internal::Scratch<float> scratch(thread_floats);
      internal::ScratchVector<float> dq(static_cast<size_t>(s.rows) * s.dim);
      KeyTile kt;
      PairScratch ps;
      Carve(s, scratch.get(), kt, ps);
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < a.num_kv_heads; ++g) {
        std::fill(dq.begin(), dq.end(), 0.0f);
        for (int64_t t = 0; t < s.key_tiles; ++t) {
          PackKeyTile<T>(args, s, g, t * static_cast<int64_t>(kKeys), key_count(t), kt);
          key_gradients(g, t, kt, ps, dq.data());
        }
        write_dq(dq.data(), rows_of(g, 0), static_cast<size_t>(s.rows));
      }
    }
  } else {
#pragma omp parallel if (threaded)
    {
      const internal::FlushSubnormals flush;
      internal::Scratch<float> scratch(thread_floats);
      hwy::AlignedFreeUniquePtr<float[]> dq = hwy::AllocateAligned<float>(kQueryRows * s.dim);
      KeyTile kt;
      PairScratch ps;
      Carve(s, scratch.get(), kt, ps);
      // Phase 1: dK and dV, an item per (KV head, key tile).
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < a.num_kv_heads * s.key_tiles; ++item) {
        const int64_t g = item / s.key_tiles, t = item % s.key_tiles;
        PackKeyTile<T>(args, s, g, t * static_cast<int64_t>(kKeys), key_count(t), kt);
        key_gradients(g, t, kt, ps, nullptr);
      }
      // Phase 2 (after the loop's barrier): dQ, an item per (KV head, query tile).
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < a.num_kv_heads * s.query_tiles; ++item) {
        const int64_t g = item / s.query_tiles, qt = item % s.query_tiles;
        const size_t first = rows_of(g, qt), count = count_of(qt);
        std::fill(dq.get(), dq.get() + kQueryRows * s.dim, 0.0f);
        Targets to;
        to.dq = dq.get();
        to.bias_grad = bias_of(qt);
        for (int64_t t = 0; t < s.key_tiles; ++t) {
          if (!meets(g, qt, t)) continue;
          PackKeyTile<T>(args, s, g, t * static_cast<int64_t>(kKeys), key_count(t), kt);
          PairPass(df, args, s, kt, side.rows.data() + first, side.q.data() + first * s.dim,
                   side.d_out.data() + first * s.value_dim, count, ps, to);
        }
        write_dq(dq.get(), first, count);
      }
    }
  }

  if (args.relative_table_grad != nullptr) {
    // [num_buckets, num_heads] from [query tile, num_heads, num_buckets], tiles in order.
    for (int64_t h = 0; h < a.num_heads; ++h) {
      for (int64_t b = 0; b < args.num_buckets; ++b) {
        double sum = 0.0;
        for (int64_t qt = 0; qt < s.query_tiles; ++qt) {
          sum += bias_grad[static_cast<size_t>(qt) * bias_floats +
                           static_cast<size_t>(h * args.num_buckets + b)];
        }
        args.relative_table_grad[b * a.num_heads + h] = static_cast<float>(sum);
      }
    }
  }
}

}  // namespace backward

// The per-target entry point: picks the storage type.
HWY_NOINLINE void AttentionBackwardImpl(const internal::AttentionBackwardKernelArgs& args) {
  if (args.forward.storage == StorageType::kBFloat16) {
    return backward::AttentionBackwardT<hwy::bfloat16_t>(args);
  }
  return backward::AttentionBackwardT<float>(args);
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_BACKWARD_KERNELS_INL_H_
