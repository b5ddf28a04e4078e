// The 2-D positions of vision-tower patches, in the order each tower lays its patches out.
//
// A vision encoder with 2-D RoPE (posenc/mrope.h: MRope::QwenVision, Pixtral, Llama4Vision)
// turns each patch by two position streams. These functions build those streams exactly as the
// reference code does (Hugging Face transformers; tests/golden/mrope/SOURCES.md quotes the
// lines), as one [2, tokens] row-major array: stream 0 for every token, then stream 1.
//
//   Qwen2-VL, Qwen2.5-VL, Qwen3-VL (rot_pos_emb): stream 0 = row, stream 1 = column, patches in
//   merge-block order: the s x s blocks of the spatial merge row by row, and inside each block
//   its patches row by row. A 4 x 4 grid with s = 2:
//
//       grid (row, col)          token order            rows               cols
//       a b | c d                a b e f c d g h ...    0 0 1 1 0 0 1 1    0 1 0 1 2 3 2 3
//       e f | g h                                       2 2 3 3 2 2 3 3    0 1 0 1 2 3 2 3
//       ----+----
//       i j | k l
//       m n | o p
//
//   Every frame of a video repeats the frame's (row, column) list; images follow one another.
//   Qwen2.5-VL then runs its tower in window order: QwenVisionWindowOrder below.
//
//   Pixtral (position_ids_in_meshgrid): stream 0 = row, stream 1 = column, row-major per image,
//   images one after another.
//
//   Llama 4 (Llama4VisionRotaryEmbedding): stream 0 = column + 1, stream 1 = row + 1 for the
//   side x side patches row-major, then the class token, last, at (0, 0): the reference masks the
//   class token's angles to 0, which position 0 reproduces.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "posenc/mrope.h"
#include "posenc/mrope_positions.h"

namespace posenc {

// Position streams that own their data: stream s of token t is data[s * tokens + t].
struct VisionPositions {
  std::vector<int64_t> data;
  int64_t num_streams = 0;
  int64_t tokens = 0;

  // A view for ApplyMRope; valid while this object lives and is not modified.
  PositionStreams Streams() const {
    return PositionStreams::Dense(data.data(), num_streams, tokens);
  }
  int64_t At(int64_t stream, int64_t t) const { return data[stream * tokens + t]; }
};

// The most tokens these functions build (2^24 patches, 256 MiB of positions): far above any
// model's image or video budget, low enough that sizes and products cannot overflow.
inline constexpr int64_t kMaxVisionTokens = int64_t{1} << 24;

// Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision towers: (row, column) of every patch of every grid, in
// rot_pos_emb's order (above). grids holds (frames t, patch rows h, patch columns w) per image or
// video, each >= 1, h and w multiples of spatial_merge_size (>= 1); t * h * w tokens per grid,
// at most kMaxVisionTokens in all. An empty list gives no tokens.
VisionPositions QwenVisionPositions(std::span<const VisionGrid> grids, int64_t spatial_merge_size);

// Qwen2.5-VL's window attention (get_window_index). The tower gathers its patches in groups of
// spatial_merge_size^2 (one merged token each) by window_index before its first block, so the
// sequence it rotates and attends over is rot_pos_emb's, reordered: merged token window_index[k]
// of QwenVisionPositions' order goes to slot k. Each frame's merged grid (h / s, w / s) is cut
// into windows of window_units x window_units merged tokens (window_size / s / patch_size: 112 /
// 2 / 14 = 4 for Qwen2.5-VL), read window by window, row-major inside each, the last row and
// column of windows cut short. cu_window_seqlens holds the patch offsets where windows start
// and end ([0, ..., tokens], ascending; windows that the padding leaves empty dropped, as
// forward's unique_consecutive does): window-layer attention stays inside each range. The
// merger's output is put back in patch order by the inverse permutation (argsort(window_index)).
struct QwenWindowOrder {
  std::vector<int64_t> window_index;       // (sum t * h * w) / s^2 entries, a permutation
  std::vector<int64_t> cu_window_seqlens;  // patch offsets, from 0 to the token count
};
QwenWindowOrder QwenVisionWindowOrder(std::span<const VisionGrid> grids, int64_t spatial_merge_size,
                                      int64_t window_units);

// QwenVisionPositions gathered by the window order: the positions Qwen2.5-VL's tower rotates by.
VisionPositions QwenVisionPositionsInWindowOrder(std::span<const VisionGrid> grids,
                                                 int64_t spatial_merge_size, int64_t window_units);

// Pixtral's vision encoder: (row, column) of a rows x cols patch grid, row-major.
VisionPositions PixtralVisionPositions(int64_t rows, int64_t cols);

// Several images in one sequence (Pixtral's block-diagonal batch): each (rows, cols) in turn.
struct PatchRowsCols {
  int64_t rows = 0;
  int64_t cols = 0;
};
VisionPositions PixtralVisionPositions(std::span<const PatchRowsCols> images);

// Llama 4's vision encoder, side = image_size / patch_size patches a side: side^2 + 1 tokens,
// (column + 1, row + 1) row-major and (0, 0) for the class token, last.
VisionPositions Llama4VisionPositions(int64_t side);

}  // namespace posenc
