// FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context
// Transformers", arXiv:2310.04418): head h adds to the score of query i and key j <= i
//
//   bias_h(i, j) = f_h( psi(i - j) / psi(max(L, i)) ),   psi(x) = log(c x + 1),
//
// f an MLP from one input to one output per head (a hidden layer of 32 with ReLU), c > 0 and the
// threshold L > 0 learned. Dividing by psi of the query's position maps every distance into
// [0, 1], so a long window asks f only for inputs it was trained on (the interpolation); up to L
// the divisor is fixed, so short windows see plain distances (the threshold). Here c and L are
// used through their absolute values.
//
// The composed path. The bias depends on the query's position and not on the distance alone,
// and training needs its gradient in the MLP: posenc's attention kernel computes neither, so FIRE
// attends in plain torch ops (scores, bias, causal mask, softmax), with a [tokens, tokens] score
// matrix per head, and no call to posenc.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace posenc::study {

struct FireParameters {
  torch::nn::Linear hidden{nullptr};  // 1 -> 32
  torch::nn::Linear out{nullptr};     // 32 -> heads
  torch::Tensor c;                    // [1]
  torch::Tensor threshold;            // [1], L
};

// float32 [heads, tokens, tokens] at window positions 0 .. tokens - 1: bias_h(i, j) for j <= i;
// entries with j > i are those of distance 0 (the mask removes them).
torch::Tensor FireBias(const FireParameters& fire, int64_t tokens);

// Causal attention composed in torch: q, k, v float32 [batch, tokens, heads, head_dim] (k and v
// may have any strides), scale 1 / sqrt(head_dim), bias [heads, tokens, tokens] added to the
// scaled scores. Returns [batch, tokens, heads, head_dim].
torch::Tensor ComposedCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& bias);

}  // namespace posenc::study
