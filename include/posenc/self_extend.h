// Self-Extend (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
// Tuning", arXiv:2401.01325): a RoPE model reads past its trained context with no training, by
// scoring far keys at grouped (floor-divided) positions and near keys at their own.
//
// For query i and key j at distance d = query_pos[i] - key_pos[j], with group size G and
// neighbour window W:
//
//   d <  W (neighbours):  s_ij = scale q'(query_pos[i]) . k'(key_pos[j])
//   d >= W (group):       s_ij = scale q'(floor(query_pos[i] / G) + W - floor(W / G))
//                                      . k'(floor(key_pos[j] / G))
//
// where x'(p) is x rotated by options.rope at position p; then one softmax over the visible keys
// (causal, window and chunks of options, all in the original positions) and the weighted sum of
// v, as in posenc/attention.h. This is the formula of the authors' code (datamllab/LongLM,
// self_extend_patch/Llama.py: torch.where(neighbor_mask, neighbor_scores, group_scores), then
// softmax); the shift W - floor(W / G) makes the group distance at d = W about W - W / G, the
// neighbour scores' largest distance, so the two regions meet. Without causal, keys ahead of the
// query (d < 0) are neighbours. docs/SELF_EXTEND.md has the derivation, a worked example, and how
// llama.cpp's --grp-attn-n / --grp-attn-w differ.
//
// Shapes as Attention: q [q_tokens, num_heads, head_dim], k [kv_tokens, num_kv_heads, head_dim],
// v [kv_tokens, num_kv_heads, value_dim], out [q_tokens, num_heads, value_dim] (GQA: query head
// h reads key/value head h / (num_heads / num_kv_heads)). A decode step is one query at its
// position against the cached keys and values (not yet rotated: Self-Extend rotates each key at
// two positions).
//
// The fast path runs the tiled attention kernel twice with no [q_tokens, kv_tokens] buffer: the
// neighbour part (keys at d < W) and the group part (keys at d >= W) see disjoint key sets, so
// softmax over their union is the log-sum-exp merge of the two partial attentions.
#pragma once

#include <cstdint>
#include <span>

#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/storage.h"

namespace posenc {

struct SelfExtend {
  // G: keys farther than the window are scored at floor(pos / G). 1 leaves every position as it
  // is (plain RoPE attention). Must be in [1, kMaxPosition].
  int64_t group_size = 1;
  // W: keys at distance < W keep their own positions. Must be in [1, kMaxPosition].
  int64_t neighbor_window = 1;

  // Throws posenc::Error naming the field unless both are in range.
  void Validate() const;

  // The position that rotates key position `pos` in the group part: floor(pos / G).
  int64_t GroupKeyPosition(int64_t pos) const { return pos / group_size; }
  // The position that rotates query position `pos` in the group part:
  // floor(pos / G) + W - floor(W / G). (Only queries at pos >= W have group keys; for them this is
  // <= pos.)
  int64_t GroupQueryPosition(int64_t pos) const {
    return pos / group_size + neighbor_window - neighbor_window / group_size;
  }
};

// Self-Extend attention. options.rope must be given (the rotation that Self-Extend regroups);
// options.causal, scale, window and chunk_size keep their meaning in the original positions;
// alibi, relative_bias, mrope, query_scale, softcap and sinks are not supported. Validates
// everything (the checks of Attention, then se and the options above), throwing posenc::Error
// before out is touched, then runs the tiled kernel twice and merges (see the top of the file).
void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         Heads<const float> q, Heads<const float> k, Heads<const float> v,
                         std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                         Heads<float> out);

// The same on bfloat16 storage, with the bfloat16 contract of Attention (posenc/attention.h):
// q and k are rotated by the bfloat16 ApplyRope at each of their two positions.
void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         Heads<const BFloat16> q, Heads<const BFloat16> k, Heads<const BFloat16> v,
                         std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                         Heads<float> out);

// Batched (posenc/batch.h), as Attention's batched forms: every element validated, and the
// memory the elements share, before out is touched.
void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         const Batched<Heads<const float>>& q, const Batched<Heads<const float>>& k,
                         const Batched<Heads<const float>>& v, const BatchedPositions& query_pos,
                         const BatchedPositions& key_pos, const Batched<Heads<float>>& out);
void SelfExtendAttention(const AttentionOptions& options, const SelfExtend& se,
                         const Batched<Heads<const BFloat16>>& q,
                         const Batched<Heads<const BFloat16>>& k,
                         const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                         const BatchedPositions& key_pos, const Batched<Heads<float>>& out);

// The reference, as the paper's code computes it: both full score matrices in double (q and k
// rotated by ApplyRopeReference at the normal and at the grouped positions), the neighbour
// score where d < W and the group score elsewhere, the masks, one softmax, the weighted sum.
// Same contract as SelfExtendAttention on float32 input, but assumes validated input.
void SelfExtendAttentionReference(const AttentionOptions& options, const SelfExtend& se,
                                  Heads<const float> q, Heads<const float> k, Heads<const float> v,
                                  std::span<const int64_t> query_pos,
                                  std::span<const int64_t> key_pos, Heads<float> out);

}  // namespace posenc
