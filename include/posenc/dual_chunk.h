// Dual chunk attention (An et al. 2024, "Training-Free Long-Context Scaling of Large Language
// Models", arXiv:2402.17463), as Qwen2.5-7B/14B-Instruct-1M ship it (`dual_chunk_attention_config`
// with chunk_size, local_size, original_max_position_embeddings) and vLLM serves it
// (DualChunkRotaryEmbedding and the dual-chunk attention backend): a RoPE model reads far past its
// trained context with no training, because every relative distance it scores stays below
// chunk_size.
//
// The sequence is cut into chunks of L = chunk_size - local_size positions; chunk c holds
// positions [c L, (c + 1) L). A key at position j is always rotated at j mod L. A query at
// position i in chunk c = floor(i / L) is rotated at one of three positions, by where the key is:
//
//   key in chunk c (intra):           q at i mod L                        distance i - j, exact
//   key in chunk c - 1 (successive):  q at min(i mod L + L, chunk_size)   exact while i mod L
//                                                                         <= local_size
//   key in chunks < c - 1 (inter):    q at min(2 L - 1, chunk_size)       at most chunk_size
//
// then s_ij = scale * f^2 * q' . k', one causal softmax over every key j <= i, and the weighted
// sum of v. f is the length scaling: with original_max_position_embeddings M > 0 and n the
// sequence length (the largest key position + 1),
//   f = max(1, 0.1 ln(n / M) + 1),
// which vLLM applies to the keys and to the softmax scale (or to the query when decoding): the
// scores gain f^2. With M = 0 there is none (f = 1).
//
// docs/DUAL_CHUNK.md has the derivation from vLLM's code, a worked example, and where posenc
// differs from vLLM (a decode step's length scaling).
//
// Shapes as Attention: q [q_tokens, num_heads, head_dim], k [kv_tokens, num_kv_heads, head_dim],
// v [kv_tokens, num_kv_heads, value_dim], out [q_tokens, num_heads, value_dim] (GQA: query head
// h reads key/value head h / (num_heads / num_kv_heads)). q and k are the model's un-rotated
// projections. A decode step is one query at its position against the cached keys and values.
//
// The fast path runs the tiled attention kernel once per part, with no [q_tokens, kv_tokens]
// buffer: the three parts see disjoint key sets (by chunk), so the softmax over their union is
// the log-sum-exp merge of the three partial attentions, as for Self-Extend.
#pragma once

#include <cstdint>
#include <span>

#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/storage.h"

namespace posenc {

// Which part of dual chunk attention scores a (query, key) pair.
enum class DualChunkPart {
  kIntra,       // the key is in the query's chunk
  kSuccessive,  // the key is in the chunk just before
  kInter,       // the key is in an earlier chunk
};

struct DualChunk {
  // Must satisfy chunk_size > local_size >= 1 (the chunk length L = chunk_size - local_size is
  // then >= 1), chunk_size <= kMaxPosition, original_max_position_embeddings in
  // [0, kMaxPosition]. vLLM's defaults are 8192 and 1024; Qwen2.5-1M's 262144 and 8192.
  int64_t chunk_size = 0;
  int64_t local_size = 0;
  // M of the length scaling f (see the top of the file); 0 means no length scaling.
  int64_t original_max_position_embeddings = 0;

  // Throws posenc::Error naming the field, its value and the rule.
  void Validate() const;

  // L: the positions of one chunk.
  int64_t ChunkLength() const { return chunk_size - local_size; }
  // The part that scores key position `key` for a query at `query` (key <= query).
  DualChunkPart PartOf(int64_t query, int64_t key) const;
  // The position that rotates key position `pos`: pos mod L (in every part).
  int64_t KeyPosition(int64_t pos) const { return pos % ChunkLength(); }
  // The position that rotates query position `pos` in `part` (the table at the top of the file).
  int64_t QueryPosition(DualChunkPart part, int64_t pos) const;
  // f for a sequence of `length` tokens: max(1, 0.1 ln(length / M) + 1), or 1 without M.
  double LengthScaling(int64_t length) const;
};

// Dual chunk attention. options.rope must be given (the rotation that dual chunk attention
// re-positions) and options.causal must be true (as in vLLM); options.scale keeps its meaning
// (times f^2); window, chunk_size, alibi, relative_bias, mrope, query_scale, softcap and sinks are
// not supported. Validates everything (the checks of Attention, then dca and the options above),
// throwing posenc::Error before out is touched, then runs the tiled kernel once per part that has
// keys and merges (see the top of the file).
void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca, Heads<const float> q,
                        Heads<const float> k, Heads<const float> v,
                        std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                        Heads<float> out);

// The same on bfloat16 storage, with the bfloat16 contract of Attention (posenc/attention.h):
// k is rotated once and q at each of its positions by the bfloat16 ApplyRope.
void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        Heads<const BFloat16> q, Heads<const BFloat16> k, Heads<const BFloat16> v,
                        std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                        Heads<float> out);

// Batched (posenc/batch.h), as Attention's batched forms: every element validated, and the
// memory the elements share, before out is touched.
void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        const Batched<Heads<const float>>& q, const Batched<Heads<const float>>& k,
                        const Batched<Heads<const float>>& v, const BatchedPositions& query_pos,
                        const BatchedPositions& key_pos, const Batched<Heads<float>>& out);
void DualChunkAttention(const AttentionOptions& options, const DualChunk& dca,
                        const Batched<Heads<const BFloat16>>& q,
                        const Batched<Heads<const BFloat16>>& k,
                        const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                        const BatchedPositions& key_pos, const Batched<Heads<float>>& out);

// The reference, in double: per query row, every key's score with q rotated (ApplyRopeReference)
// at the position of the key's part and k at its own, times scale f^2, the causal mask, one
// softmax, the weighted sum. Same contract as DualChunkAttention on float32 input, but assumes
// validated input.
void DualChunkAttentionReference(const AttentionOptions& options, const DualChunk& dca,
                                 Heads<const float> q, Heads<const float> k, Heads<const float> v,
                                 std::span<const int64_t> query_pos,
                                 std::span<const int64_t> key_pos, Heads<float> out);

}  // namespace posenc
