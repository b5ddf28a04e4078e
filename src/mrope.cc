#include "posenc/mrope.h"

#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/error.h"
#include "posenc/positions.h"
#include "rope_call.h"

namespace posenc {
namespace {

constexpr std::string_view kFn = "mrope";

internal::RopeCall Call(const MRope& mrope, const PositionStreams& positions) {
  return internal::RopeCall{kFn, mrope.rope, {}, &mrope, positions};
}

// theta^(-2j / dim) for j < count, in double.
std::vector<double> Frequencies(double theta, int64_t dim, int64_t count) {
  std::vector<double> f(count);
  for (int64_t j = 0; j < count; ++j) {
    f[j] = std::pow(theta, -static_cast<double>(2 * j) / static_cast<double>(dim));
  }
  return f;
}

void RequireVisionHeadDim(std::string_view builder, int64_t head_dim) {
  Require(head_dim >= 4 && head_dim % 4 == 0 && head_dim <= (int64_t{1} << 20), kFn,
          std::string(builder) + " head_dim", "be a multiple of 4 in [4, 2^20]", head_dim);
}
void RequireTheta(std::string_view builder, double theta) {
  Require(std::isfinite(theta) && theta > 0, kFn, std::string(builder) + " theta",
          "be finite and > 0", theta);
}

// Two streams over halves of the pairs: pairs [0, n/2) stream 0 at first_half[j], pairs [n/2, n)
// stream 1 at second_half[j].
MRope TwoHalves(int64_t head_dim, RopeLayout layout, std::vector<double> first_half,
                const std::vector<double>& second_half) {
  MRope m;
  m.rope.head_dim = head_dim;
  m.rope.rotary_dim = head_dim;
  m.rope.layout = layout;
  m.rope.inv_freq = std::move(first_half);
  m.rope.inv_freq.insert(m.rope.inv_freq.end(), second_half.begin(), second_half.end());
  m.num_streams = 2;
  const int64_t quarter = head_dim / 4;
  m.pair_stream.assign(2 * quarter, 0);
  std::fill(m.pair_stream.begin() + quarter, m.pair_stream.end(), 1);
  return m;
}

}  // namespace

MRope MRope::OneStream(Rope rope) {
  rope.Validate();
  MRope m;
  m.pair_stream.assign(rope.rotary_dim / 2, 0);
  m.rope = std::move(rope);
  return m;
}

MRope MRope::Sections(Rope rope, std::span<const int64_t> sections, MropeSections layout) {
  rope.Validate();
  const int64_t pairs = rope.rotary_dim / 2;
  const int64_t n = static_cast<int64_t>(sections.size());
  Require(n >= 1 && n <= kMaxStreams, kFn, "sections.size()",
          "be 1 to " + std::to_string(kMaxStreams), n);
  Require(layout == MropeSections::kBlocks || layout == MropeSections::kInterleaved, kFn, "layout",
          "be kBlocks or kInterleaved", static_cast<int>(layout));
  int64_t total = 0;
  for (int64_t s = 0; s < n; ++s) {
    if (sections[s] < 1 || sections[s] > pairs) {
      Require(false, kFn, "sections[" + std::to_string(s) + "]",
              "be in [1, rotary_dim / 2 = " + std::to_string(pairs) + "]", sections[s]);
    }
    total += sections[s];
  }
  Require(total == pairs, kFn, "sections",
          "add up to the rotary pairs, rotary_dim / 2 = " + std::to_string(pairs) +
              " (they add up to " + std::to_string(total) + ")",
          total);
  MRope m;
  m.num_streams = n;
  m.pair_stream.resize(pairs);
  if (layout == MropeSections::kBlocks) {
    int64_t i = 0;
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t j = 0; j < sections[s]; ++j) m.pair_stream[i++] = s;
    }
  } else {
    // Hugging Face's apply_interleaved_mrope: pair i belongs to stream s = i % n (s > 0) while
    // i < n * sections[s]; every other pair to stream 0.
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t s = i % n;
      m.pair_stream[i] = s > 0 && i < n * sections[s] ? s : 0;
    }
  }
  m.rope = std::move(rope);
  return m;
}

MRope MRope::QwenVision(int64_t head_dim, double theta) {
  RequireVisionHeadDim("QwenVision", head_dim);
  RequireTheta("QwenVision", theta);
  const std::vector<double> f = Frequencies(theta, head_dim / 2, head_dim / 4);
  return TwoHalves(head_dim, RopeLayout::kHalfSplit, f, f);
}

MRope MRope::Pixtral(int64_t head_dim, double theta) {
  RequireVisionHeadDim("Pixtral", head_dim);
  RequireTheta("Pixtral", theta);
  const std::vector<double> f = Frequencies(theta, head_dim, head_dim / 2);
  std::vector<double> even, odd;
  for (size_t j = 0; j < f.size(); ++j) (j % 2 == 0 ? even : odd).push_back(f[j]);
  return TwoHalves(head_dim, RopeLayout::kHalfSplit, std::move(even), odd);
}

MRope MRope::Llama4Vision(int64_t head_dim, double theta) {
  RequireVisionHeadDim("Llama4Vision", head_dim);
  RequireTheta("Llama4Vision", theta);
  const std::vector<double> f = Frequencies(theta, head_dim / 2, head_dim / 4);
  return TwoHalves(head_dim, RopeLayout::kInterleaved, f, f);
}

void MRope::Validate() const {
  rope.Validate();
  Require(num_streams >= 1 && num_streams <= kMaxStreams, kFn, "num_streams",
          "be 1 to " + std::to_string(kMaxStreams), num_streams);
  if (static_cast<int64_t>(pair_stream.size()) != rope.rotary_dim / 2) {
    Require(false, kFn, "pair_stream.size()",
            "equal rope.rotary_dim / 2 (" + std::to_string(rope.rotary_dim / 2) + ")",
            pair_stream.size());
  }
  for (size_t i = 0; i < pair_stream.size(); ++i) {
    if (pair_stream[i] < 0 || pair_stream[i] >= num_streams) {
      Require(false, kFn, "pair_stream[" + std::to_string(i) + "]",
              "be in [0, num_streams = " + std::to_string(num_streams) + ")", pair_stream[i]);
    }
  }
}

void PositionStreams::Validate(std::string_view function, std::string_view name,
                               int64_t expected_streams, int64_t expected_tokens) const {
  const std::string n(name);
  if (num_streams != expected_streams) {
    Require(false, function, n + ".num_streams",
            "equal the rotation's streams (" + std::to_string(expected_streams) + ")", num_streams);
  }
  if (tokens != expected_tokens) {
    Require(false, function, n + ".tokens",
            "equal the number of tokens (" + std::to_string(expected_tokens) + ")", tokens);
  }
  Require(stream_stride >= 0, function, n + ".stream_stride", "be >= 0", stream_stride);
  Require(token_stride >= 0, function, n + ".token_stride", "be >= 0", token_stride);
  if (tokens == 0) return;
  Require(data != nullptr, function, n + ".data", "be non-null", "null");
  // Messages are built only on failure: this runs on every call.
  for (int64_t s = 0; s < num_streams; ++s) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t pos = At(s, t);
      if (pos < 0 || pos > kMaxPosition) {
        ValidatePosition(function, n + "[" + std::to_string(s) + "][" + std::to_string(t) + "]",
                         pos);
      }
    }
  }
}

template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const Batched<Heads<T>>& x, RopeDirection direction) {
  internal::RunBatchedRopeCall(Call(mrope, {}), positions, direction, {"x"}, x);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const Batched<Heads<T>>& q, const Batched<Heads<T>>& k, RopeDirection direction) {
  internal::RunBatchedRopeCall(Call(mrope, {}), positions, direction, {"q", "k"}, q, k);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const std::type_identity_t<Batched<Heads<const T>>>& x_in,
                const Batched<Heads<T>>& x_out, RopeDirection direction) {
  internal::RunBatchedRopeCall(Call(mrope, {}), positions, direction, {"x_in", "x_out"}, x_in,
                               x_out);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const std::type_identity_t<Batched<Heads<const T>>>& q_in,
                const Batched<Heads<T>>& q_out,
                const std::type_identity_t<Batched<Heads<const T>>>& k_in,
                const Batched<Heads<T>>& k_out, RopeDirection direction) {
  internal::RunBatchedRopeCall(Call(mrope, {}), positions, direction,
                               {"q_in", "q_out", "k_in", "k_out"}, q_in, q_out, k_in, k_out);
}
// One call is a batch of one.
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions, Heads<T> x,
                RopeDirection direction) {
  ApplyMRope<T>(mrope, Batched<PositionStreams>(positions), Batched<Heads<T>>(x), direction);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions, Heads<T> q, Heads<T> k,
                RopeDirection direction) {
  ApplyMRope<T>(mrope, Batched<PositionStreams>(positions), Batched<Heads<T>>(q),
                Batched<Heads<T>>(k), direction);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions,
                std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                RopeDirection direction) {
  ApplyMRope<T>(mrope, Batched<PositionStreams>(positions), Batched<Heads<const T>>(x_in),
                Batched<Heads<T>>(x_out), direction);
}
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions,
                std::type_identity_t<Heads<const T>> q_in, Heads<T> q_out,
                std::type_identity_t<Heads<const T>> k_in, Heads<T> k_out,
                RopeDirection direction) {
  ApplyMRope<T>(mrope, Batched<PositionStreams>(positions), Batched<Heads<const T>>(q_in),
                Batched<Heads<T>>(q_out), Batched<Heads<const T>>(k_in), Batched<Heads<T>>(k_out),
                direction);
}
template <typename T>
void ApplyMRopeReference(const MRope& mrope, const PositionStreams& positions,
                         std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                         RopeDirection direction) {
  internal::RopeCallReference<T>(Call(mrope, positions), x_in, x_out, direction);
}

#define POSENC_INSTANTIATE_MROPE(T)                                                               \
  template void ApplyMRope<T>(const MRope&, const PositionStreams&, Heads<T>, RopeDirection);     \
  template void ApplyMRope<T>(const MRope&, const PositionStreams&, Heads<T>, Heads<T>,           \
                              RopeDirection);                                                     \
  template void ApplyMRope<T>(const MRope&, const PositionStreams&, Heads<const T>, Heads<T>,     \
                              RopeDirection);                                                     \
  template void ApplyMRope<T>(const MRope&, const PositionStreams&, Heads<const T>, Heads<T>,     \
                              Heads<const T>, Heads<T>, RopeDirection);                           \
  template void ApplyMRope<T>(const MRope&, const Batched<PositionStreams>&,                      \
                              const Batched<Heads<T>>&, RopeDirection);                           \
  template void ApplyMRope<T>(const MRope&, const Batched<PositionStreams>&,                      \
                              const Batched<Heads<T>>&, const Batched<Heads<T>>&, RopeDirection); \
  template void ApplyMRope<T>(const MRope&, const Batched<PositionStreams>&,                      \
                              const Batched<Heads<const T>>&, const Batched<Heads<T>>&,           \
                              RopeDirection);                                                     \
  template void ApplyMRope<T>(const MRope&, const Batched<PositionStreams>&,                      \
                              const Batched<Heads<const T>>&, const Batched<Heads<T>>&,           \
                              const Batched<Heads<const T>>&, const Batched<Heads<T>>&,           \
                              RopeDirection);                                                     \
  template void ApplyMRopeReference<T>(const MRope&, const PositionStreams&, Heads<const T>,      \
                                       Heads<T>, RopeDirection);
POSENC_INSTANTIATE_MROPE(float)
POSENC_INSTANTIATE_MROPE(BFloat16)
POSENC_INSTANTIATE_MROPE(Float16)
POSENC_INSTANTIATE_MROPE(double)
#undef POSENC_INSTANTIATE_MROPE

}  // namespace posenc
