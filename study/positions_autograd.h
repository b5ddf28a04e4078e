// posenc's position methods as torch autograd functions, so that a libtorch model trains through
// posenc's own kernels: the forward pass calls posenc, and so does the backward pass (the inverse
// rotation for RoPE, the gradient scatter for a learned table). Nothing here re-implements a
// position method in torch ops.
#pragma once

#include <torch/torch.h>

#include "posenc/rope.h"

namespace posenc::study {

// x: float32 [batch, tokens, heads, head_dim]; positions: int64 [tokens], shared by the batch.
// Returns x rotated by `rope` (posenc::ApplyRope); its gradient is the inverse rotation.
torch::Tensor ApplyRopeAutograd(const torch::Tensor& x, const torch::Tensor& positions,
                                const Rope& rope);

// table: float32 [max_positions, d_model], a trainable Parameter; positions: int64 [tokens].
// Returns table rows [tokens, d_model] (posenc::LookupLearnedRows); the table's gradient is
// posenc::AccumulateLearnedGradient of the incoming one.
torch::Tensor LookupLearnedAutograd(const torch::Tensor& table, const torch::Tensor& positions);

// scores: float32 [batch, heads, queries, keys], queries and keys both at `positions`. Returns
// scores + ALiBi bias (posenc::AlibiSlopes / AlibiBias for `heads` heads); the bias is a constant,
// so the gradient passes through unchanged.
torch::Tensor AddAlibiAutograd(const torch::Tensor& scores, const torch::Tensor& positions);

// The sinusoidal table [tokens, d_model] at `positions` (posenc::FillSinusoidal), a constant.
torch::Tensor SinusoidalTable(const torch::Tensor& positions, int64_t d_model);

}  // namespace posenc::study
