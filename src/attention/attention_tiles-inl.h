// The forward attention kernel's tiles (attention_kernels-inl.h): their shape, the query tile and
// the running state of its rows, and how input rows are widened and packed into them.
//
// A query tile holds kQueryTile rows of one KV head g, a row being a (query token, query head
// reading g) pair, so that grouped query heads share every key and value they read; row m is
// token m / group and head g group + m % group. Each row carries the interval [lo, hi] of key
// positions its masks leave it (causal, window, chunks and a minimum distance together leave
// one), so that one pair of comparisons masks a key and skips a tile.
#if defined(POSENC_ATTENTION_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_TILES_INL_H_
#undef POSENC_ATTENTION_TILES_INL_H_
#else
#define POSENC_ATTENTION_TILES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention_bf16.h"
#include "attention_kernels.h"
#include "hwy/highway.h"
#include "simd/simd_storage-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// The tile shape. 32 query rows share every packed key tile they read (from L2 or L3) and keep
// the scores of a tile pair, 32 x 64 floats, within 8 KiB; 64 keys keep a packed key and value
// tile of head_dim 128 within 64 KiB. Decode's passes take four rows at a time (a row block),
// which also bounds the rows prefill skips at the causal diagonal.
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

// A value element as float32, for the scalar paths below.
inline float ValueF32(float x) { return x; }
inline float ValueF32(hwy::bfloat16_t x) { return hwy::F32FromBF16(x); }

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
    const internal::KeyInterval visible = internal::VisibleKeys(a, row.pos);
    row.lo = visible.lo;
    row.hi = visible.hi;
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

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_TILES_INL_H_
