// Multi-stream RoPE: one rotary embedding whose pairs turn by different position streams.
//
// A token carries several positions (streams) instead of one, and each rotary pair is turned by the
// position of the stream assigned to it:
//
//   pair i turns by  phi_i = positions[pair_stream[i]][t] * inv_freq[i]
//
// The rotation itself (layout, rotary_dim, rotary_offset, attention_factor, direction) is the 1-D
// RoPE of posenc/rope.h; only the position of each pair changes. With one stream, or with every
// stream holding the same position, it is exactly 1-D RoPE, bit for bit.
//
// Every multimodal scheme of the models people run is this one rule with a different stream map:
//
// - M-RoPE (Qwen2-VL, Qwen2.5-VL; Hugging Face's `mrope_section`, llama.cpp's MROPE): 3 streams
//   (time, height, width), sections in blocks over the pairs, half-split layout. [16, 24, 24] of
//   64 pairs turns pairs 0-15 by time, 16-39 by height, 40-63 by width:
//       pair     0 ... 15 | 16 ... 39 | 40 ... 63
//       stream   t ...  t |  h ...  h |  w ...  w
// - Interleaved M-RoPE (Qwen3-VL, llama.cpp's IMROPE): the streams take turns pair by pair,
//   t h w t h w ...; stream s > 0 keeps its turns below 3 x sections[s], time takes every other
//   pair. [24, 20, 20] of 64 pairs is (t h w) x 20, then t t t t.
// - 2-D RoPE of vision towers: 2 streams, patch row and patch column, each over half the pairs.
//   Qwen2-VL, Qwen2.5-VL and Qwen3-VL: the same frequencies restart in each half (llama.cpp's
//   VISION). Pixtral: the frequencies alternate, even ones to the row half, odd ones to the
//   column half. Llama 4: column first, interleaved pairs, positions counted from 1. The builders
//   below make each; posenc/vision_positions.h numbers the patches in each tower's order.
//
// Text tokens of an M-RoPE model carry the same number in all three streams, so for text M-RoPE
// equals 1-D RoPE; image and video tokens carry (frame, row, column) of their grid
// (posenc/mrope_positions.h numbers them as the models do).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "posenc/batch.h"
#include "posenc/heads.h"
#include "posenc/rope.h"
#include "posenc/storage.h"

namespace posenc {

// How M-RoPE sections are laid over the pairs.
enum class MropeSections {
  kBlocks,  // Qwen2-VL, Qwen2.5-VL: stream s takes sections[s] consecutive pairs
  // Qwen3-VL (Hugging Face's apply_interleaved_mrope): with n sections, pair i takes stream
  // s = i % n when s > 0 and i < n * sections[s], stream 0 otherwise. sections[0] only has to
  // make the sum; time takes whatever the others leave, as in the reference.
  kInterleaved,
};

struct MRope {
  // Layout, rotary_dim, rotary_offset, attention_factor and one inverse frequency per pair.
  Rope rope;
  // 1 <= num_streams <= kMaxStreams.
  int64_t num_streams = 1;
  // rope.rotary_dim / 2 entries, each in [0, num_streams): the stream that turns pair i.
  std::vector<int64_t> pair_stream;

  static constexpr int64_t kMaxStreams = 4;

  // 1-D RoPE as one stream.
  static MRope OneStream(Rope rope);

  // M-RoPE over `rope`'s pairs (its inv_freq, layout, scaling and offset are kept): one stream per
  // section; the sections must add up to rope.rotary_dim / 2.
  static MRope Sections(Rope rope, std::span<const int64_t> sections, MropeSections layout);

  // The Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision towers (VisionRotaryEmbedding(head_dim / 2)):
  // stream 0 = patch row, stream 1 = patch column; pairs [0, head_dim / 4) turn by the row at
  // f_j = theta^(-2j / (head_dim / 2)), pairs [head_dim / 4, head_dim / 2) by the column at the
  // same f_j; half-split. head_dim a multiple of 4. Positions: QwenVisionPositions (Qwen2.5-VL:
  // QwenVisionPositionsInWindowOrder) in posenc/vision_positions.h.
  static MRope QwenVision(int64_t head_dim, double theta = 10000.0);

  // Pixtral's vision encoder (PixtralRotaryEmbedding): f_j = theta^(-2j / head_dim), j < head_dim /
  // 2; pairs [0, head_dim / 4) turn by the row at the even f (f_0, f_2, ...), pairs [head_dim / 4,
  // head_dim / 2) by the column at the odd f (f_1, f_3, ...); half-split. head_dim a multiple of 4.
  static MRope Pixtral(int64_t head_dim, double theta = 10000.0);

  // Llama 4's vision encoder (Llama4VisionRotaryEmbedding): with n = head_dim / 2 pairs and f_j =
  // theta^(-2j / n), j < n / 2; interleaved pairs; pairs [0, n / 2) turn by stream 0 at f_j, pairs
  // [n / 2, n) by stream 1 at f_j. Its positions are (column + 1, row + 1), and (0, 0) for the
  // class token (posenc/vision_positions.h). head_dim a multiple of 4.
  static MRope Llama4Vision(int64_t head_dim, double theta = 10000.0);

  // Throws posenc::Error naming the field, value and rule (rope.Validate() first).
  void Validate() const;

  friend bool operator==(const MRope&, const MRope&) = default;
};

// The positions of `tokens` tokens in `num_streams` streams: stream s of token t is data[s *
// stream_stride + t * token_stride] (strides in elements, any sign-free layout: [streams, tokens]
// row-major is stream_stride = tokens, token_stride = 1; [tokens, streams] is stream_stride = 1,
// token_stride = streams). Not owned.
struct PositionStreams {
  const int64_t* data = nullptr;
  int64_t num_streams = 0;
  int64_t tokens = 0;
  int64_t stream_stride = 0;
  int64_t token_stride = 1;

  // [num_streams, tokens], row-major.
  static PositionStreams Dense(const int64_t* data, int64_t num_streams, int64_t tokens) {
    return {data, num_streams, tokens, tokens, 1};
  }
  // One stream: a plain position list.
  static PositionStreams OneStream(std::span<const int64_t> positions) {
    return {positions.data(), 1, static_cast<int64_t>(positions.size()), 0, 1};
  }
  int64_t At(int64_t stream, int64_t t) const {
    return data[stream * stream_stride + t * token_stride];
  }

  // Throws posenc::Error unless the view is well formed (non-null data unless empty, non-negative
  // strides), has `num_streams` streams and `tokens` tokens, and every position is in [0,
  // kMaxPosition]. `function` and `name` go into the message.
  void Validate(std::string_view function, std::string_view name, int64_t num_streams,
                int64_t tokens) const;
};

// The same streams `elements` further on: one batch element's (posenc/batch.h).
inline PositionStreams MovedBy(PositionStreams streams, int64_t elements) {
  streams.data += elements;
  return streams;
}

// The four forms of ApplyRope (posenc/rope.h) with position streams: in place or out of place, one
// tensor or q and k in one call (the angles of a token are formed once for both), forward or
// inverse (the transpose: the backward pass), on float32, bfloat16, float16 (one rounding of the
// storage type per element, as ApplyRope) and float64 storage (the double reference, unrounded). T
// is float, BFloat16, Float16 or double. Everything (mrope, positions, views, shapes, aliasing) is
// validated before anything is written; errors name function "mrope". positions has
// mrope.num_streams streams and as many tokens as the tensors.
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions, Heads<T> x,
                RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions, Heads<T> q, Heads<T> k,
                RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions,
                std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const PositionStreams& positions,
                std::type_identity_t<Heads<const T>> q_in, Heads<T> q_out,
                std::type_identity_t<Heads<const T>> k_in, Heads<T> k_out,
                RopeDirection direction = RopeDirection::kForward);

// Batched: the four forms over a batch (posenc/batch.h), as ApplyRope's batched forms: positions
// [num_streams, tokens] shared by the batch (no batch dims) or streams of each element's own (the
// batch dims and strides of position streams [num_streams, ..., tokens]). The forms above are a
// batch of one.
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const Batched<Heads<T>>& x, RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const Batched<Heads<T>>& q, const Batched<Heads<T>>& k,
                RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const std::type_identity_t<Batched<Heads<const T>>>& x_in,
                const Batched<Heads<T>>& x_out, RopeDirection direction = RopeDirection::kForward);
template <typename T>
void ApplyMRope(const MRope& mrope, const Batched<PositionStreams>& positions,
                const std::type_identity_t<Batched<Heads<const T>>>& q_in,
                const Batched<Heads<T>>& q_out,
                const std::type_identity_t<Batched<Heads<const T>>>& k_in,
                const Batched<Heads<T>>& k_out, RopeDirection direction = RopeDirection::kForward);

// The scalar reference in double, for one tensor, out of place or in place (x_in and x_out the same
// memory): cos and sin by RopeAngle(position of the pair's stream, inv_freq[i]). Assumes validated
// input.
template <typename T>
void ApplyMRopeReference(const MRope& mrope, const PositionStreams& positions,
                         std::type_identity_t<Heads<const T>> x_in, Heads<T> x_out,
                         RopeDirection direction);

}  // namespace posenc
