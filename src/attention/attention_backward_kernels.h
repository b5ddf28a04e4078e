// The backward attention kernel behind AttentionBackward: an internal interface, free of Highway
// types, that attention_backward.cc calls once per call after validating everything and
// rotating q and k.
#pragma once

#include <cstdint>

#include "attention_kernels.h"
#include "posenc/relative_bias.h"

namespace posenc::internal {

// A float32 [tokens, heads, dim] view: row (t, h) at data + t token_stride + h head_stride.
template <typename T>
struct RowsView {
  T* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  T* Row(int64_t t, int64_t h) const { return data + t * token_stride + h * head_stride; }
};

struct AttentionBackwardKernelArgs {
  // q (rotated), k (rotated), v, shapes, positions, masks, ALiBi, query scales and T5's bias, as
  // the forward kernel takes them (its out and lse are not used).
  AttentionKernelArgs forward;
  RowsView<const float> out;    // [q_tokens, num_heads, value_dim]
  RowsView<const float> d_out;  // likewise
  const float* lse = nullptr;   // [q_tokens, num_heads]: the true log-sum-exp of each row
  RowsView<float> dq;           // [q_tokens, num_heads, head_dim]: gradient of rotated q
  RowsView<float> dk;           // [kv_tokens, num_kv_heads, head_dim]: of rotated k
  RowsView<float> dv;           // [kv_tokens, num_kv_heads, value_dim]
  // T5's table gradient [num_buckets, num_heads], or nullptr. relative_bucket[extent + d] is the
  // bucket of distance d for |d| <= forward.relative_extent; farther, the bucket is that at the
  // edge, unless forward.relative_far is given (then its buckets are looked up).
  float* relative_table_grad = nullptr;
  const int32_t* relative_bucket = nullptr;
  int64_t num_buckets = 0;
  // Tests: force the two-phase schedule (see attention_backward_kernels-inl.h) whatever the
  // thread count; both schedules give the same bits.
  bool force_two_phase = false;
};

// Runs on the best SIMD target of this CPU (one dispatch), with OpenMP threads.
void AttentionBackwardKernel(const AttentionBackwardKernelArgs& args);

}  // namespace posenc::internal
