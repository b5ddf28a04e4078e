#include "posenc/dual_chunk.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "attention_call.h"
#include "attention_kernels.h"
#include "attention_reference_row.h"
#include "float32_range.h"
#include "partial_attention.h"
#include "posenc/error.h"
#include "posenc/positions.h"

namespace posenc {
namespace {

constexpr std::string_view kFunction = "dual_chunk";
constexpr std::array<DualChunkPart, 3> kParts = {DualChunkPart::kIntra, DualChunkPart::kSuccessive,
                                                 DualChunkPart::kInter};

// The sequence length that sets the length scaling: the largest key position + 1 (the tokens of
// a sequence at positions 0 .. n - 1; vLLM's orig_seq_len).
int64_t SequenceLength(std::span<const int64_t> key_pos) {
  return key_pos.empty() ? 0 : *std::max_element(key_pos.begin(), key_pos.end()) + 1;
}

// The score scale with the length scaling: scale f^2, in double.
double ScaledScore(const AttentionOptions& options, const DualChunk& dca, int64_t head_dim,
                   std::span<const int64_t> key_pos) {
  const double f = dca.LengthScaling(SequenceLength(key_pos));
  return internal::ResolvedScale(options.scale, head_dim) * f * f;
}

// The positions that rotate each query in `part`.
std::vector<int64_t> QueryRotations(const DualChunk& dca, DualChunkPart part,
                                    std::span<const int64_t> query_pos) {
  std::vector<int64_t> rotation(query_pos.size());
  for (size_t i = 0; i < query_pos.size(); ++i) rotation[i] = dca.QueryPosition(part, query_pos[i]);
  return rotation;
}

std::vector<int64_t> KeyRotations(const DualChunk& dca, std::span<const int64_t> key_pos) {
  std::vector<int64_t> rotation(key_pos.size());
  for (size_t j = 0; j < key_pos.size(); ++j) rotation[j] = dca.KeyPosition(key_pos[j]);
  return rotation;
}

// The kernel's masks for `part`: causal, and the chunks of length L that the part sees (the
// query's own, the one before, or every one before that).
internal::PartialMasks MasksOf(const DualChunk& dca, DualChunkPart part) {
  internal::PartialMasks masks;
  masks.causal = true;
  masks.chunk_size = dca.ChunkLength();
  masks.chunk_lag = part == DualChunkPart::kIntra ? 0 : part == DualChunkPart::kSuccessive ? 1 : 2;
  masks.earlier_chunks = part == DualChunkPart::kInter;
  return masks;
}

// Whether some query may see some key of `part`: its chunk lag is at most the distance between
// the latest query's chunk and the earliest key's. Otherwise the part is not run.
bool PartHasKeys(const DualChunk& dca, DualChunkPart part, std::span<const int64_t> query_pos,
                 std::span<const int64_t> key_pos) {
  if (query_pos.empty() || key_pos.empty()) return false;
  const int64_t l = dca.ChunkLength();
  const int64_t latest_query = *std::max_element(query_pos.begin(), query_pos.end()) / l;
  const int64_t earliest_key = *std::min_element(key_pos.begin(), key_pos.end()) / l;
  return latest_query - earliest_key >= MasksOf(dca, part).chunk_lag;
}

// The fast path on validated input: k rotated once, then one partial attention per part that has
// keys, merged by log-sum-exp (partial_attention.h). The intra part writes straight into out.
template <typename T>
void FusedDualChunk(const AttentionOptions& options, const DualChunk& dca, Heads<const T> q,
                    Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out) {
  const Rope& rope = *options.rope;
  const float scale = static_cast<float>(ScaledScore(options, dca, q.head_dim, key_pos));
  const auto k_rotated = internal::RotatedCopy(rope, KeyRotations(dca, key_pos), k);
  const Heads<const T> keys =
      Heads<const T>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  const auto run = [&](DualChunkPart part, Heads<float> part_out, float* lse) {
    const auto q_rotated = internal::RotatedCopy(rope, QueryRotations(dca, part, query_pos), q);
    internal::PartialAttention(
        MasksOf(dca, part), scale,
        Heads<const T>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim), keys, v,
        query_pos, key_pos, part_out, lse);
  };

  const bool more = PartHasKeys(dca, DualChunkPart::kSuccessive, query_pos, key_pos);
  const size_t rows = static_cast<size_t>(q.tokens * q.num_heads);
  std::vector<float> lse(more ? rows : 0);
  run(DualChunkPart::kIntra, out, more ? lse.data() : nullptr);
  if (!more) return;
  std::vector<float> part_lse(rows);
  std::vector<float> part_out(rows * static_cast<size_t>(v.head_dim));
  const Heads<float> part = Heads<float>::Dense(part_out.data(), q.tokens, q.num_heads, v.head_dim);
  for (const DualChunkPart p : {DualChunkPart::kSuccessive, DualChunkPart::kInter}) {
    if (!PartHasKeys(dca, p, query_pos, key_pos)) continue;
    run(p, part, part_lse.data());
    internal::MergePartialAttention(out, lse.data(), part, part_lse.data());
  }
}

// Dual chunk attention's own checks, then Attention's (shapes, positions, rope, scale, aliasing),
// all before anything is written.
template <typename T>
void CheckDualChunk(const AttentionOptions& options, const DualChunk& dca, Heads<const T> q,
                    Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out) {
  dca.Validate();
  Require(options.rope.has_value(), kFunction, "options.rope",
          "be given (dual chunk attention re-positions RoPE)", "none");
  Require(options.causal, kFunction, "options.causal",
          "be true (dual chunk attention is causal, as in vLLM)", "false");
  const std::string_view unsupported = "not be given (not supported with dual chunk attention)";
  Require(options.window == 0, kFunction, "options.window", unsupported, options.window);
  Require(options.chunk_size == 0, kFunction, "options.chunk_size",
          "be 0 (dual chunk attention sets its own chunks: DualChunk::chunk_size)",
          options.chunk_size);
  Require(!options.mrope, kFunction, "options.mrope", unsupported, "an MRope");
  Require(!options.alibi, kFunction, "options.alibi", unsupported, "an Alibi");
  Require(!options.relative_bias, kFunction, "options.relative_bias", unsupported,
          "a RelativeBias");
  Require(!options.query_scale, kFunction, "options.query_scale", unsupported,
          "a LogFloorQueryScale");
  Require(options.softcap == 0.0, kFunction, "options.softcap", unsupported, options.softcap);
  Require(options.sinks.empty(), kFunction, "options.sinks", unsupported,
          std::to_string(options.sinks.size()) + " sinks");
  internal::CheckAttention(options, q, k, v, query_pos, key_pos, out);
  // The kernel scores in float32 with scale f^2 (f <= 0.1 ln 2^32 + 1 < 3.3): it must stay
  // representable.
  const double scaled = ScaledScore(options, dca, q.head_dim, key_pos);
  Require(internal::IsPositiveFloat32(scaled), kFunction,
          "options.scale times the length scaling squared",
          "be " + std::string(internal::kPositiveFloat32), scaled);
}

template <typename T>
void ValidatedDualChunk(const AttentionOptions& options, const DualChunk& dca, Heads<const T> q,
                        Heads<const T> k, Heads<const T> v, std::span<const int64_t> query_pos,
                        std::span<const int64_t> key_pos, Heads<float> out) {
  CheckDualChunk(options, dca, q, k, v, query_pos, key_pos, out);
  if (q.Empty()) return;
  FusedDualChunk(options, dca, q, k, v, query_pos, key_pos, out);
}

}  // namespace

void DualChunk::Validate() const {
  const std::string most = "be <= kMaxPosition (" + std::to_string(kMaxPosition) + ")";
  Require(local_size >= 1, kFunction, "local_size", "be >= 1", local_size);
  Require(chunk_size > local_size, kFunction, "chunk_size",
          "be > local_size (" + std::to_string(local_size) +
              "): the chunk length chunk_size - local_size must be >= 1",
          chunk_size);
  Require(chunk_size <= kMaxPosition, kFunction, "chunk_size", most, chunk_size);
  Require(original_max_position_embeddings >= 0, kFunction, "original_max_position_embeddings",
          "be >= 0 (0 means no length scaling)", original_max_position_embeddings);
  Require(original_max_position_embeddings <= kMaxPosition, kFunction,
          "original_max_position_embeddings", most, original_max_position_embeddings);
}

DualChunkPart DualChunk::PartOf(int64_t query, int64_t key) const {
  const int64_t l = ChunkLength();
  const int64_t lag = query / l - key / l;
  return lag <= 0   ? DualChunkPart::kIntra
         : lag == 1 ? DualChunkPart::kSuccessive
                    : DualChunkPart::kInter;
}

int64_t DualChunk::QueryPosition(DualChunkPart part, int64_t pos) const {
  const int64_t l = ChunkLength();
  switch (part) {
    case DualChunkPart::kIntra:
      return pos % l;
    case DualChunkPart::kSuccessive:
      return std::min(pos % l + l, chunk_size);
    case DualChunkPart::kInter:
      return std::min(2 * l - 1, chunk_size);
  }
  return pos % l;
}

double DualChunk::LengthScaling(int64_t length) const {
  if (original_max_position_embeddings == 0 || length <= original_max_position_embeddings) {
    return 1.0;
  }
  return 0.1 * std::log(static_cast<double>(length) /
                        static_cast<double>(original_max_position_embeddings)) +
         1.0;
}

void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca, Heads<const float> q,
                        Heads<const float> k, Heads<const float> v,
                        std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                        Heads<float> out) {
  ValidatedDualChunk(options, dca, q, k, v, query_pos, key_pos, out);
}

void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        Heads<const BFloat16> q, Heads<const BFloat16> k, Heads<const BFloat16> v,
                        std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                        Heads<float> out) {
  ValidatedDualChunk(options, dca, q, k, v, query_pos, key_pos, out);
}

namespace {

template <typename T>
void BatchedDualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                               const Batched<Heads<const T>>& q, const Batched<Heads<const T>>& k,
                               const Batched<Heads<const T>>& v, const BatchedPositions& query_pos,
                               const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  internal::RunAttentionBatch(
      kFunction, q, k, v, query_pos, key_pos, out,
      [&](int64_t, auto... views) { CheckDualChunk(options, dca, views...); },
      [&](int64_t, auto... views) { ValidatedDualChunk(options, dca, views...); });
}

}  // namespace

void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        const Batched<Heads<const float>>& q, const Batched<Heads<const float>>& k,
                        const Batched<Heads<const float>>& v, const BatchedPositions& query_pos,
                        const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  BatchedDualChunkAttention(options, dca, q, k, v, query_pos, key_pos, out);
}

void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        const Batched<Heads<const BFloat16>>& q,
                        const Batched<Heads<const BFloat16>>& k,
                        const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                        const BatchedPositions& key_pos, const Batched<Heads<float>>& out) {
  BatchedDualChunkAttention(options, dca, q, k, v, query_pos, key_pos, out);
}

void DualChunkAttentionReference(const AttentionOptions& options, const DualChunk& dca,
                                 Heads<const float> q, Heads<const float> k, Heads<const float> v,
                                 std::span<const int64_t> query_pos,
                                 std::span<const int64_t> key_pos, Heads<float> out) {
  // (1) RoPE: k once at its position mod L, q at the position of each part (vLLM's
  // DualChunkRotaryEmbedding: k_cache, q_cache, qc_cache, qc_cache[L - 1]).
  const Rope& rope = *options.rope;
  const std::vector<float> k_rotated =
      internal::RotatedReferenceCopy(rope, KeyRotations(dca, key_pos), k);
  const Heads<const float> keys =
      Heads<const float>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  std::array<std::vector<float>, 3> q_rotated;
  for (size_t p = 0; p < kParts.size(); ++p) {
    q_rotated[p] =
        internal::RotatedReferenceCopy(rope, QueryRotations(dca, kParts[p], query_pos), q);
  }

  const double scale = ScaledScore(options, dca, q.head_dim, key_pos);
  const int64_t heads_per_kv = q.num_heads / k.num_heads;
  std::vector<double> scores(static_cast<size_t>(k.tokens));
  std::vector<char> visible(static_cast<size_t>(k.tokens));
  std::vector<double> sum_v(static_cast<size_t>(v.head_dim));
  for (int64_t i = 0; i < q.tokens; ++i) {
    for (int64_t h = 0; h < q.num_heads; ++h) {
      const int64_t g = h / heads_per_kv;
      for (int64_t j = 0; j < k.tokens; ++j) {
        // (2) the score with q rotated for the key's part, in double.
        const size_t p = static_cast<size_t>(dca.PartOf(query_pos[i], key_pos[j]));
        const float* q_row = q_rotated[p].data() + (i * q.num_heads + h) * q.head_dim;
        const float* k_row = keys.Row(j, g);
        double dot = 0.0;
        for (int64_t d = 0; d < q.head_dim; ++d) {
          dot += static_cast<double>(q_row[d]) * static_cast<double>(k_row[d]);
        }
        scores[j] = scale * dot;
        // (3) causal: every earlier key, whatever its chunk.
        visible[j] = key_pos[j] <= query_pos[i];
      }
      // (4) one softmax over the visible keys, (5) the weighted sum of v.
      internal::SoftmaxWeightedRow(scores, visible, v, g, sum_v, out.Row(i, h));
    }
  }
}

}  // namespace posenc
