// The fused attention kernel's driver, compiled once per Highway target by attention_kernels.cc.
//
// Flash attention (Dao et al. 2022, "FlashAttention", arXiv:2205.14135) on the CPU: the
// [q_tokens, kv_tokens] score matrix never exists. A work item is one KV head g and one query
// tile (attention_tiles-inl.h); keys stream through in tiles of kKeyTile, each through three
// passes:
//   (1) scores s_j = (scale c q) . k_j, plus the ALiBi or T5 bias, -inf where a mask hides key j;
//   (2) online max and sum (attention_softmax-inl.h);
//   (3) weighted values o' = o exp(m - m') + sum_j p_j v_j.
// Prefill (attention_prefill-inl.h) packs every key tile once per call, keys along the vector
// lanes, and runs (1) and (3) as GEMM-shaped products over the whole query tile; decode
// (attention_decode-inl.h) streams the KV cache where it lies. The arithmetic, float32 FMAs or
// AVX512-BF16 dot products for bfloat16 inputs (attention_bf16.h), is chosen once per call.
// Tiles whose keys are all hidden from the tile's queries are skipped, so causal skips the upper
// triangle, a window leaves the band along the diagonal and chunks the blocks along it; only
// tiles that straddle a mask edge pay for the per-key mask. After the last tile, out = o / l, or
// zeros when no key was visible; an attention sink joins l there (MergePartials), once.
//
// Split-K (Flash-Decoding, Dao et al. 2023): when there are few (KV head, query tile) items, as
// in decode, the keys are cut into chunks that run as separate work items, each with its own
// m, l and o, merged per row by the log-sum-exp rule (MergePartials). Its partials take
// chunks x rows x value_dim floats, which only few items allow. Memory beyond the inputs: the
// packed key tiles of prefill (the size of k and v in float32), one query tile per thread (per KV
// head in decode) and the split-K partials.
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

#include "attention_bf16.h"
#include "attention_decode-inl.h"
#include "attention_kernels.h"
#include "attention_prefill-inl.h"
#include "attention_softmax-inl.h"
#include "attention_tiles-inl.h"
#include "hwy/highway.h"
#include "simd/kernel_threads.h"
#include "simd/scratch_memory.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

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
    const RowState& row = qt.rows[r];
    MergePartials(df, qt.out + r * t.value_dim, &row.max, &row.sum, 0, 1,
                  static_cast<size_t>(a.value_dim),
                  a.out + token * a.out_token_stride + head * a.out_head_stride,
                  a.lse != nullptr ? a.lse + token * a.num_heads + head : nullptr,
                  internal::KernelSink(a, head, row.pos, row.anchor));
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
      std::is_same_v<T, hwy::bfloat16_t> && kBf16DotTarget && internal::Bf16DotProductsPay();
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
  internal::ScratchVector<float> partials;
  if (chunks > 1) partials.resize(static_cast<size_t>(tile_items * chunks) * partial_floats);

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
            chunks > 1 ? partials.data() + (tile_item * chunks + chunk) * partial_floats : nullptr);
      }
    }

    // Split-K's second pass (after the loop's barrier): merge each row's chunks.
    if (chunks > 1) {
#pragma omp for schedule(static)
      for (int64_t tile_item = 0; tile_item < tile_items; ++tile_item) {
        const int64_t tile = tiles - 1 - tile_item / a.num_kv_heads;
        const int64_t g = tile_item % a.num_kv_heads;
        const int64_t first_row = tile * static_cast<int64_t>(kQueryTile);
        const float* slot = partials.data() + tile_item * chunks * partial_floats;
        const int64_t valid_rows =
            std::min<int64_t>(static_cast<int64_t>(kQueryTile), rows_total - first_row);
        for (int64_t r = 0; r < valid_rows; ++r) {
          const int64_t m = first_row + r;
          const int64_t token = m / group, head = g * group + m % group;
          const int64_t pos = a.query_pos[token];
          const float sink = internal::KernelSink(
              a, head, pos, internal::AlibiAnchor(pos, key_min_all, key_max_all));
          MergePartials(df, slot + 2 * kQueryTile + r * value_dim, slot + r, slot + kQueryTile + r,
                        partial_floats, static_cast<size_t>(chunks),
                        static_cast<size_t>(a.value_dim),
                        a.out + token * a.out_token_stride + head * a.out_head_stride,
                        a.lse != nullptr ? a.lse + token * a.num_heads + head : nullptr, sink);
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
