// Reading a RoPE model past its training length by changing only its attention, with no
// training: the zero-shot methods that live in an inference engine's KV cache rather than in the
// frequencies (those are the stretches of arms.h).
//
//   Self-Extend (Jin et al. 2024): keys closer than W keep their positions, farther ones are scored
//     at positions floor-divided by G (posenc::SelfExtendAttention, posenc/self_extend.h).
//   Dual chunk attention (An et al. 2024): keys at their position mod the chunk length, queries at
//     one of three positions by the key's chunk (intra, successive, inter), so no scored distance
//     exceeds chunk_size (posenc::DualChunkAttention, posenc/dual_chunk.h).
//   Attention sinks (StreamingLLM, Xiao et al. 2023): the cache holds the first `sinks` tokens and
//     a rolling window of the latest, `cache` tokens in all; each query sees only those. With
//     positions as in the cache (StreamingLLM's choice) no distance ever exceeds cache - 1; with
//     positions as in the text the sinks drift ever farther from the query.
//
// All are evaluation-only (no gradient) and compute, for every query of a window at once, what a
// token-by-token decode through the cache would (study_test.cc checks the sinks against
// posenc::KvCache with RollSinkWindow, and Self-Extend and dual chunk attention against their
// formulas in torch).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "posenc/dual_chunk.h"
#include "posenc/kv_cache.h"
#include "posenc/rope.h"
#include "posenc/self_extend.h"

namespace posenc::study {

struct LongContext {
  enum class Kind { kFull, kSelfExtend, kDualChunk, kSinks };
  Kind kind = Kind::kFull;  // kFull: every earlier token, at its own position
  SelfExtend self_extend;   // kSelfExtend: G and W
  DualChunk dual_chunk;     // kDualChunk: chunk_size and local_size
  int64_t sinks = 0;        // kSinks: the first tokens, kept for good
  int64_t cache = 0;        // kSinks: tokens the cache holds, sinks included
  SinkPositions positions = SinkPositions::kCache;  // kSinks
};

// q, k, v: float32 [batch, tokens, heads, head_dim], not rotated (innermost dimension contiguous);
// the window's positions are 0 .. tokens - 1. Return the attention output [batch, tokens, heads,
// head_dim], causal, scale 1 / sqrt(head_dim).
torch::Tensor SelfExtendRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const Rope& rope, const SelfExtend& se);
torch::Tensor DualChunkRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const Rope& rope, const DualChunk& dca);
torch::Tensor SinkRead(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const Rope& rope, int64_t sinks, int64_t cache, SinkPositions positions);

}  // namespace posenc::study
