// Decode's passes over one key tile (attention_kernels-inl.h drives them): a single query tile
// per KV head, so a work item takes every KV head of its keys and reads the keys and values where
// they lie, token by token, every head of a token before the next token (one token's heads are
// adjacent in a KV cache), so that it streams the cache front to back instead of touching one row
// per page; the query rows of all heads lie side by side. A decode step is memory-bound: its
// scores are dot products of the few query rows with a few key rows at a time as they stream
// past, and its weighted values a tile product of the weights with value rows read in place.
//
// Each pass fetches the rows of its next block of tokens (software prefetch) while it computes
// on the current one: the hardware prefetchers alone left the step waiting on memory. On an AMD
// EPYC Zen 5 (2 threads, `posenc bench --only "decode gqa" "decode cache"`, 8192 keys, three
// alternating runs each), the float32 step went from 1.26-1.51x to 1.09-1.17x one read of its
// cache, bfloat16 from 1.47-1.74x to 1.22-1.24x (which also dropped the value rows that bfloat16
// used to fetch during the scores).
#if defined(POSENC_ATTENTION_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_DECODE_INL_H_
#undef POSENC_ATTENTION_DECODE_INL_H_
#else
#define POSENC_ATTENTION_DECODE_INL_H_
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
#include "simd/prefetch.h"
#include "simd/simd_storage-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// The sum of v's 128-bit blocks, halving the vector in registers (a vector stored and read back
// in pieces waits for its store: the store cannot be forwarded to narrower loads).
template <class D, class V>
HWY_INLINE auto AddBlocks(D d, V v) {
  if constexpr (hn::MaxLanes(d) * sizeof(float) > 16) {
    const hn::Half<D> dh;
    return AddBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}
#endif

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
  const auto total = AddBlocks(df, sum);
  s[0] = hn::ExtractLane(total, 0);
  s[stride] = hn::ExtractLane(total, 1);
  s[2 * stride] = hn::ExtractLane(total, 2);
  s[3 * stride] = hn::ExtractLane(total, 3);
#endif
}

// Keys scored together by ScoreKeys: four rows times kScoreKeys keys of accumulators, plus the
// rows' and keys' vectors, fit AVX-512's 32 registers (AVX2 and SSE4 have 16).
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kScoreKeys = 4;
#else
constexpr size_t kScoreKeys = 2;
#endif

// Pass (1) for K keys: s[r stride + i] = q_r . k_i for the four rows of the block at q (padded
// rows, `q_stride` floats apart) and keys k_i = k + i k_stride, input or tile rows of `dim`
// elements. Each loaded vector of a key serves four rows and each of a row K keys, so that loads
// do not outnumber the FMAs.
template <size_t K, class DF, typename T>
HWY_INLINE void ScoreKeys(DF df, const float* HWY_RESTRICT q, size_t q_stride,
                          const T* HWY_RESTRICT k, size_t k_stride, size_t dim,
                          float* HWY_RESTRICT s, size_t stride) {
  static_assert(kRowBlock == 4, "SumOfLanes4 sums one key's four rows");
  const size_t n = hn::Lanes(df);
  hn::Vec<DF> acc[kRowBlock][K];
  for (size_t r = 0; r < kRowBlock; ++r) {
    for (size_t i = 0; i < K; ++i) acc[r][i] = hn::Zero(df);
  }
  // One step of the depth: the keys' vectors at d, each against the four rows' vectors.
  const auto step = [&](size_t d, const hn::Vec<DF>(&kd)[K]) HWY_ATTR {
    for (size_t r = 0; r < kRowBlock; ++r) {
      const auto qd = hn::LoadU(df, q + r * q_stride + d);
      for (size_t i = 0; i < K; ++i) acc[r][i] = hn::MulAdd(qd, kd[i], acc[r][i]);
    }
  };
  size_t d = 0;
  hn::Vec<DF> kd[K];
  for (; d + n <= dim; d += n) {
    for (size_t i = 0; i < K; ++i) kd[i] = LoadF32(df, k + i * k_stride + d);
    step(d, kd);
  }
  if (d < dim) {
    for (size_t i = 0; i < K; ++i) kd[i] = LoadPartialF32(df, k + i * k_stride + d, dim - d);
    step(d, kd);
  }
  for (size_t i = 0; i < K; ++i) {
    SumOfLanes4(df, acc[0][i], acc[1][i], acc[2][i], acc[3][i], s + i, stride);
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

  // (1) scores, kScoreKeys tokens at a time.
  const size_t k_stride = static_cast<size_t>(a.k.token_stride);
  for (size_t j = 0; j < keys; j += kScoreKeys) {
    const size_t count = std::min(kScoreKeys, keys - j);
    for (size_t h = 0; h < tiles.size(); ++h) {
      const T* k = k_tile + j * k_stride + tiles[h].g * a.k.head_stride;
      // The head's rows of the next kScoreKeys tokens are fetched now (see the top of the file),
      // given as distances from k: past the last token they are addresses, not pointers.
      for (size_t i = kScoreKeys; i < 2 * kScoreKeys; ++i) {
        internal::PrefetchLines(k, head_dim * sizeof(T), i * k_stride * sizeof(T));
      }
      for (size_t i = 0; i < block_count; ++i) {
        const size_t b = blocks[i];
        const float* q = tiles[h].q + b * kRowBlock * t.dim;
        float* s = scores(h, b) + j;
        if (t.bf16_dot) {  // the same products and sums as in prefill
          internal::ScoresBf16(QueryBits(t, tiles[h], b), BFloat16RowStride(t), Bits(k), k_stride,
                               count, head_dim, Bf16ScoreScale(a), s, t.score_stride);
        } else if (count == kScoreKeys) {
          ScoreKeys<kScoreKeys>(df, q, t.dim, k, k_stride, head_dim, s, t.score_stride);
        } else {
          for (size_t key = 0; key < count; ++key) {
            ScoreKeys<1>(df, q, t.dim, k + key * k_stride, 0, head_dim, s + key, t.score_stride);
          }
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
        OnlineSoftmaxRow(df, a, t.score_stride, t.key_offset, p, tk,
                         tiles[h].rows[b * kRowBlock + r]);
      }
    }
  }
  // (3) weighted values, a few tokens at a time: every head's rows of those tokens, the
  // accumulators in registers across the tokens (the old outputs scaled by the correction with
  // the first few).
  constexpr size_t kTokenBlock = 8;
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
  const size_t v_stride = static_cast<size_t>(a.v.token_stride);
  for (size_t j = 0; j < keys; j += kTokenBlock) {
    const size_t count = std::min(kTokenBlock, keys - j);
    for (size_t h = 0; h < tiles.size(); ++h) {
      const T* v = v_tile + j * v_stride + tiles[h].g * a.v.head_stride;
      // The head's value rows of the next kTokenBlock tokens are fetched now (see the top).
      for (size_t r = kTokenBlock; r < 2 * kTokenBlock; ++r) {
        internal::PrefetchLines(v, value_dim * sizeof(T), r * v_stride * sizeof(T));
      }
      for (size_t i = 0; i < block_count; ++i) {
        const size_t b = blocks[i];
        float correction[kRowBlock];  // the old outputs' scale, with the first tokens only
        for (size_t r = 0; r < kRowBlock; ++r) {
          correction[r] = j == 0 ? tiles[h].rows[b * kRowBlock + r].correction : 1.0f;
        }
        float* o = tiles[h].out + b * kRowBlock * t.value_dim;
        if (!visible_only.empty() && visible_only[h * (kQueryTile / kRowBlock) + b]) {
          if (j == 0) {  // every key of the tile at once: the correction applies once
            WeightedVisibleValues(scores(h, b), t.score_stride, v, v_stride, keys, value_dim,
                                  key_pos, tiles[h].rows + b * kRowBlock, o, t.value_dim);
          }
        } else if (t.bf16_dot) {  // weights rounded to bfloat16, as in prefill
          internal::WeightedValueRowsBf16(scores(h, b) + j, t.score_stride, count, Bits(v),
                                          v_stride, value_dim, t.value_dim, correction, o,
                                          t.value_dim);
        } else {
          WeightedValueRows(df, scores(h, b) + j, t.score_stride, v, v_stride, count, value_dim,
                            j == 0 ? correction : nullptr, kRowBlock, o, t.value_dim);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_DECODE_INL_H_
