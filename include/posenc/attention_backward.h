// Training through attention: the forward pass that keeps each row's log-sum-exp, and the
// backward pass that turns the gradient of the output into the gradients of q, k, v and of T5's
// relative bias table, in the FlashAttention-2 style (Dao 2023, arXiv:2307.08691): scores are
// recomputed tile by tile from q, k and the saved log-sum-exp, so no [q_tokens, kv_tokens]
// buffer exists in either pass.
//
// With s_ij the score of posenc/attention.h (scale, query scale, RoPE, ALiBi or T5 bias, masks),
// p_ij = exp(s_ij - lse_i) over the visible keys, o_i = sum_j p_ij v_j and do_i the incoming
// gradient of o_i:
//
//   dv_j = sum_i p_ij do_i                      (summed over the query heads of v's KV head)
//   ds_ij = p_ij (do_i . v_j - do_i . o_i)      (the softmax's backward)
//   dq_i = scale c_i sum_j ds_ij k_j            (then RoPE's transpose, when q was rotated)
//   dk_j = sum_i scale c_i ds_ij q_i            (likewise; summed over the group's query heads)
//   dtable[b][h] = sum over (i, j) of head h whose bucket is b of ds_ij
//
// With soft-capping C, s_ij = C tanh(u_ij / C) + bias with u_ij = scale c_i q_i . k_j: the
// table's gradient takes ds_ij as above, and dq, dk take ds_ij (1 - tanh^2(u_ij / C)) in its
// place. With attention sinks, lse_i includes the sink (p_ij = exp(s_ij - lse_i) sums to
// 1 - exp(sink_h - lse_i)), the formulas above keep their form, and each sink gets
//
//   dsink_h = -sum_i exp(sink_h - lse_i) (do_i . o_i)   (over the rows of query head h)
//
// (o_i = sum_j p_ij v_j: the sink takes weight exp(sink_h - lse_i) from every key in
// proportion, d o_i / d sink_h = -exp(sink_h - lse_i) o_i).
//
// ALiBi slopes and masks are constants. A row that sees no key has zero output and gives zero
// gradients. The result is deterministic: the same bits for any number of threads.
#pragma once

#include <cstdint>
#include <span>

#include "posenc/attention.h"
#include "posenc/batch.h"
#include "posenc/heads.h"
#include "posenc/storage.h"

namespace posenc {

// Attention (posenc/attention.h) that also writes lse [q_tokens, num_heads] (dense, token-major):
// each row's log-sum-exp of its visible scores, max + log(sum); -inf for a row that sees no key.
// With options.sinks the sink is part of it: log(sum_j exp(s_ij) + exp(sink_h)), sink_h for a
// row that sees no key.
// Validated as Attention, plus lse.size() == q_tokens * num_heads.
void AttentionForward(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                      Heads<const float> v, std::span<const int64_t> query_pos,
                      std::span<const int64_t> key_pos, Heads<float> out, std::span<float> lse);
void AttentionForward(const AttentionOptions& options, Heads<const BFloat16> q,
                      Heads<const BFloat16> k, Heads<const BFloat16> v,
                      std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                      Heads<float> out, std::span<float> lse);

// Where the backward pass writes (float32; every element is written, none accumulated):
// dq like q, dk like k, dv like v, when options.relative_bias is given, the gradient of its
// table [num_buckets, num_heads] (without it, relative_bias_table must be empty), and when
// options.sinks is given, the gradient of each sink [num_heads] (without it, sinks must be
// empty).
struct AttentionGradients {
  Heads<float> dq;
  Heads<float> dk;
  Heads<float> dv;
  std::span<float> relative_bias_table;
  std::span<float> sinks;
};

// The backward pass of AttentionForward with the same options and inputs, given its out and lse
// and the gradient d_out of out (float32, out's shape). q, k and v are read as given (before
// RoPE): with rope or mrope, q and k are rotated again and dq, dk are turned back by the
// rotation's transpose. bfloat16 inputs are widened to float32; all arithmetic is float32.
// Validates everything (as Attention, plus the shapes of out, lse, d_out and each gradient, and
// that no gradient shares memory with an input or another gradient) before writing anything.
void AttentionBackward(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                       Heads<const float> v, std::span<const int64_t> query_pos,
                       std::span<const int64_t> key_pos, Heads<const float> out,
                       std::span<const float> lse, Heads<const float> d_out,
                       const AttentionGradients& grads);
void AttentionBackward(const AttentionOptions& options, Heads<const BFloat16> q,
                       Heads<const BFloat16> k, Heads<const BFloat16> v,
                       std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                       Heads<const float> out, std::span<const float> lse, Heads<const float> d_out,
                       const AttentionGradients& grads);

// Batched (posenc/batch.h), as Attention's batched forms. lse is [..., q_tokens, num_heads],
// dense over the batch too (batch count * q_tokens * num_heads entries, element after element).
void AttentionForward(const AttentionOptions& options, const Batched<Heads<const float>>& q,
                      const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
                      const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                      const Batched<Heads<float>>& out, std::span<float> lse);
void AttentionForward(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
                      const Batched<Heads<const BFloat16>>& k,
                      const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                      const BatchedPositions& key_pos, const Batched<Heads<float>>& out,
                      std::span<float> lse);

// The gradients of a batched backward pass: dq, dk and dv per element, and the gradients of the
// parameters the elements share (T5's table, the sinks) summed over the batch, in double, in
// element order.
struct BatchedAttentionGradients {
  Batched<Heads<float>> dq;
  Batched<Heads<float>> dk;
  Batched<Heads<float>> dv;
  std::span<float> relative_bias_table;
  std::span<float> sinks;
};
void AttentionBackward(const AttentionOptions& options, const Batched<Heads<const float>>& q,
                       const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
                       const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                       const Batched<Heads<const float>>& out, std::span<const float> lse,
                       const Batched<Heads<const float>>& d_out,
                       const BatchedAttentionGradients& grads);
void AttentionBackward(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
                       const Batched<Heads<const BFloat16>>& k,
                       const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                       const BatchedPositions& key_pos, const Batched<Heads<const float>>& out,
                       std::span<const float> lse, const Batched<Heads<const float>>& d_out,
                       const BatchedAttentionGradients& grads);

// The reference: the gradients of AttentionReference's definition, composed in double from the
// full score matrix of each row (no saved state: it recomputes the forward), then RoPE's
// transpose by the double ApplyRopeReference. Same contract as AttentionBackward, but assumes
// validated input.
void AttentionBackwardReference(const AttentionOptions& options, Heads<const float> q,
                                Heads<const float> k, Heads<const float> v,
                                std::span<const int64_t> query_pos,
                                std::span<const int64_t> key_pos, Heads<const float> d_out,
                                const AttentionGradients& grads);

}  // namespace posenc
