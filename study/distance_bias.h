// Biases that depend on the key-query distance alone, inside posenc's attention: T5's bucketed
// table (Raffel et al. 2020) as it is, and any other function of the distance written as a T5
// table with one bucket per distance. posenc's kernel then adds it in the forward pass and
// returns the table's gradient in the backward pass (posenc/attention_backward.h), from which
// torch carries it to the parameters the table was computed from.
//
// KERPLE, logarithmic variant (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
// Embedding for Length Extrapolation", arXiv:2205.09921): head h adds
//
//   bias_h(d) = -r1_h log(1 + r2_h d),   d = query position - key position >= 0,
//
// with r1_h, r2_h > 0 learned (here each kept >= kKerpleMinimum, as a clamp).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "posenc/relative_bias.h"
#include "positions_autograd.h"

namespace posenc::study {

inline constexpr double kKerpleMinimum = 0.01;

// Causal buckets with bucket d for every distance d < tokens: num_buckets = 2 tokens, so that
// max_exact = num_buckets / 2 = tokens (posenc/relative_bias.h); rows tokens .. 2 tokens - 1 of
// the table are never read.
RelativeBuckets OneBucketPerDistance(int64_t tokens);

// float32 [2 tokens, heads] for OneBucketPerDistance(tokens): row d < tokens is KERPLE's log bias
// at distance d, the others zero. r1, r2: float32 [heads] (clamped to kKerpleMinimum).
torch::Tensor KerpleLogTable(const torch::Tensor& r1, const torch::Tensor& r2, int64_t tokens);

// KERPLE's bias in posenc's attention for a window of `tokens`.
BucketBias KerpleLogBias(const torch::Tensor& r1, const torch::Tensor& r2, int64_t tokens);

}  // namespace posenc::study
