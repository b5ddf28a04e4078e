// posenc's position methods as torch autograd functions, so that a libtorch model trains through
// posenc's own kernels: the forward pass calls posenc, and so does the backward pass (the inverse
// rotation for RoPE, the gradient scatter for a learned table, the attention backward pass with
// RoPE and ALiBi inside). Nothing here re-implements a position method in torch ops.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "posenc/relative_bias.h"
#include "posenc/rope.h"

namespace posenc::study {

// A relative bias read from a table by T5's buckets of each key-query distance
// (posenc/relative_bias.h), added to the scores inside posenc's attention. table: float32
// [num_buckets, heads], a Parameter or computed from Parameters (it takes a gradient either way).
struct BucketBias {
  torch::Tensor table;
  RelativeBuckets buckets;
};

// x: float32 [batch, tokens, heads, head_dim]; positions: int64 [tokens], shared by the batch.
// Returns x rotated by `rope` (posenc::ApplyRope); its gradient is the inverse rotation.
torch::Tensor ApplyRopeAutograd(const torch::Tensor& x, const torch::Tensor& positions,
                                const Rope& rope);

// table: float32 [max_positions, d_model], a trainable Parameter; positions: int64 [tokens].
// Returns table rows [tokens, d_model] (posenc::LookupLearnedRows); the table's gradient is
// posenc::AccumulateLearnedGradient of the incoming one.
torch::Tensor LookupLearnedAutograd(const torch::Tensor& table, const torch::Tensor& positions);

// qkv: float32 [batch, tokens, 3, heads, head_dim], each token's q, k and v side by side (as a
// fused projection writes them, not yet rotated); positions: int64 [batch, tokens], increasing
// along each row, queries and keys alike. Returns causal attention [batch, tokens, heads,
// head_dim], scale 1 / sqrt(head_dim), by posenc::AttentionForward: q and k rotated by `rope`
// inside when given, ALiBi's bias for the heads (posenc::Alibi) when `alibi`, a bucket bias
// (T5's, or any bias of the distance alone written as one bucket per distance) when given. The
// gradients, d qkv in qkv's layout and d table, are posenc::AttentionBackward's: no
// [tokens, tokens] score matrix exists in either pass.
torch::Tensor CausalAttentionAutograd(const torch::Tensor& qkv, const torch::Tensor& positions,
                                      const std::optional<Rope>& rope, bool alibi,
                                      const std::optional<BucketBias>& bias = std::nullopt);

// The sinusoidal table [tokens, d_model] at `positions` (posenc::FillSinusoidal), a constant.
torch::Tensor SinusoidalTable(const torch::Tensor& positions, int64_t d_model);

}  // namespace posenc::study
