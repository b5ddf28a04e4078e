#include "posenc/vision_positions.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/error.h"

namespace posenc {
namespace {

constexpr std::string_view kMaxTokensRule = "be at most kMaxVisionTokens = 2^24";

// Two streams of `tokens` tokens, zero-filled.
VisionPositions TwoStreams(int64_t tokens) {
  VisionPositions p;
  p.num_streams = 2;
  p.tokens = tokens;
  p.data.assign(static_cast<size_t>(2 * tokens), 0);
  return p;
}

// Validates every grid and returns the total token count. Each bound is checked before the
// product that could pass it: h, w <= 2^24 so h * w < 2^48; then t <= cap / (h * w).
int64_t QwenTokens(std::string_view fn, std::span<const VisionGrid> grids, int64_t merge) {
  Require(merge >= 1 && merge <= kMaxVisionTokens, fn, "spatial_merge_size", "be in [1, 2^24]",
          merge);
  int64_t total = 0;
  for (size_t g = 0; g < grids.size(); ++g) {
    const VisionGrid& grid = grids[g];
    const std::string name = "grids[" + std::to_string(g) + "]";
    Require(grid.t >= 1 && grid.t <= kMaxVisionTokens, fn, name + ".t", "be in [1, 2^24]", grid.t);
    Require(grid.h >= 1 && grid.h <= kMaxVisionTokens, fn, name + ".h", "be in [1, 2^24]", grid.h);
    Require(grid.w >= 1 && grid.w <= kMaxVisionTokens, fn, name + ".w", "be in [1, 2^24]", grid.w);
    Require(grid.h % merge == 0, fn, name + ".h",
            "be a multiple of spatial_merge_size (" + std::to_string(merge) + ")", grid.h);
    Require(grid.w % merge == 0, fn, name + ".w",
            "be a multiple of spatial_merge_size (" + std::to_string(merge) + ")", grid.w);
    const int64_t area = grid.h * grid.w;
    Require(area <= kMaxVisionTokens, fn, name + ".h * w", kMaxTokensRule, area);
    Require(grid.t <= kMaxVisionTokens / area, fn, name + ".t * h * w", kMaxTokensRule,
            grid.t * area);  // t, area <= 2^24: the product fits
    const int64_t tokens = grid.t * area;
    Require(tokens <= kMaxVisionTokens - total, fn, "tokens of all grids", kMaxTokensRule,
            total + tokens);
    total += tokens;
  }
  return total;
}

}  // namespace

VisionPositions QwenVisionPositions(std::span<const VisionGrid> grids, int64_t spatial_merge_size) {
  constexpr std::string_view kFn = "qwen_vision_positions";
  const int64_t s = spatial_merge_size;
  VisionPositions p = TwoStreams(QwenTokens(kFn, grids, s));
  int64_t* rows = p.data.data();
  int64_t* cols = rows + p.tokens;
  int64_t t = 0;
  for (const VisionGrid& grid : grids) {
    // One frame: hpos_ids / wpos_ids reshaped (h / s, s, w / s, s) and permuted (0, 2, 1, 3).
    const int64_t frame_start = t;
    for (int64_t block_row = 0; block_row < grid.h / s; ++block_row) {
      for (int64_t block_col = 0; block_col < grid.w / s; ++block_col) {
        for (int64_t i = 0; i < s; ++i) {
          for (int64_t j = 0; j < s; ++j, ++t) {
            rows[t] = block_row * s + i;
            cols[t] = block_col * s + j;
          }
        }
      }
    }
    // .repeat(t, 1): every further frame the same list.
    const int64_t frame = t - frame_start;
    for (int64_t f = 1; f < grid.t; ++f, t += frame) {
      std::copy_n(rows + frame_start, frame, rows + t);
      std::copy_n(cols + frame_start, frame, cols + t);
    }
  }
  return p;
}

QwenWindowOrder QwenVisionWindowOrder(std::span<const VisionGrid> grids, int64_t spatial_merge_size,
                                      int64_t window_units) {
  constexpr std::string_view kFn = "qwen_vision_window_order";
  const int64_t s = spatial_merge_size;
  const int64_t total = QwenTokens(kFn, grids, s);
  Require(window_units >= 1 && window_units <= kMaxVisionTokens, kFn, "window_units",
          "be in [1, 2^24]", window_units);
  const int64_t unit = s * s;  // patches per merged token
  QwenWindowOrder order;
  order.window_index.reserve(static_cast<size_t>(total / unit));
  order.cu_window_seqlens.push_back(0);
  int64_t first_unit = 0;  // merged tokens of the grids before this one
  for (const VisionGrid& grid : grids) {
    const int64_t mh = grid.h / s, mw = grid.w / s;
    // get_window_index pads each side to whole windows; the windows of the padding alone hold
    // no tokens, and forward's unique_consecutive drops their repeated offsets.
    const int64_t windows_h = (mh + window_units - 1) / window_units;
    const int64_t windows_w = (mw + window_units - 1) / window_units;
    for (int64_t f = 0; f < grid.t; ++f) {
      for (int64_t wr = 0; wr < windows_h; ++wr) {
        for (int64_t wc = 0; wc < windows_w; ++wc) {
          const int64_t r_end = std::min(mh, (wr + 1) * window_units);
          const int64_t c_end = std::min(mw, (wc + 1) * window_units);
          for (int64_t r = wr * window_units; r < r_end; ++r) {
            for (int64_t c = wc * window_units; c < c_end; ++c) {
              order.window_index.push_back(first_unit + (f * mh + r) * mw + c);
            }
          }
          order.cu_window_seqlens.push_back(static_cast<int64_t>(order.window_index.size()) * unit);
        }
      }
    }
    first_unit += grid.t * mh * mw;
  }
  return order;
}

VisionPositions QwenVisionPositionsInWindowOrder(std::span<const VisionGrid> grids,
                                                 int64_t spatial_merge_size, int64_t window_units) {
  const QwenWindowOrder order = QwenVisionWindowOrder(grids, spatial_merge_size, window_units);
  const VisionPositions by_patch = QwenVisionPositions(grids, spatial_merge_size);
  const int64_t unit = spatial_merge_size * spatial_merge_size;
  VisionPositions p = TwoStreams(by_patch.tokens);
  for (int64_t stream = 0; stream < 2; ++stream) {
    const int64_t* in = by_patch.data.data() + stream * by_patch.tokens;
    int64_t* out = p.data.data() + stream * p.tokens;
    for (size_t k = 0; k < order.window_index.size(); ++k) {
      std::copy_n(in + order.window_index[k] * unit, unit, out + static_cast<int64_t>(k) * unit);
    }
  }
  return p;
}

VisionPositions PixtralVisionPositions(std::span<const PatchRowsCols> images) {
  constexpr std::string_view kFn = "pixtral_vision_positions";
  int64_t total = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string name = "images[" + std::to_string(i) + "]";
    const PatchRowsCols& image = images[i];
    Require(image.rows >= 1 && image.rows <= kMaxVisionTokens, kFn, name + ".rows",
            "be in [1, 2^24]", image.rows);
    Require(image.cols >= 1 && image.cols <= kMaxVisionTokens, kFn, name + ".cols",
            "be in [1, 2^24]", image.cols);
    const int64_t area = image.rows * image.cols;
    Require(area <= kMaxVisionTokens - total, kFn, "tokens of all images", kMaxTokensRule,
            total + area);
    total += area;
  }
  VisionPositions p = TwoStreams(total);
  int64_t t = 0;
  for (const PatchRowsCols& image : images) {
    for (int64_t r = 0; r < image.rows; ++r) {
      for (int64_t c = 0; c < image.cols; ++c, ++t) {
        p.data[t] = r;
        p.data[total + t] = c;
      }
    }
  }
  return p;
}

VisionPositions PixtralVisionPositions(int64_t rows, int64_t cols) {
  const PatchRowsCols image{.rows = rows, .cols = cols};
  return PixtralVisionPositions(std::span<const PatchRowsCols>(&image, 1));
}

VisionPositions Llama4VisionPositions(int64_t side) {
  constexpr std::string_view kFn = "llama4_vision_positions";
  Require(side >= 1 && side <= 4095, kFn, "side",
          "be in [1, 4095] (side^2 + 1 <= kMaxVisionTokens)", side);
  const int64_t patches = side * side;
  VisionPositions p = TwoStreams(patches + 1);
  for (int64_t t = 0; t < patches; ++t) {
    p.data[t] = t % side + 1;             // frequencies_x + 1: column
    p.data[p.tokens + t] = t / side + 1;  // frequencies_y + 1: row
  }
  // The class token, last: positions 0 and 0, so its angles are 0 as the reference's mask.
  return p;
}

}  // namespace posenc
