// Vision-tower patch positions (posenc/vision_positions.h): the order of each reference
// (tests/golden/mrope/, made by Hugging Face's own rot_pos_emb, get_window_index,
// position_ids_in_meshgrid and Llama4VisionRotaryEmbedding), the drawn example of the header,
// and bad input refused with the rule.
#include "posenc/vision_positions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using nlohmann::json;
using testing_support::ExpectError;
using testing_support::GoldenJson;

std::vector<int64_t> DenseStreams(const json& streams) {
  std::vector<int64_t> data;
  for (const json& s : streams) {
    for (const json& p : s) data.push_back(p.get<int64_t>());
  }
  return data;
}

std::vector<VisionGrid> Grids(const json& g) {
  std::vector<VisionGrid> grids;
  for (const json& thw : g["grids_thw"]) {
    grids.push_back(VisionGrid{.t = thw[0], .h = thw[1], .w = thw[2]});
  }
  return grids;
}

TEST(QwenVisionPositions, DrawnExampleTakesMergeBlocksRowByRow) {
  const std::vector<VisionGrid> grid = {{.t = 1, .h = 4, .w = 4}};
  const VisionPositions p = QwenVisionPositions(grid, 2);
  EXPECT_EQ(p.num_streams, 2);
  EXPECT_EQ(p.tokens, 16);
  EXPECT_EQ(p.data, (std::vector<int64_t>{0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3,  //
                                          0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}));
  const PositionStreams view = p.Streams();
  EXPECT_EQ(view.num_streams, 2);
  EXPECT_EQ(view.tokens, 16);
  EXPECT_EQ(view.At(1, 5), 3);
}

TEST(QwenVisionPositions, MatchTheReferenceRotPosEmbOfQwen2Qwen25AndQwen3) {
  // Qwen2-VL's and Qwen2.5-VL's rot_pos_emb, and Qwen3-VL's rewritten one, give one order.
  for (const char* file : {"mrope/qwen2_vl_vision.json", "mrope/qwen2_5_vl_vision.json",
                           "mrope/qwen3_vl_vision.json"}) {
    const json g = GoldenJson(file);
    const VisionPositions p = QwenVisionPositions(Grids(g), g["spatial_merge_size"]);
    EXPECT_EQ(p.tokens, g["tokens"].get<int64_t>()) << file;
    EXPECT_EQ(p.data, DenseStreams(g["positions"])) << file;
  }
}

TEST(QwenVisionPositions, EveryFrameRepeatsTheFrameAndGridsFollowOneAnother) {
  const std::vector<VisionGrid> grids = {{.t = 3, .h = 2, .w = 4}, {.t = 1, .h = 2, .w = 2}};
  const VisionPositions p = QwenVisionPositions(grids, 2);
  ASSERT_EQ(p.tokens, 3 * 8 + 4);
  const VisionPositions frame = QwenVisionPositions(std::vector<VisionGrid>{{.h = 2, .w = 4}}, 2);
  for (int64_t f = 0; f < 3; ++f) {
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(p.At(0, f * 8 + t), frame.At(0, t));
      EXPECT_EQ(p.At(1, f * 8 + t), frame.At(1, t));
    }
  }
  EXPECT_EQ(p.At(0, 24), 0);
  EXPECT_EQ(p.At(1, 25), 1);
  // spatial_merge_size 1: plain row-major.
  const VisionPositions plain = QwenVisionPositions(std::vector<VisionGrid>{{.h = 2, .w = 3}}, 1);
  EXPECT_EQ(plain.data, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(QwenVisionPositions({}, 2).tokens, 0);
}

TEST(QwenVisionWindowOrder, MatchesTheReferenceGetWindowIndex) {
  const json g = GoldenJson("mrope/qwen2_5_vl_vision.json");
  const int64_t s = g["spatial_merge_size"];
  const int64_t window_units = g["window_size"].get<int64_t>() / s / g["patch_size"].get<int64_t>();
  ASSERT_EQ(window_units, 4);
  const QwenWindowOrder order = QwenVisionWindowOrder(Grids(g), s, window_units);
  EXPECT_EQ(order.window_index, g["window_index"].get<std::vector<int64_t>>());
  // The reference's list keeps the repeated offsets of windows that hold only padding; forward
  // drops them with unique_consecutive.
  std::vector<int64_t> cu = g["cu_window_seqlens"].get<std::vector<int64_t>>();
  cu.erase(std::unique(cu.begin(), cu.end()), cu.end());
  EXPECT_EQ(order.cu_window_seqlens, cu);
  const VisionPositions p = QwenVisionPositionsInWindowOrder(Grids(g), s, window_units);
  EXPECT_EQ(p.data, DenseStreams(g["positions_window_order"]));
}

TEST(QwenVisionWindowOrder, OneWindowKeepsThePatchOrder) {
  const std::vector<VisionGrid> grids = {{.t = 2, .h = 4, .w = 6}};
  const QwenWindowOrder order = QwenVisionWindowOrder(grids, 2, 4);
  EXPECT_EQ(order.window_index, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(order.cu_window_seqlens, (std::vector<int64_t>{0, 24, 48}));
  EXPECT_EQ(QwenVisionPositionsInWindowOrder(grids, 2, 4).data, QwenVisionPositions(grids, 2).data);
}

TEST(PixtralVisionPositions, MatchPositionIdsInMeshgrid) {
  const json g = GoldenJson("mrope/pixtral_vision.json");
  std::vector<PatchRowsCols> images;
  for (const json& rc : g["images_rows_cols"]) images.push_back({.rows = rc[0], .cols = rc[1]});
  const VisionPositions p = PixtralVisionPositions(images);
  EXPECT_EQ(p.data, DenseStreams(g["positions"]));
  // The reference's flat ids are row * max_width + column.
  const int64_t max_width = g["max_patches_per_side"];
  const std::vector<int64_t> ids = g["position_ids"].get<std::vector<int64_t>>();
  ASSERT_EQ(static_cast<int64_t>(ids.size()), p.tokens);
  for (int64_t t = 0; t < p.tokens; ++t) EXPECT_EQ(p.At(0, t) * max_width + p.At(1, t), ids[t]);
  // One image alone is the first image's part.
  const VisionPositions first = PixtralVisionPositions(3, 5);
  ASSERT_EQ(first.tokens, 15);
  for (int64_t t = 0; t < 15; ++t) {
    EXPECT_EQ(first.At(0, t), p.At(0, t));
    EXPECT_EQ(first.At(1, t), p.At(1, t));
  }
}

TEST(Llama4VisionPositions, ColumnThenRowFromOneAndTheClassTokenLastAtZero) {
  const json g = GoldenJson("mrope/llama4_vision.json");
  const VisionPositions p = Llama4VisionPositions(g["side"]);
  EXPECT_EQ(p.tokens, 17);
  EXPECT_EQ(p.data, DenseStreams(g["positions"]));
  // From the reference's own coordinates: frequencies_x + 1, frequencies_y + 1; class token
  // (img_idx -2) last.
  const std::vector<int64_t> x = g["frequencies_x"].get<std::vector<int64_t>>();
  const std::vector<int64_t> y = g["frequencies_y"].get<std::vector<int64_t>>();
  const std::vector<int64_t> idx = g["img_idx"].get<std::vector<int64_t>>();
  for (int64_t t = 0; t + 1 < p.tokens; ++t) {
    EXPECT_EQ(p.At(0, t), x[t] + 1);
    EXPECT_EQ(p.At(1, t), y[t] + 1);
  }
  EXPECT_EQ(idx.back(), -2);
  EXPECT_EQ(Llama4VisionPositions(1).data, (std::vector<int64_t>{1, 0, 1, 0}));
}

TEST(VisionPositionsErrors, BadSizesAreRefusedWithTheRule) {
  const std::vector<VisionGrid> odd = {{.t = 1, .h = 4, .w = 6}, {.t = 1, .h = 4, .w = 5}};
  ExpectError([&] { QwenVisionPositions(odd, 2); },
              "[qwen_vision_positions] grids[1].w must be a multiple of spatial_merge_size (2), "
              "got 5");
  ExpectError([&] { QwenVisionPositions(std::vector<VisionGrid>{{.t = 0, .h = 2, .w = 2}}, 2); },
              "[qwen_vision_positions] grids[0].t must be in [1, 2^24], got 0");
  ExpectError([&] { QwenVisionPositions(std::vector<VisionGrid>{{.t = 1, .h = -2, .w = 2}}, 2); },
              "[qwen_vision_positions] grids[0].h must be in [1, 2^24], got -2");
  ExpectError([&] { QwenVisionPositions(std::vector<VisionGrid>{{.t = 1, .h = 2, .w = 2}}, 0); },
              "[qwen_vision_positions] spatial_merge_size must be in [1, 2^24], got 0");
  // Products that would overflow int64 are refused from their factors, each in range.
  ExpectError(
      [&] {
        QwenVisionPositions(std::vector<VisionGrid>{{.t = 1, .h = 1 << 24, .w = 1 << 24}}, 1);
      },
      "[qwen_vision_positions] grids[0].h * w must be at most kMaxVisionTokens = 2^24, got "
      "281474976710656");
  ExpectError(
      [&] { QwenVisionPositions(std::vector<VisionGrid>{{.t = 1 << 24, .h = 64, .w = 64}}, 2); },
      "[qwen_vision_positions] grids[0].t * h * w must be at most kMaxVisionTokens = 2^24, got "
      "68719476736");
  const std::vector<VisionGrid> many(5, VisionGrid{.t = 1, .h = 2048, .w = 2048});
  ExpectError([&] { QwenVisionPositions(many, 2); },
              "[qwen_vision_positions] tokens of all grids must be at most kMaxVisionTokens = "
              "2^24, got 20971520");
  ExpectError([&] { QwenVisionWindowOrder(std::vector<VisionGrid>{{.h = 4, .w = 4}}, 2, 0); },
              "[qwen_vision_window_order] window_units must be in [1, 2^24], got 0");
  ExpectError([&] { PixtralVisionPositions(3, 0); },
              "[pixtral_vision_positions] images[0].cols must be in [1, 2^24], got 0");
  const std::vector<PatchRowsCols> big(2, PatchRowsCols{.rows = 4096, .cols = 4096});
  ExpectError([&] { PixtralVisionPositions(big); },
              "[pixtral_vision_positions] tokens of all images must be at most "
              "kMaxVisionTokens = 2^24, got 33554432");
  ExpectError([&] { Llama4VisionPositions(0); },
              "[llama4_vision_positions] side must be in [1, 4095] (side^2 + 1 <= "
              "kMaxVisionTokens), got 0");
  ExpectError([&] { Llama4VisionPositions(4096); },
              "[llama4_vision_positions] side must be in [1, 4095] (side^2 + 1 <= "
              "kMaxVisionTokens), got 4096");
}

}  // namespace
}  // namespace posenc
