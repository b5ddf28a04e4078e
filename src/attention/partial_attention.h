// Attention as a log-sum-exp merge of partial attentions over disjoint key sets, each on the
// tiled kernel with its own rotation of q and k: the machinery shared by Self-Extend
// (self_extend.cc: a neighbour and a group part) and dual chunk attention (dual_chunk.cc: intra-,
// successive- and inter-chunk parts). No [q_tokens, kv_tokens] buffer exists anywhere.
//
// For one query row, if the parts see disjoint sets of keys whose union is the row's keys, the
// softmax over the union is the merge of the parts: with L_p each part's log-sum-exp (max + log
// sum of its visible scores) and o_p its output,
//   out = sum_p exp(L_p - M) o_p / sum_p exp(L_p - M),  M = max_p L_p,
// and merging one part at a time (MergePartialAttention) gives the same.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "posenc/heads.h"
#include "posenc/rope.h"
#include "posenc/storage.h"
#include "simd/scratch_memory.h"

namespace posenc::internal {

// The masks of one partial attention, in the original positions (the fields of the same names in
// AttentionKernelArgs).
struct PartialMasks {
  bool causal = false;
  int64_t window = 0;
  int64_t chunk_size = 0;
  int64_t min_distance = 0;
  int64_t chunk_lag = 0;
  bool earlier_chunks = false;
};

// A dense copy of x rotated by `rope` at `positions` by the standalone op (the same SIMD kernel as
// Attention's), in x's storage type.
template <typename T>
ScratchVector<T> RotatedCopy(const Rope& rope, std::span<const int64_t> positions,
                             Heads<const T> x);

// ApplyRopeReference of x at `positions` into a dense float copy (for the double references).
std::vector<float> RotatedReferenceCopy(const Rope& rope, std::span<const int64_t> positions,
                                        Heads<const float> x);

// One partial attention on the tiled kernel: q and k as given (already rotated), the score scale,
// the masks, into out (any view) and, when lse is not null, each row's log-sum-exp into lse
// [q_tokens, num_heads] (-inf for a row that sees no key).
template <typename T>
void PartialAttention(const PartialMasks& masks, float scale, Heads<const T> q, Heads<const T> k,
                      Heads<const T> v, std::span<const int64_t> query_pos,
                      std::span<const int64_t> key_pos, Heads<float> out, float* lse);

// Merges one more part (part, part_lse) into the running result (out, lse), row by row, in
// double: a row whose part saw no key (-inf) keeps out; one whose running result saw none takes
// the part; NaN in either makes the row NaN. lse becomes the log-sum-exp of the union.
// out and part are [q_tokens, num_heads, value_dim]; lse and part_lse [q_tokens, num_heads].
void MergePartialAttention(Heads<float> out, float* lse, Heads<const float> part,
                           const float* part_lse);

}  // namespace posenc::internal
