#include "posenc/rope.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "batch_call.h"
#include "float32_range.h"
#include "posenc/error.h"
#include "posenc/positions.h"
#include "posenc/storage.h"
#include "rope_call.h"
#include "rope_kernels.h"
#include "rows.h"

namespace posenc {
namespace {

constexpr std::string_view kFn = "rope";

using internal::RopeCall;

// The dimension rules shared by Rope::Validate and Rope::Default.
void ValidateDims(int64_t head_dim, int64_t rotary_dim, int64_t rotary_offset) {
  Require(head_dim > 0, kFn, "head_dim", "be positive", head_dim);
  Require(rotary_offset >= 0, kFn, "rotary_offset", "be >= 0", rotary_offset);
  Require(rotary_dim >= 2, kFn, "rotary_dim", "be >= 2", rotary_dim);
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim) {  // the message only on failure
    Require(false, kFn, "rotary_dim", "be even and <= head_dim (" + std::to_string(head_dim) + ")",
            rotary_dim);
  }
  // Subtracted, not added: rotary_offset + rotary_dim could overflow.
  if (rotary_offset > head_dim - rotary_dim) {
    Require(false, kFn, "rotary_offset",
            "be <= head_dim - rotary_dim (" + std::to_string(head_dim) + " - " +
                std::to_string(rotary_dim) + " = " + std::to_string(head_dim - rotary_dim) + ")",
            rotary_offset);
  }
}

// The rotation (first) and the positions of `tokens` tokens (after the first view, whose tokens
// they count).
void ValidateRotation(const RopeCall& call) {
  if (call.mrope == nullptr) {
    call.rope.Validate();
  } else {
    call.mrope->Validate();
  }
}
void ValidatePositionsOf(const RopeCall& call, int64_t tokens) {
  if (call.mrope == nullptr) {
    ValidatePositions(call.function, call.positions, tokens);
  } else {
    call.streams.Validate(call.function, "positions", call.mrope->num_streams, tokens);
  }
}

// One view: well formed and rope.head_dim wide.
template <typename T>
void ValidateView(const RopeCall& call, const Heads<T>& view, std::string_view name) {
  view.Validate(call.function, name);
  if (view.head_dim != call.rope.head_dim) {
    Require(false, call.function, std::string(name) + ".head_dim",
            "equal rope.head_dim (" + std::to_string(call.rope.head_dim) + ")", view.head_dim);
  }
}

// A view after the first: as many tokens as the first.
template <typename T, typename U>
void ValidateSameTokens(const RopeCall& call, const Heads<T>& first, const Heads<U>& view,
                        std::string_view first_name, std::string_view name) {
  if (view.tokens == first.tokens) return;
  Require(false, call.function, std::string(name) + ".tokens",
          "equal " + std::string(first_name) + ".tokens (" + std::to_string(first.tokens) + ")",
          view.tokens);
}

template <typename T>
void ValidateSameHeads(const RopeCall& call, const Heads<const T>& in, const Heads<T>& out,
                       std::string_view in_name, std::string_view out_name) {
  if (out.num_heads == in.num_heads) return;
  Require(false, call.function, std::string(out_name) + ".num_heads",
          "equal " + std::string(in_name) + ".num_heads (" + std::to_string(in.num_heads) + ")",
          out.num_heads);
}

template <typename A, typename B>
void RequireDisjoint(const RopeCall& call, const Heads<A>& a, const Heads<B>& b,
                     std::string_view a_name, std::string_view b_name) {
  if (!internal::RowsOverlap(a, b)) return;
  Require(false, call.function, a_name, "not share memory with " + std::string(b_name),
          "overlapping views");
}

// An (input, output) pair of views; the same memory when in place.
template <typename T>
struct InOut {
  Heads<const T> in;
  Heads<T> out;
};

// The single dispatch point every ApplyRope and ApplyMRope form reaches after validation: one call
// of the SIMD kernel for q and k together, so that the angles of a token are formed once for both.
template <typename T>
void RotateWithKernel(const RopeCall& call, RopeDirection direction,
                      std::initializer_list<InOut<T>> views) {
  const Rope& rope = call.rope;
  internal::RopeKernelArgs args;
  args.storage = StorageTypeOf<T>();
  args.layout = rope.layout;
  args.tokens = views.begin()->in.tokens;
  args.head_dim = rope.head_dim;
  args.rotary_offset = rope.rotary_offset;
  args.rotary_dim = rope.rotary_dim;
  args.inv_freq = rope.inv_freq.data();
  args.cos_scale = rope.attention_factor;
  args.sin_scale =
      direction == RopeDirection::kInverse ? -rope.attention_factor : rope.attention_factor;
  if (call.mrope == nullptr) {
    args.positions = call.positions.data();
  } else {
    args.positions = call.streams.data;
    args.position_token_stride = call.streams.token_stride;
    args.position_stream_stride = call.streams.stream_stride;
    args.num_streams = static_cast<int>(call.mrope->num_streams);
    args.pair_stream = call.mrope->pair_stream.data();
  }
  for (const InOut<T>& v : views) {
    if (v.in.Empty()) continue;  // zero tokens or heads: nothing to rotate
    args.tensors[args.num_tensors++] = {v.in.data,         v.out.data,       v.in.num_heads,
                                        v.in.token_stride, v.in.head_stride, v.out.token_stride,
                                        v.out.head_stride};
  }
  if (args.num_tensors == 0) return;
  internal::RopeKernel(args);
}

template <typename T>
void RotateInto(const RopeCall& call, RopeDirection direction,
                std::initializer_list<InOut<T>> views) {
  if constexpr (std::is_same_v<T, double>) {
    // float64 storage has no SIMD kernel: it is the reference itself, unrounded (gradient checks in
    // double need exactly that).
    for (const InOut<T>& v : views) {
      if (!v.in.Empty()) internal::RopeCallReference<T>(call, v.in, v.out, direction);
    }
  } else {
    RotateWithKernel(call, direction, views);
  }
}

// Stored values to double and back: float64 storage keeps the double result; float32, bfloat16 and
// float16 round it once to float and then to the storage type.
template <typename T>
double Widen(T value) {
  if constexpr (std::is_same_v<T, double>)
    return value;
  else
    return ToFloat(value);
}
template <typename T>
T Narrow(double value) {
  if constexpr (std::is_same_v<T, double>)
    return value;
  else
    return FromFloat<T>(static_cast<float>(value));
}

// Position of pair i of token t.
int64_t PairPosition(const RopeCall& call, int64_t t, int64_t i) {
  if (call.mrope == nullptr) return call.positions[t];
  return call.streams.At(call.mrope->pair_stream[i], t);
}

}  // namespace

namespace internal {

// The checks of each form, shared by the rotating calls (which run them before writing) and the
// Validate twins (which run only them), so the two cannot disagree.
template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<T> x) {
  ValidateRotation(call);
  ValidateView(call, x, "x");
  ValidatePositionsOf(call, x.tokens);
}

template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<T> q, Heads<T> k) {
  ValidateRotation(call);
  ValidateView(call, q, "q");
  ValidatePositionsOf(call, q.tokens);
  ValidateView(call, k, "k");
  ValidateSameTokens(call, q, k, "q", "k");
  RequireDisjoint(call, k, q, "k", "q");
}

template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out) {
  ValidateRotation(call);
  ValidateView(call, x_in, "x_in");
  ValidatePositionsOf(call, x_in.tokens);
  ValidateView(call, x_out, "x_out");
  ValidateSameTokens(call, x_in, x_out, "x_in", "x_out");
  ValidateSameHeads(call, x_in, x_out, "x_in", "x_out");
  RequireDisjoint(call, x_out, x_in, "x_out", "x_in");
}

template <typename T>
void ValidateRopeCall(const RopeCall& call, Heads<const T> q_in, Heads<T> q_out,
                      Heads<const T> k_in, Heads<T> k_out) {
  ValidateRotation(call);
  ValidateView(call, q_in, "q_in");
  ValidatePositionsOf(call, q_in.tokens);
  ValidateView(call, q_out, "q_out");
  ValidateView(call, k_in, "k_in");
  ValidateView(call, k_out, "k_out");
  ValidateSameTokens(call, q_in, q_out, "q_in", "q_out");
  ValidateSameTokens(call, q_in, k_in, "q_in", "k_in");
  ValidateSameTokens(call, q_in, k_out, "q_in", "k_out");
  ValidateSameHeads(call, q_in, q_out, "q_in", "q_out");
  ValidateSameHeads(call, k_in, k_out, "k_in", "k_out");
  // Outputs are written token by token, q and k interleaved: neither may touch an input or the
  // other output.
  RequireDisjoint(call, q_out, q_in, "q_out", "q_in");
  RequireDisjoint(call, q_out, k_in, "q_out", "k_in");
  RequireDisjoint(call, k_out, k_in, "k_out", "k_in");
  RequireDisjoint(call, k_out, q_in, "k_out", "q_in");
  RequireDisjoint(call, k_out, q_out, "k_out", "q_out");
}

// The rotation of each form on views ValidateRopeCall accepted.
template <typename T>
void RotateValidated(const RopeCall& call, Heads<T> x, RopeDirection direction) {
  RotateInto<T>(call, direction, {{x, x}});
}
template <typename T>
void RotateValidated(const RopeCall& call, Heads<T> q, Heads<T> k, RopeDirection direction) {
  RotateInto<T>(call, direction, {{q, q}, {k, k}});
}
template <typename T>
void RotateValidated(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out,
                     RopeDirection direction) {
  RotateInto<T>(call, direction, {{x_in, x_out}});
}
template <typename T>
void RotateValidated(const RopeCall& call, Heads<const T> q_in, Heads<T> q_out, Heads<const T> k_in,
                     Heads<T> k_out, RopeDirection direction) {
  RotateInto<T>(call, direction, {{q_in, q_out}, {k_in, k_out}});
}

template <typename T>
void RunRopeCall(const RopeCall& call, Heads<T> x, RopeDirection direction) {
  ValidateRopeCall(call, x);
  RotateValidated(call, x, direction);
}

template <typename T>
void RunRopeCall(const RopeCall& call, Heads<T> q, Heads<T> k, RopeDirection direction) {
  ValidateRopeCall(call, q, k);
  RotateValidated(call, q, k, direction);
}

template <typename T>
void RunRopeCall(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out,
                 RopeDirection direction) {
  ValidateRopeCall(call, x_in, x_out);
  RotateValidated(call, x_in, x_out, direction);
}

template <typename T>
void RunRopeCall(const RopeCall& call, Heads<const T> q_in, Heads<T> q_out, Heads<const T> k_in,
                 Heads<T> k_out, RopeDirection direction) {
  ValidateRopeCall(call, q_in, q_out, k_in, k_out);
  RotateValidated(call, q_in, q_out, k_in, k_out, direction);
}

// The scalar twin for any storage type: double arithmetic on the stored values, rounded once to
// float and then to the storage type (the kernel's float32 arithmetic differs from it by float32
// rounding, which the tests bound).
template <typename T>
void RopeCallReference(const RopeCall& call, Heads<const T> x_in, Heads<T> x_out,
                       RopeDirection direction) {
  const Rope& rope = call.rope;
  const int64_t half = rope.rotary_dim / 2;
  const int64_t begin = rope.rotary_offset, end = rope.rotary_offset + rope.rotary_dim;
  // Pair i is features (begin + i * step, begin + i * step + partner).
  const bool interleaved = rope.layout == RopeLayout::kInterleaved;
  const int64_t step = interleaved ? 2 : 1;
  const int64_t partner = interleaved ? 1 : half;
  // Forward: a R(phi). Inverse: its transpose a R(-phi).
  const double sign = direction == RopeDirection::kInverse ? -1.0 : 1.0;
  const double a = rope.attention_factor;

  std::vector<CosSin> table(half);
  for (int64_t t = 0; t < x_in.tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const CosSin cs = RopeAngle(PairPosition(call, t, i), rope.inv_freq[i]);
      table[i] = {a * cs.cos, sign * a * cs.sin};
    }
    for (int64_t h = 0; h < x_in.num_heads; ++h) {
      const T* in = x_in.Row(t, h);
      T* out = x_out.Row(t, h);
      for (int64_t i = 0; i < half; ++i) {
        const int64_t j0 = begin + i * step, j1 = j0 + partner;
        // Read both before writing either: in and out may be the same memory.
        const double x0 = Widen(in[j0]), x1 = Widen(in[j1]);
        out[j0] = Narrow<T>(x0 * table[i].cos - x1 * table[i].sin);
        out[j1] = Narrow<T>(x0 * table[i].sin + x1 * table[i].cos);
      }
      if (in != out) {
        for (int64_t d = 0; d < begin; ++d) out[d] = in[d];
        for (int64_t d = end; d < x_in.head_dim; ++d) out[d] = in[d];
      }
    }
  }
}

inline RopeCall WithPositions(RopeCall call, std::span<const int64_t> positions) {
  call.positions = positions;
  return call;
}
inline RopeCall WithPositions(RopeCall call, const PositionStreams& streams) {
  call.streams = streams;
  return call;
}

template <typename P, typename... V>
void RunBatchedRopeCall(const RopeCall& call, const Batched<P>& positions, RopeDirection direction,
                        const std::array<std::string_view, sizeof...(V)>& names,
                        const Batched<V>&... views) {
  const auto& first = std::get<0>(std::tie(views...));
  size_t n = 0;
  (RequireSameBatch(call.function, first, views, names[0], names[n++]), ...);
  RequirePositionsBatch(call.function, positions, first, names[0]);
  const int64_t count = first.BatchCount();
  if (count == 0) {
    ValidateRopeCall(WithPositions(call, NoTokens(positions.first)), NoTokens(views.first)...);
    return;
  }
  // `&`, not `&&`: every copy is folded, or the originals run one element at a time.
  auto folded = std::make_tuple(views...);
  std::vector<int64_t> repeated;
  if (std::apply([](auto&... v) { return (FoldIntoTokens(v) & ...); }, folded)) {
    if (const auto all = FoldPositions(positions, count, repeated)) {
      std::apply([&](auto&... v) { RunRopeCall(WithPositions(call, *all), v.first..., direction); },
                 folded);
      return;
    }
  }
  // Positions shared by the batch: every element turns by the same angles, so a batch laid out as
  // Hugging Face's [batch, heads, seq, dim] is one call over batch x heads.
  if (SharedByTheBatch(positions)) {
    auto by_heads = std::make_tuple(views...);
    if (std::apply([](auto&... v) { return (FoldIntoHeads(v) & ...); }, by_heads)) {
      std::apply(
          [&](auto&... v) {
            RunRopeCall(WithPositions(call, positions.first), v.first..., direction);
          },
          by_heads);
      return;
    }
  }
  n = 0;
  const std::array<BatchRows, sizeof...(V)> rows{RowsOf(views, names[n++])...};
  RunEachElement(
      call.function, count,
      [&](int64_t b) { ValidateRopeCall(WithPositions(call, positions.At(b)), views.At(b)...); },
      [&](int64_t b) {  // validated above, with every other element
        RotateValidated(WithPositions(call, positions.At(b)), views.At(b)..., direction);
      },
      rows);
}

// The four forms of a batched call for positions P and storage E.
#define POSENC_INSTANTIATE_BATCHED_ROPE_CALL(P, E)                                            \
  template void RunBatchedRopeCall(const RopeCall&, const Batched<P>&, RopeDirection,         \
                                   const std::array<std::string_view, 1>&,                    \
                                   const Batched<Heads<E>>&);                                 \
  template void RunBatchedRopeCall(const RopeCall&, const Batched<P>&, RopeDirection,         \
                                   const std::array<std::string_view, 2>&,                    \
                                   const Batched<Heads<E>>&, const Batched<Heads<E>>&);       \
  template void RunBatchedRopeCall(const RopeCall&, const Batched<P>&, RopeDirection,         \
                                   const std::array<std::string_view, 2>&,                    \
                                   const Batched<Heads<const E>>&, const Batched<Heads<E>>&); \
  template void RunBatchedRopeCall(const RopeCall&, const Batched<P>&, RopeDirection,         \
                                   const std::array<std::string_view, 4>&,                    \
                                   const Batched<Heads<const E>>&, const Batched<Heads<E>>&,  \
                                   const Batched<Heads<const E>>&, const Batched<Heads<E>>&);
#define POSENC_INSTANTIATE_BATCHED_ROPE_CALLS(E)                    \
  POSENC_INSTANTIATE_BATCHED_ROPE_CALL(std::span<const int64_t>, E) \
  POSENC_INSTANTIATE_BATCHED_ROPE_CALL(PositionStreams, E)
POSENC_INSTANTIATE_BATCHED_ROPE_CALLS(float)
POSENC_INSTANTIATE_BATCHED_ROPE_CALLS(BFloat16)
POSENC_INSTANTIATE_BATCHED_ROPE_CALLS(Float16)
POSENC_INSTANTIATE_BATCHED_ROPE_CALLS(double)
#undef POSENC_INSTANTIATE_BATCHED_ROPE_CALLS
#undef POSENC_INSTANTIATE_BATCHED_ROPE_CALL

#define POSENC_INSTANTIATE_ROPE_CALL(T)                                                        \
  template void ValidateRopeCall<T>(const RopeCall&, Heads<T>);                                \
  template void ValidateRopeCall<T>(const RopeCall&, Heads<T>, Heads<T>);                      \
  template void ValidateRopeCall<T>(const RopeCall&, Heads<const T>, Heads<T>);                \
  template void ValidateRopeCall<T>(const RopeCall&, Heads<const T>, Heads<T>, Heads<const T>, \
                                    Heads<T>);                                                 \
  template void RunRopeCall<T>(const RopeCall&, Heads<T>, RopeDirection);                      \
  template void RunRopeCall<T>(const RopeCall&, Heads<T>, Heads<T>, RopeDirection);            \
  template void RunRopeCall<T>(const RopeCall&, Heads<const T>, Heads<T>, RopeDirection);      \
  template void RunRopeCall<T>(const RopeCall&, Heads<const T>, Heads<T>, Heads<const T>,      \
                               Heads<T>, RopeDirection);                                       \
  template void RopeCallReference<T>(const RopeCall&, Heads<const T>, Heads<T>, RopeDirection);
POSENC_INSTANTIATE_ROPE_CALL(float)
POSENC_INSTANTIATE_ROPE_CALL(BFloat16)
POSENC_INSTANTIATE_ROPE_CALL(Float16)
POSENC_INSTANTIATE_ROPE_CALL(double)
#undef POSENC_INSTANTIATE_ROPE_CALL

}  // namespace internal

namespace {

RopeCall OneStream(const Rope& rope, std::span<const int64_t> positions) {
  return RopeCall{kFn, rope, positions, nullptr, {}};
}

}  // namespace

std::vector<double> DefaultInvFreq(double base, int64_t rotary_dim) {
  Require(std::isfinite(base) && base > 0, "default_inv_freq", "base", "be finite and > 0", base);
  Require(rotary_dim > 0 && rotary_dim % 2 == 0, "default_inv_freq", "rotary_dim",
          "be even and > 0", rotary_dim);
  std::vector<double> inv_freq(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] = std::pow(base, -static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  }
  return inv_freq;
}

Rope Rope::Default(int64_t head_dim, double base, RopeLayout layout, int64_t rotary_dim,
                   int64_t rotary_offset) {
  Rope rope;
  rope.head_dim = head_dim;
  rope.rotary_dim = rotary_dim == 0 ? head_dim - rotary_offset : rotary_dim;
  rope.layout = layout;
  rope.rotary_offset = rotary_offset;
  ValidateDims(rope.head_dim, rope.rotary_dim, rope.rotary_offset);
  rope.inv_freq = DefaultInvFreq(base, rope.rotary_dim);
  rope.attention_factor = 1.0;
  return rope;
}

void Rope::Validate() const {
  ValidateDims(head_dim, rotary_dim, rotary_offset);
  Require(layout == RopeLayout::kHalfSplit || layout == RopeLayout::kInterleaved, kFn, "layout",
          "be kHalfSplit or kInterleaved", static_cast<int>(layout));
  // Messages are built only on failure: Validate runs on every call, a decode step included.
  if (static_cast<int64_t>(inv_freq.size()) != rotary_dim / 2) {
    Require(false, kFn, "inv_freq.size()",
            "equal rotary_dim / 2 (" + std::to_string(rotary_dim / 2) + ")", inv_freq.size());
  }
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (!(std::isfinite(inv_freq[i]) && inv_freq[i] >= 0)) {
      Require(false, kFn, "inv_freq[" + std::to_string(i) + "]", "be finite and >= 0", inv_freq[i]);
    }
  }
  // The kernels scale cos and sin by it in float32.
  Require(internal::IsPositiveFloat32(attention_factor), kFn, "attention_factor",
          "be " + std::string(internal::kPositiveFloat32), attention_factor);
}

CosSin RopeAngle(int64_t pos, double inv_freq) {
  // The angle is one double product: its error is at most half an ulp of the angle, at most
  // 2^-30 = 9.3e-10 rad for angles below 2^24, and glibc's cos and sin reduce their argument
  // exactly. Hugging Face instead forms the product in float32 (position cast to float32), which
  // loses up to half a float32 ulp, about p * w * 2^-24 rad: 4e-3 rad at p = 131071 for the
  // fastest pair, 3e-2 at p = 1e6 (rope-scaling.md §9). Positions are exact in double to 2^53.
  const double angle = static_cast<double>(pos) * inv_freq;
  return {std::cos(angle), std::sin(angle)};
}

template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions, const Batched<Heads<T>>& x,
               RopeDirection direction) {
  internal::RunBatchedRopeCall(OneStream(rope, {}), positions, direction, {"x"}, x);
}
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions, const Batched<Heads<T>>& q,
               const Batched<Heads<T>>& k, RopeDirection direction) {
  internal::RunBatchedRopeCall(OneStream(rope, {}), positions, direction, {"q", "k"}, q, k);
}
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions,
               const std::type_identity_t<Batched<Heads<const T>>>& x_in,
               const Batched<Heads<T>>& x_out, RopeDirection direction) {
  internal::RunBatchedRopeCall(OneStream(rope, {}), positions, direction, {"x_in", "x_out"}, x_in,
                               x_out);
}
template <typename T>
void ApplyRope(const Rope& rope, const BatchedPositions& positions,
               const std::type_identity_t<Batched<Heads<const T>>>& q_in,
               const Batched<Heads<T>>& q_out,
               const std::type_identity_t<Batched<Heads<const T>>>& k_in,
               const Batched<Heads<T>>& k_out, RopeDirection direction) {
  internal::RunBatchedRopeCall(OneStream(rope, {}), positions, direction,
                               {"q_in", "q_out", "k_in", "k_out"}, q_in, q_out, k_in, k_out);
}
// One call is a batch of one.
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions, Heads<T> x,
               RopeDirection direction) {
  ApplyRope<T>(rope, BatchedPositions(positions), Batched<Heads<T>>(x), direction);
}
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions, Heads<T> q, Heads<T> k,
               RopeDirection direction) {
  ApplyRope<T>(rope, BatchedPositions(positions), Batched<Heads<T>>(q), Batched<Heads<T>>(k),
               direction);
}
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions,
               std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out, RopeDirection direction) {
  ApplyRope<T>(rope, BatchedPositions(positions), Batched<Heads<const T>>(x_in),
               Batched<Heads<T>>(x_out), direction);
}
template <typename T>
void ApplyRope(const Rope& rope, std::span<const int64_t> positions,
               std::type_identity_t<Heads<const T>> q_in, Heads<T> q_out,
               std::type_identity_t<Heads<const T>> k_in, Heads<T> k_out, RopeDirection direction) {
  ApplyRope<T>(rope, BatchedPositions(positions), Batched<Heads<const T>>(q_in),
               Batched<Heads<T>>(q_out), Batched<Heads<const T>>(k_in), Batched<Heads<T>>(k_out),
               direction);
}
template <typename T>
void ApplyRopeReference(const Rope& rope, std::span<const int64_t> positions,
                        std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                        RopeDirection direction) {
  internal::RopeCallReference<T>(OneStream(rope, positions), x_in, x_out, direction);
}

#define POSENC_INSTANTIATE_ROPE(T)                                                                 \
  template void ApplyRope<T>(const Rope&, std::span<const int64_t>, Heads<T>, RopeDirection);      \
  template void ApplyRope<T>(const Rope&, std::span<const int64_t>, Heads<T>, Heads<T>,            \
                             RopeDirection);                                                       \
  template void ApplyRope<T>(const Rope&, std::span<const int64_t>, Heads<const T>, Heads<T>,      \
                             RopeDirection);                                                       \
  template void ApplyRope<T>(const Rope&, std::span<const int64_t>, Heads<const T>, Heads<T>,      \
                             Heads<const T>, Heads<T>, RopeDirection);                             \
  template void ApplyRope<T>(const Rope&, const BatchedPositions&, const Batched<Heads<T>>&,       \
                             RopeDirection);                                                       \
  template void ApplyRope<T>(const Rope&, const BatchedPositions&, const Batched<Heads<T>>&,       \
                             const Batched<Heads<T>>&, RopeDirection);                             \
  template void ApplyRope<T>(const Rope&, const BatchedPositions&, const Batched<Heads<const T>>&, \
                             const Batched<Heads<T>>&, RopeDirection);                             \
  template void ApplyRope<T>(const Rope&, const BatchedPositions&, const Batched<Heads<const T>>&, \
                             const Batched<Heads<T>>&, const Batched<Heads<const T>>&,             \
                             const Batched<Heads<T>>&, RopeDirection);                             \
  template void ApplyRopeReference<T>(const Rope&, std::span<const int64_t>, Heads<const T>,       \
                                      Heads<T>, RopeDirection);
POSENC_INSTANTIATE_ROPE(float)
POSENC_INSTANTIATE_ROPE(BFloat16)
POSENC_INSTANTIATE_ROPE(Float16)
POSENC_INSTANTIATE_ROPE(double)
#undef POSENC_INSTANTIATE_ROPE

}  // namespace posenc
