// From a public attention call to the kernel's arguments, shared by the forward pass
// (attention.cc) and the backward pass (attention_backward.cc), so that both validate the same
// way and hand the kernels the same rotated q and k, slopes, scales and bias tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention_kernels.h"
#include "batch_call.h"
#include "posenc/attention.h"
#include "posenc/batch.h"
#include "posenc/heads.h"
#include "simd/scratch_memory.h"

namespace posenc::internal {

// The checks of every attention call, whatever the storage type (`out` is written by the forward
// pass and read by the backward pass; either way it must not share memory with q, k or v).
// Throws posenc::Error naming function "attention".
template <typename T, typename Out>
void CheckAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<Out> out);

// "equal <what> (<value>)": the rule of every shape check.
std::string Equal(std::string_view what, int64_t value);

// Whether q and k turn by RoPE (1-D or multi-stream) before scoring.
bool Rotates(const AttentionOptions& options);

// A dense copy of x (q when is_query, else k) rotated at its tokens' positions, in x's own
// storage type: by the standalone op (ApplyRope / ApplyMRope: the same SIMD kernel, so the fused
// path and the op can never disagree on the rotation), or by its double reference.
template <typename T>
ScratchVector<T> RotatedCopy(const AttentionOptions& options, bool is_query,
                             std::span<const int64_t> positions, Heads<const T> x, bool reference);

// Turns dx (the gradient with respect to rotated q when is_query, else k) in place into the
// gradient with respect to the unrotated input: the rotation's transpose.
void UnrotateGradient(const AttentionOptions& options, bool is_query,
                      std::span<const int64_t> positions, Heads<float> dx, bool reference);

// T5's bias as the kernel reads it (AttentionKernelArgs::relative_bias): per head, the bias at
// every distance d in [-extent, extent], and whether farther distances need a bucket lookup.
// The buckets grow with |d| on each side up to the side's last; from `saturation` on, every
// distance is in the last bucket. The table spans saturation plus one key tile's reach, so
// that a tile of consecutive keys straddling the edge reads it without a lookup; a very large
// max_distance keeps the table small (kMaxDenseDistance) and looks farther buckets up.
struct RelativeBiasTable {
  std::vector<float> bias;  // [num_heads, 2 extent + 1]
  int64_t extent = 0;
  bool far_lookup = false;
};
RelativeBiasTable MakeRelativeBiasTable(const RelativeBias& relative);

// A validated call made ready for the kernels: RoPE applied into per-call copies of q and k,
// ALiBi slopes, the scale and per-query scales resolved, T5's bias tabulated, and the kernel
// arguments pointing at all of it (so the struct stays where it was made).
template <typename T>
struct PreparedAttention {
  PreparedAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out);
  PreparedAttention(const PreparedAttention&) = delete;
  PreparedAttention& operator=(const PreparedAttention&) = delete;

  ScratchVector<T> q_rotated, k_rotated;
  std::vector<float> slopes, query_scales;
  RelativeBiasTable relative;
  AttentionKernelArgs args;
};

// An attention call over a batch (posenc/batch.h): q, k, v and out share their batch dims, and
// positions are shared by the batch or have its dims. Runs check(b, q, k, v, query_pos, key_pos,
// out) on every element, then the aliasing check across the batch, then run(b, ...) on every
// element: never folded into tokens, where a query would see the keys of other elements. A batch
// without elements is checked on views without tokens.
template <typename T, typename Check, typename Run>
void RunAttentionBatch(std::string_view function, const Batched<Heads<const T>>& q,
                       const Batched<Heads<const T>>& k, const Batched<Heads<const T>>& v,
                       const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                       const Batched<Heads<float>>& out, const Check& check, const Run& run) {
  RequireSameBatch(function, q, k, "q", "k");
  RequireSameBatch(function, q, v, "q", "v");
  RequireSameBatch(function, q, out, "q", "out");
  RequirePositionsBatch(function, query_pos, q, "q");
  RequirePositionsBatch(function, key_pos, q, "q");
  const auto element = [&](const auto& call, int64_t b) {
    call(b, q.At(b), k.At(b), v.At(b), query_pos.At(b), key_pos.At(b), out.At(b));
  };
  if (q.BatchCount() == 0) {
    check(0, NoTokens(q.first), NoTokens(k.first), NoTokens(v.first), std::span<const int64_t>(),
          std::span<const int64_t>(), NoTokens(out.first));
    return;
  }
  const std::array<BatchRows, 4> rows{RowsOf(q, "q"), RowsOf(k, "k"), RowsOf(v, "v"),
                                      RowsOf(out, "out")};
  RunEachElement(
      function, q.BatchCount(), [&](int64_t b) { element(check, b); },
      [&](int64_t b) { element(run, b); }, rows);
}

extern template struct PreparedAttention<float>;
extern template struct PreparedAttention<BFloat16>;

}  // namespace posenc::internal
