// Prefill's key side and its passes over one key tile (attention_kernels-inl.h drives them).
#if defined(POSENC_ATTENTION_PREFILL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_PREFILL_INL_H_
#undef POSENC_ATTENTION_PREFILL_INL_H_
#else
#define POSENC_ATTENTION_PREFILL_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_bf16.h"
#include "attention_kernels.h"
#include "attention_softmax-inl.h"
#include "attention_tiles-inl.h"
#include "attention_values-inl.h"
#include "hwy/highway.h"
#include "simd/kernel_threads.h"
#include "simd/scratch_memory.h"
#include "tile_gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

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
  internal::ScratchVector<float> data;  // the pool keeps it for the next call
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
  packed.data.resize(static_cast<size_t>(count) * packed.tile_floats);
  packed.tiles.resize(static_cast<size_t>(count));
  const int64_t elements = a.kv_tokens * a.num_kv_heads * (a.head_dim + a.value_dim);
  internal::ForRanges(count, elements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t g = i / packed.key_tiles, key0 = i % packed.key_tiles * kKeyTile;
      const size_t keys = static_cast<size_t>(
          std::min<int64_t>(static_cast<int64_t>(kKeyTile), a.kv_tokens - key0));
      float* k_t = packed.data.data() + static_cast<size_t>(i) * packed.tile_floats;
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
void AttendPackedTile(const internal::AttentionKernelArgs& a, const Tiles& t,
                      const PackedKeyTile& kt, QueryTile& qt) {
  const hn::ScalableTag<float> df;
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
  for (size_t r = 0; r < rows; ++r) {
    OnlineSoftmaxRow(df, a, t.score_stride, kt.key_offset, scores + r * t.score_stride, tk,
                     qt.rows[r0 + r]);
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
    const size_t r0 = b0 * kRowBlock, rows = (b1 - b0) * kRowBlock;
    float correction[kQueryTile];
    for (size_t r = 0; r < rows; ++r) correction[r] = qt.rows[r0 + r].correction;
    WeightedValueRows(df, t.scores + r0 * t.score_stride, t.score_stride, kt.v, t.value_dim,
                      tk.keys, t.value_dim, correction, rows, qt.out + r0 * t.value_dim,
                      t.value_dim);
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

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_PREFILL_INL_H_
