// The shared body of ApplyRope (posenc/rope.h) and ApplyMRope (posenc/mrope.h): validation, the
// kernel dispatch and the double reference, for one position stream or several. rope.cc implements
// it for float, BFloat16, Float16 and double; both public APIs are thin wrappers.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "posenc/batch.h"
#include "posenc/heads.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"

namespace posenc::internal {

// One call's rotation: which function reports errors, the rotation, and the positions.
struct RopeCall {
  std::string_view function;  // "rope" or "mrope", for the messages
  const Rope& rope;
  // 1-D RoPE: the positions list (mrope is null). Multi-stream: mrope and its streams.
  std::span<const int64_t> positions;
  const MRope* mrope = nullptr;
  PositionStreams streams;
};

template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<T> x);
template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<T> q, Heads<T> k);
template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out);
template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<const T> q_in, Heads<T> q_out,
                      Heads<const T> k_in, Heads<T> k_out);

// Validate, then rotate (nothing is written when validation fails).
template <typename T>
void RunRopeCall(const RopeCall& call, Heads<T> x, RopeDirection direction);
template <typename T>
void RunRopeCall(const RopeCall& call, Heads<T> q, Heads<T> k, RopeDirection direction);
template <typename T>
void RunRopeCall(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out,
                 RopeDirection direction);
template <typename T>
void RunRopeCall(const RopeCall& call, Heads<const T> q_in, Heads<T> q_out, Heads<const T> k_in,
                 Heads<T> k_out, RopeDirection direction);

// A batch (posenc/batch.h) in any form above: every element validated, and the memory the
// elements share, before anything is written; then one kernel call over batch x tokens when the
// views and positions fold into one, or over batch x heads when the positions are shared and the
// views fold into heads, else one call per element. `names` are the views' names in
// messages (a Batched view's own name takes precedence). P is std::span<const int64_t> (RoPE) or
// PositionStreams (M-RoPE).
template <typename P, typename... V>
void RunBatchedRopeCall(const RopeCall& call, const Batched<P>& positions, RopeDirection direction,
                        const std::array<std::string_view, sizeof...(V)>& names,
                        const Batched<V>&... views);

// The double reference on validated input (x_in and x_out may be the same memory).
template <typename T>
void RopeCallReference(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out,
                       RopeDirection direction);

}  // namespace posenc::internal
