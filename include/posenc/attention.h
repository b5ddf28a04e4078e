// Multi-head scaled dot-product attention, where RoPE and ALiBi live:
//
//   out[i, h] = sum_j softmax_j( scale * c_i * q'[i, h] . k'[j, g] + bias_h(i, j) ) v[j, g]
//
// q' and k' are q and k rotated by RoPE at their positions (when rope is given), c_i is the
// query scale at query_pos[i] (when query_scale is given; 1 without), bias_h is the ALiBi bias
// -slope[h] * (qpos_i - kpos_j) (when alibi is given) or the T5 relative bias
// table[bucket(kpos_j - qpos_i)][h] (when relative_bias is given; never both), and
// g = h / (num_heads / num_kv_heads) is the key/value head that query head h reads (grouped-query
// attention; g = h for plain multi-head attention). With causal, key j is visible to query i only
// when key_pos[j] <= query_pos[i]. With a sliding window W > 0, key j is visible to query i only
// when query_pos[i] - key_pos[j] < W: with causal, the query sees itself and the W - 1 keys
// before it (Mistral's sliding window; Hugging Face's and FlashAttention's
// window_size_left = W - 1). Without causal the window only limits how far back a key may lie;
// keys ahead stay visible. With chunks of C > 0 tokens (Llama 4's chunked attention, Hugging
// Face's chunked_overlay), key j is visible to query i only when
// floor(query_pos[i] / C) == floor(key_pos[j] / C), on top of causal and the window: every mask
// leaves each query one interval of key positions. Queries and keys carry their own positions, so
// one decode step against a KV cache is a single query at position T attending to keys 0 .. T.
//
// Two options of the softmax itself (both off by default):
// - softcap C > 0 (logit soft-capping, Gemma 2's attn_logit_softcapping, ggml_flash_attn_ext's
//   logit_softcap): the scaled score becomes C tanh(scale c_i q'[i, h] . k'[j, g] / C) before
//   anything else touches it: the ALiBi or T5 bias is added to the capped score, and the masks
//   act after that. So
//     s_ij = C tanh(scale c_i q'_i . k'_j / C) + bias_h(i, j),
//   as Hugging Face's Gemma 2 (scores * scaling, then tanh(scores / C) * C, then + mask) and ggml
//   (softcap, then + mask, where ggml's ALiBi lives) compute it.
// - sinks (gpt-oss): one logit sink_h per query head that joins every row's softmax
//   denominator but adds no value: out[i, h] = sum_j exp(s_ij) v_j / (sum_j exp(s_ij) +
//   exp(sink_h)) over the visible keys j, Hugging Face's GptOssAttention (the sink concatenated
//   as a last column of the scores, the softmax taken, the column dropped). A query with no
//   visible key still gets zeros; the log-sum-exp of posenc/attention_backward.h includes the
//   sink (log(sum_j exp(s_ij) + exp(sink_h)); sink_h for a row that sees no key).
//
// Shapes: q [q_tokens, num_heads, head_dim], k [kv_tokens, num_kv_heads, head_dim],
// v [kv_tokens, num_kv_heads, value_dim], out [q_tokens, num_heads, value_dim].
// A query with no visible key (possible only with a mask and unusual positions) gets zeros. NaN
// and inf propagate as in the math (and PyTorch): a NaN score (NaN in q, or in a key the query
// sees) makes the query's whole row NaN; inf or NaN in a value row reaches every query that sees
// that key, even with a weight that underflowed to 0; keys hidden by the mask are not part of the
// sum, so nothing in them reaches the query. Zero query tokens or heads: a no-op.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "posenc/alibi.h"
#include "posenc/batch.h"
#include "posenc/heads.h"
#include "posenc/mrope.h"
#include "posenc/query_scale.h"
#include "posenc/relative_bias.h"
#include "posenc/rope.h"
#include "posenc/storage.h"

namespace posenc {

struct AttentionOptions {
  bool causal = false;
  std::optional<Alibi> alibi;  // its LocalHeads() must equal num_heads
  std::optional<Rope> rope;    // its head_dim must equal q's and k's head_dim
  double scale = 0.0;          // score scale; 0 means 1 / sqrt(head_dim)
  // Sliding window: key j is visible to query i only when query_pos[i] - key_pos[j] < window.
  // 0 means no window; must be >= 0.
  int64_t window = 0;
  // Chunked attention (Llama 4): key j is visible to query i only when
  // floor(query_pos[i] / chunk_size) == floor(key_pos[j] / chunk_size). 0 means no chunks; must
  // be >= 0.
  int64_t chunk_size = 0;
  // The scores of query i times query_scale->At(query_pos[i]), the same as scaling q after RoPE
  // (Llama 4's NoPE temperature tuning, Ministral 3's llama_4_scaling_beta). scale times the
  // largest query's factor must stay a positive float32.
  std::optional<LogFloorQueryScale> query_scale;
  // T5: table[bucket(key_pos[j] - query_pos[i])][h] added to head h's scores, after the score
  // scale (T5 itself scores with scale = 1.0). Its num_heads must equal q's num_heads; not with
  // alibi. The table is read during the call, not copied.
  std::optional<RelativeBias> relative_bias;
  // Multi-stream RoPE instead of `rope` (posenc/mrope.h: M-RoPE of Qwen-VL, 2-D RoPE of vision
  // towers): q and k turn by their position streams, mrope_query_pos [num_streams, q_tokens] and
  // mrope_key_pos [num_streams, kv_tokens], while causal order, windows, chunks, ALiBi, query
  // scales and relative biases keep following query_pos and key_pos, the token order (once
  // positions are 3-D the two differ: an image's tokens share a time position but not an order).
  // A decode step after an image continues at query_pos = T and streams T + rope_deltas
  // (posenc/mrope_positions.h). Not with rope; its head_dim must equal q's. The streams are read
  // during the call, not copied. Last, so that positional initialisers of the fields above keep
  // their meaning.
  std::optional<MRope> mrope;
  PositionStreams mrope_query_pos;
  PositionStreams mrope_key_pos;
  // Logit soft-capping (see the top of the file): each scaled score s becomes
  // softcap * tanh(s / softcap) before the ALiBi or T5 bias and the masks. 0 means off;
  // otherwise finite and > 0 (a positive normal float32).
  double softcap = 0.0;
  // Attention sinks (see the top of the file): empty, or one finite logit per query head
  // (num_heads entries; with head-sharded ALiBi, the local heads'), in the scores' units (after
  // scale and soft-capping: it is not capped). Read during the call, not copied.
  std::span<const float> sinks;
};

// Validates everything (views, shapes, grouping, positions, rope or mrope and its streams, alibi,
// scale, window, chunk_size, query_scale, relative_bias, softcap, sinks, and that no row of out
// shares a byte with a row of q, k or v: an exact test, so out may be a slot of a fused buffer
// that q, k or v are slices of),
// throwing posenc::Error before out is touched, then runs the kernel.
void Attention(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
               Heads<const float> v, std::span<const int64_t> query_pos,
               std::span<const int64_t> key_pos, Heads<float> out);

// The same on bfloat16 storage (posenc/storage.h): products of q and k, and of weights and v,
// are exact and all sums float32; out is float32. On CPUs with AVX512-BF16 the kernel multiplies
// bfloat16 directly (twice the float32 rate), rounding the softmax weights to bfloat16 (nearest
// even) for the weighted sum of values, as FlashAttention does on GPUs: each weight moves by at
// most 2^-9 of itself, each output by at most 2^-9 max |v|; elsewhere the weights stay float32.
// A decode step equals the last row of the prefill either way. RoPE rotates q and k by the
// bfloat16 ApplyRope (float32 rotation, one rounding back to bfloat16, as a bfloat16 model would
// store them). Its reference is AttentionReference on the widened inputs.
void Attention(const AttentionOptions& options, Heads<const BFloat16> q, Heads<const BFloat16> k,
               Heads<const BFloat16> v, std::span<const int64_t> query_pos,
               std::span<const int64_t> key_pos, Heads<float> out);

// Batched (posenc/batch.h): q, k, v and out [..., tokens, heads, dim] with one batch shape and
// any batch strides (a transposed Hugging Face [batch, heads, seq, dim] tensor included);
// query_pos and key_pos shared by the batch or one list per element. Each element attends to its
// own keys. Every element is validated, and the memory the elements share, before out is touched;
// a later element's error ends "(in batch element b)".
void Attention(const AttentionOptions& options, const Batched<Heads<const float>>& q,
               const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
               const BatchedPositions& query_pos, const BatchedPositions& key_pos,
               const Batched<Heads<float>>& out);
void Attention(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
               const Batched<Heads<const BFloat16>>& k, const Batched<Heads<const BFloat16>>& v,
               const BatchedPositions& query_pos, const BatchedPositions& key_pos,
               const Batched<Heads<float>>& out);

// The reference: the unfused composition in double (rotate, score, bias, mask, softmax, weighted
// sum), the definition every fast attention kernel must match. Same contract as Attention, but
// assumes validated input. RoPE is applied by ApplyRopeReference into float copies of q and k
// (the standalone op's own rotation); scores, softmax and the weighted sum are in double.
void AttentionReference(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                        Heads<const float> v, std::span<const int64_t> query_pos,
                        std::span<const int64_t> key_pos, Heads<float> out);

}  // namespace posenc
