// The fused (flash-style) attention kernel behind Attention: an internal interface, free of
// Highway types, that attention.cc calls once per public call after validating everything and
// applying RoPE.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "posenc/heads.h"
#include "posenc/relative_bias.h"
#include "posenc/storage.h"
#include "relative_bias_internal.h"

namespace posenc::internal {

// One [tokens, heads, dim] input: row (t, h) starts at data + t * token_stride + h * head_stride
// (strides in elements of the storage type); each row is contiguous.
struct AttentionInput {
  const void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Everything the kernel needs, already validated (see Attention): q [q_tokens, num_heads,
// head_dim], k [kv_tokens, num_kv_heads, head_dim], v [kv_tokens, num_kv_heads, value_dim],
// out [q_tokens, num_heads, value_dim] (float32, disjoint from the inputs). q and k are already
// rotated by RoPE when the call asked for it.
struct AttentionKernelArgs {
  StorageType storage = StorageType::kFloat32;  // of q, k and v: kFloat32 or kBFloat16
  int64_t q_tokens = 0;
  int64_t kv_tokens = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // divides num_heads
  int64_t head_dim = 0;
  int64_t value_dim = 0;
  AttentionInput q, k, v;
  float* out = nullptr;
  int64_t out_token_stride = 0;
  int64_t out_head_stride = 0;
  const int64_t* query_pos = nullptr;  // q_tokens entries, >= 0
  const int64_t* key_pos = nullptr;    // kv_tokens entries, >= 0
  bool causal = false;
  int64_t window = 0;      // sliding window: visible iff query_pos - key_pos < window; 0 = none
  int64_t chunk_size = 0;  // visible iff query_pos / chunk_size == key_pos / chunk_size; 0 = none
  // Visible iff query_pos - key_pos >= min_distance (on top of the masks above); 0 = none. The
  // far part of Self-Extend (self_extend.cc): keys at least the neighbour window away.
  int64_t min_distance = 0;
  // Dual chunk attention's parts (dual_chunk.cc), with chunk_size: the chunk seen is the query's
  // own less chunk_lag (1: the chunk before it), and with earlier_chunks every chunk before that
  // one too. 0 and false: the query's own chunk, as above.
  int64_t chunk_lag = 0;
  bool earlier_chunks = false;
  const float* alibi_slopes = nullptr;  // num_heads entries, or nullptr without ALiBi
  float scale = 1.0f;                   // score scale, > 0
  // Per query token, the score scale times its query scale (replacing scale), or nullptr.
  const float* query_scales = nullptr;
  // T5 relative bias, or nullptr: [num_heads, 2 relative_extent + 1], the bias of head h at
  // distance d = key_pos - query_pos at relative_bias[h (2 relative_extent + 1) + relative_extent
  // + d] for |d| <= relative_extent. Farther, the bias is that at +-relative_extent, unless
  // relative_far is given: then it is relative_far's table at its bucket of d.
  const float* relative_bias = nullptr;
  int64_t relative_extent = 0;
  const RelativeBias* relative_far = nullptr;
  // When given, [q_tokens, num_heads] dense: each row's log-sum-exp of its visible scores,
  // max + log(sum), so that the outputs of calls over disjoint key sets can be merged
  // (self_extend.cc); -inf for a row that sees no key, NaN for a NaN row.
  float* lse = nullptr;
  // Logit soft-capping: each score (after the scale and query scale, before the bias and the
  // masks) becomes softcap tanh(s / softcap); 0 = off.
  float softcap = 0.0f;
  // Attention sinks, or nullptr: num_heads logits, each joining its head's softmax denominators
  // (in every row's log-sum-exp, never in a value sum).
  const float* sinks = nullptr;
};

// Runs on the best SIMD target of this CPU (one dispatch), with OpenMP threads over
// (key/value head, query tile) work items when the call is large enough to pay for them.
void AttentionKernel(const AttentionKernelArgs& args);

// T5: the bias of query head `head` at distance d = key_pos - query_pos, given the head's row of
// relative_bias at distance 0 (AttentionKernelArgs).
inline float RelativeBiasAt(const AttentionKernelArgs& a, const float* head_bias, int64_t head,
                            int64_t d) {
  const int64_t extent = a.relative_extent;
  if (d >= -extent && d <= extent) return head_bias[d];
  if (a.relative_far == nullptr) return head_bias[d < 0 ? -extent : extent];
  const int64_t bucket = RelativePositionBucketUnchecked(a.relative_far->buckets, d);
  return a.relative_far->table[static_cast<size_t>(bucket * a.num_heads + head)];
}

// ALiBi's anchor for a query at query_pos (attention_softmax-inl.h): the kernels measure
// distances from it, so the forward kernel's log-sum-exp is the true one plus
// slope (query_pos - anchor).
inline int64_t AlibiAnchor(int64_t query_pos, int64_t key_min, int64_t key_max) {
  return query_pos < key_min ? key_min : query_pos > key_max ? key_max : query_pos;
}

// The sink of query head `head` for a query at `pos` in the forward kernel's frame, whose ALiBi
// scores are the true ones plus slope (pos - anchor) (AlibiAnchor): -inf without sinks.
inline float KernelSink(const AttentionKernelArgs& a, int64_t head, int64_t pos, int64_t anchor) {
  if (a.sinks == nullptr) return -std::numeric_limits<float>::infinity();
  double sink = static_cast<double>(a.sinks[head]);
  if (a.alibi_slopes != nullptr) {
    sink += static_cast<double>(a.alibi_slopes[head]) * static_cast<double>(pos - anchor);
  }
  return static_cast<float>(sink);
}

// The key positions [lo, hi] that a query at `pos` sees: causal, the window, chunks (with their
// lag) and the minimum distance together leave one interval, empty (hi < lo or hi < 0) when
// nothing is visible. Positions are in [0, 2^32], window, chunk_size, min_distance in [1, 2^32]
// where used and chunk_lag in [0, 2]: no overflow.
struct KeyInterval {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
};
inline KeyInterval VisibleKeys(const AttentionKernelArgs& a, int64_t pos) {
  KeyInterval keys;
  if (a.causal) keys.hi = pos;
  if (a.window > 0) keys.lo = pos - a.window + 1;
  if (a.chunk_size > 0) {
    const int64_t chunk_begin = pos - pos % a.chunk_size - a.chunk_lag * a.chunk_size;
    if (!a.earlier_chunks) keys.lo = std::max(keys.lo, chunk_begin);
    keys.hi = std::min(keys.hi, chunk_begin + (a.chunk_size - 1));
  }
  if (a.min_distance > 0) keys.hi = std::min(keys.hi, pos - a.min_distance);
  return keys;
}

// The score scale a call asks for: `scale`, or 1 / sqrt(head_dim) when it is 0.
inline double ResolvedScale(double scale, int64_t head_dim) {
  return scale > 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// The part of AttentionKernelArgs every caller fills the same way: storage, shapes, the views of
// q, k, v and out, and the positions the masks read. Masks, biases and the scale are the caller's.
template <typename T>
AttentionKernelArgs KernelArgsFor(Heads<const T> q, Heads<const T> k, Heads<const T> v,
                                  std::span<const int64_t> query_pos,
                                  std::span<const int64_t> key_pos, Heads<float> out) {
  AttentionKernelArgs args;
  args.storage = StorageTypeOf<T>();
  args.q_tokens = q.tokens;
  args.kv_tokens = k.tokens;
  args.num_heads = q.num_heads;
  args.num_kv_heads = k.num_heads;
  args.head_dim = q.head_dim;
  args.value_dim = v.head_dim;
  args.q = {q.data, q.token_stride, q.head_stride};
  args.k = {k.data, k.token_stride, k.head_stride};
  args.v = {v.data, v.token_stride, v.head_stride};
  args.out = out.data;
  args.out_token_stride = out.token_stride;
  args.out_head_stride = out.head_stride;
  args.query_pos = query_pos.data();
  args.key_pos = key_pos.data();
  return args;
}

}  // namespace posenc::internal
