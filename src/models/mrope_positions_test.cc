// Qwen-VL M-RoPE positions (posenc/mrope_positions.h): every golden file of
// tests/golden/mrope_index/ (Hugging Face's get_rope_index, per model and release) and of
// tests/golden/mrope_index_v5/ (transformers 5.23.0's own get_rope_index), the
// identities that tie the rules together, the config reader, and every refusal.
#include "posenc/mrope_positions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using Json = nlohmann::json;

constexpr int64_t kImage = 151655, kVideo = 151656, kStart = 151652, kEnd = 151653;

QwenVlTokens Tokens(MropeIndexRules rules, int64_t tokens_per_second = 2) {
  QwenVlTokens t;
  t.image_token_id = kImage;
  t.video_token_id = kVideo;
  t.vision_start_token_id = kStart;
  t.spatial_merge_size = 2;
  t.tokens_per_second = tokens_per_second;
  t.rules = rules;
  return t;
}

// <vision_start> token x n <vision_end>
std::vector<int64_t> VisionRun(int64_t token, int64_t n) {
  std::vector<int64_t> out{kStart};
  out.insert(out.end(), static_cast<size_t>(n), token);
  out.push_back(kEnd);
  return out;
}

std::vector<int64_t> Cat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

MropeIndex Index(const QwenVlTokens& tokens, const std::vector<int64_t>& ids,
                 std::vector<VisionGrid> images = {}, std::vector<VisionGrid> videos = {},
                 std::vector<double> seconds = {}, std::vector<int64_t> mask = {},
                 int64_t batch = 1) {
  return QwenVlRopeIndex(tokens, ids, batch, static_cast<int64_t>(ids.size()) / batch, images,
                         videos, seconds, mask);
}

std::vector<std::filesystem::path> GoldenFiles(const std::string& dir = "mrope_index") {
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(POSENC_GOLDEN_DIR) + "/" + dir)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<VisionGrid> Grids(const Json& list) {
  std::vector<VisionGrid> out;
  for (const Json& g : list)
    out.push_back({g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()});
  return out;
}

void ExpectMatchesGoldenFile(const std::filesystem::path& path) {
  {
    SCOPED_TRACE(path.filename().string());
    const Json golden = testing_support::ReadJsonFile(path.string());
    const Json& config = golden["config"];
    QwenVlTokens tokens;
    tokens.image_token_id = config["image_token_id"].get<int64_t>();
    tokens.video_token_id = config["video_token_id"].get<int64_t>();
    tokens.vision_start_token_id = config["vision_start_token_id"].get<int64_t>();
    tokens.spatial_merge_size = config["spatial_merge_size"].get<int64_t>();
    tokens.tokens_per_second =
        config["tokens_per_second"].is_null() ? 0 : config["tokens_per_second"].get<int64_t>();
    tokens.rules = ParseMropeIndexRules(golden["release"].get<std::string>());

    const Json& rows = golden["input_ids"];
    const int64_t batch = static_cast<int64_t>(rows.size());
    const int64_t seq_len = static_cast<int64_t>(rows[0].size());
    std::vector<int64_t> ids, mask;
    for (const Json& row : rows) {
      for (const Json& id : row) ids.push_back(id.get<int64_t>());
    }
    if (!golden["attention_mask"].is_null()) {
      for (const Json& row : golden["attention_mask"]) {
        for (const Json& m : row) mask.push_back(m.get<int64_t>());
      }
    }
    std::vector<double> seconds;
    if (!golden["second_per_grid_ts"].is_null()) {
      seconds = golden["second_per_grid_ts"].get<std::vector<double>>();
    }
    const std::vector<VisionGrid> images = Grids(golden["image_grid_thw"]);
    const std::vector<VisionGrid> videos = Grids(golden["video_grid_thw"]);

    const MropeIndex index =
        QwenVlRopeIndex(tokens, ids, batch, seq_len, images, videos, seconds, mask);
    ASSERT_EQ(index.batch, batch);
    ASSERT_EQ(index.tokens, seq_len);
    for (int s = 0; s < 3; ++s) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < seq_len; ++j) {
          ASSERT_EQ(index.Position(s, b, j), golden["position_ids"][s][b][j].get<int64_t>())
              << "stream " << s << " row " << b << " token " << j;
        }
      }
    }
    for (int64_t b = 0; b < batch; ++b) {
      EXPECT_EQ(index.rope_deltas[static_cast<size_t>(b)],
                golden["rope_deltas"][b][0].get<int64_t>())
          << "row " << b;
    }
  }
}

TEST(MropeIndexGolden, EveryFileMatchesHuggingFace) {
  const std::vector<std::filesystem::path> files = GoldenFiles();
  ASSERT_EQ(files.size(), 43u);
  for (const auto& path : files) ExpectMatchesGoldenFile(path);
}

TEST(MropeIndexGolden, EveryFileMatchesTransformers5) {
  const std::vector<std::filesystem::path> files = GoldenFiles("mrope_index_v5");
  ASSERT_EQ(files.size(), 45u);
  for (const auto& path : files) ExpectMatchesGoldenFile(path);
}

TEST(MropeIndexGolden, SourcesNameEveryRelease) {
  for (const auto& path : GoldenFiles()) {
    const Json golden = testing_support::ReadJsonFile(path.string());
    const std::string release = golden["release"].get<std::string>();
    EXPECT_EQ(path.filename().string().rfind(release + "-", 0), 0u) << path;
    EXPECT_EQ(MropeIndexRulesName(ParseMropeIndexRules(release)), release);
    EXPECT_EQ(golden["source"]["commit"].get<std::string>().size(), 40u) << path;
  }
  for (const auto& path : GoldenFiles("mrope_index_v5")) {
    const Json golden = testing_support::ReadJsonFile(path.string());
    const std::string release = golden["release"].get<std::string>();
    EXPECT_EQ(path.filename().string().rfind(release + "-", 0), 0u) << path;
    EXPECT_EQ(release, golden["model"].get<std::string>() + "_transformers5") << path;
    EXPECT_EQ(MropeIndexRulesName(ParseMropeIndexRules(release)), release);
    EXPECT_EQ(golden["source"]["version"].get<std::string>(), "5.23.0") << path;
  }
}

// transformers 5 against the 4.x rules on the same input: text after a video whose time passes
// its rows and columns, padded slots, and the delta of a left-padded row.
TEST(MropeIndexTransformers5, DiffersFrom4xWhereTheGoldenFilesSay) {
  // One text token, then a video of grid (4, 2, 4): 4 frames of 1 x 2 at base 2.
  const std::vector<int64_t> ids = Cat({{10}, VisionRun(kVideo, 8), {11, 12}});
  const MropeIndex old_rules = Index(Tokens(MropeIndexRules::kQwen2Vl), ids, {}, {{4, 2, 4}});
  const MropeIndex v5 = Index(Tokens(MropeIndexRules::kQwen2VlTransformers5), ids, {}, {{4, 2, 4}});
  // vision_end: 4.x at 1 + the largest (time 5) = 6; 5 at base + max(1, 2) = 4.
  EXPECT_EQ(old_rules.Position(0, 0, 10), 6);
  EXPECT_EQ(v5.Position(0, 0, 10), 4);
  EXPECT_EQ(v5.Position(0, 0, 9), 5);  // the last frame's time still passes the text after it
  EXPECT_EQ(old_rules.rope_deltas[0], 8 + 1 - 13);
  EXPECT_EQ(v5.rope_deltas[0], 6 + 1 - 13);  // largest is the last text token, 6

  // Two pads before a one-image row: slots 0 (not 1); delta over 13 unmasked tokens (not 15).
  const std::vector<int64_t> row = Cat({{10, 11}, VisionRun(kImage, 6), {12, 13, 14}});
  std::vector<int64_t> padded{0, 0}, mask{0, 0};
  padded.insert(padded.end(), row.begin(), row.end());
  mask.resize(padded.size(), 1);
  const MropeIndex a = Index(Tokens(MropeIndexRules::kQwen2Vl), padded, {{1, 4, 6}}, {}, {}, mask);
  const MropeIndex b =
      Index(Tokens(MropeIndexRules::kQwen2VlTransformers5), padded, {{1, 4, 6}}, {}, {}, mask);
  EXPECT_EQ(a.Position(0, 0, 0), 1);
  EXPECT_EQ(b.Position(0, 0, 0), 0);
  EXPECT_EQ(a.rope_deltas[0], 9 + 1 - 15);
  EXPECT_EQ(b.rope_deltas[0], 9 + 1 - 13);
}

TEST(MropeIndexTransformers5, Qwen2_5VlMultipliesTheIntervalFirst) {
  // s = 0.16 at 25 tokens per second: 4.49 takes (5 * 0.16f) * 25 = 19.99999 -> 19; transformers 5
  // takes 5 * float32(25 * 0.16f) = 5 * 4 = 20.
  const std::vector<int64_t> ids = Cat({{10}, VisionRun(kVideo, 6), {11}});
  const MropeIndex a = Index(Tokens(MropeIndexRules::kQwen2_5Vl, 25), ids, {}, {{6, 2, 2}}, {0.16});
  const MropeIndex b =
      Index(Tokens(MropeIndexRules::kQwen2_5VlTransformers5, 25), ids, {}, {{6, 2, 2}}, {0.16});
  EXPECT_EQ(a.Position(0, 0, 7), 2 + 19);
  EXPECT_EQ(b.Position(0, 0, 7), 2 + 20);
  EXPECT_EQ(a.Position(0, 0, 8), 22);  // vision_end after the largest time
  EXPECT_EQ(b.Position(0, 0, 8), 3);   // vision_end at base + max(1, 1)
}

TEST(MropeIndexTransformers5, TextOnlyHasNoMaskBranchAndNeedsATokenPerRow) {
  // [pad pad pad pad t]: 4.x gives [1 1 1 1 0] and delta -3; transformers 5 [0 0 0 0 0], delta 0.
  const std::vector<int64_t> ids{0, 0, 0, 0, 10};
  const std::vector<int64_t> mask{0, 0, 0, 0, 1};
  const MropeIndex v5 =
      Index(Tokens(MropeIndexRules::kQwen3VlTransformers5), ids, {}, {}, {}, mask);
  for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(v5.Position(1, 0, j), 0);
  EXPECT_EQ(v5.rope_deltas[0], 0);
  ExpectError(
      [] {
        Index(Tokens(MropeIndexRules::kQwen2VlTransformers5), {10, 11, 0, 0}, {}, {}, {},
              {1, 1, 0, 0}, 2);
      },
      "[mrope_index] attention_mask must keep at least one token of every row for rules "
      "qwen2_vl_transformers5, got row 1 all 0");
}

constexpr MropeIndexRules kAllRules[] = {MropeIndexRules::kQwen2Vl,
                                         MropeIndexRules::kQwen2_5Vl,
                                         MropeIndexRules::kQwen2_5VlIntSeconds,
                                         MropeIndexRules::kQwen3Vl,
                                         MropeIndexRules::kQwen2VlTransformers5,
                                         MropeIndexRules::kQwen2_5VlTransformers5,
                                         MropeIndexRules::kQwen3VlTransformers5};

TEST(MropeIndexIdentities, TextOnlyIsZeroToTMinusOneWithDeltaZero) {
  const std::vector<int64_t> ids{5, 6, 7, 8, 9, 10, 11, 12};
  for (MropeIndexRules rules : kAllRules) {
    const MropeIndex index = Index(Tokens(rules), ids);
    for (int s = 0; s < 3; ++s) {
      for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(index.Position(s, 0, j), j);
    }
    EXPECT_EQ(index.rope_deltas[0], 0);
  }
}

TEST(MropeIndexIdentities, TextRowBesideAnImageRowIsStillSequential) {
  // Grids are given, so the vision branch numbers both rows; the text row is 0..T-1, delta 0.
  const std::vector<int64_t> row0 = Cat({{1, 2}, VisionRun(kImage, 6), {3}});
  std::vector<int64_t> row1(row0.size());
  for (size_t j = 0; j < row1.size(); ++j) row1[j] = 100 + static_cast<int64_t>(j);
  for (MropeIndexRules rules : kAllRules) {
    const MropeIndex index = Index(Tokens(rules), Cat({row0, row1}), {{1, 4, 6}}, {}, {}, {}, 2);
    for (int s = 0; s < 3; ++s) {
      for (int64_t j = 0; j < index.tokens; ++j) EXPECT_EQ(index.Position(s, 1, j), j);
    }
    EXPECT_EQ(index.rope_deltas[1], 0);
    // The image row: text 0, 1, vision_start 2, the 2 x 3 image from base 3 in slots 3..8,
    // vision_end resumes at 3 + 2 + 1.
    EXPECT_EQ(index.Position(0, 0, 8), 3);  // last image token: time 0,
    EXPECT_EQ(index.Position(1, 0, 8), 4);  // row 1,
    EXPECT_EQ(index.Position(2, 0, 8), 5);  // column 2
    EXPECT_EQ(index.Position(0, 0, 9), 6);  // vision_end
    EXPECT_EQ(index.rope_deltas[0], 8 - 11);
  }
}

TEST(MropeIndexIdentities, IntegralSecondsAgreeAcrossQwen2_5Rules) {
  const std::vector<int64_t> ids = Cat({{1}, VisionRun(kVideo, 8), {2, 3}});
  for (double seconds : {0.0, 1.0, 2.0, 3.0}) {
    for (int64_t tps : {1, 2, 25}) {
      const MropeIndex a =
          Index(Tokens(MropeIndexRules::kQwen2_5Vl, tps), ids, {}, {{4, 2, 4}}, {seconds});
      const MropeIndex b = Index(Tokens(MropeIndexRules::kQwen2_5VlIntSeconds, tps), ids, {},
                                 {{4, 2, 4}}, {seconds});
      EXPECT_EQ(a.positions, b.positions) << seconds << " " << tps;
      EXPECT_EQ(a.rope_deltas, b.rope_deltas);
    }
  }
}

TEST(MropeIndexIdentities, Qwen2VlIsQwen2_5VlAtOneTokenPerSecondAndOneSecond) {
  const std::vector<int64_t> ids =
      Cat({{1}, VisionRun(kVideo, 12), {2}, VisionRun(kImage, 6), {3}});
  const MropeIndex a = Index(Tokens(MropeIndexRules::kQwen2Vl), ids, {{1, 4, 6}}, {{3, 4, 4}});
  const MropeIndex b =
      Index(Tokens(MropeIndexRules::kQwen2_5Vl, 1), ids, {{1, 4, 6}}, {{3, 4, 4}}, {1.0});
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.rope_deltas, b.rope_deltas);
}

TEST(MropeIndexIdentities, Qwen3VlVideoIsQwen2VlWithOneGridPerFrame) {
  // Qwen3-VL splits grid (3, 4, 4) into three (1, 4, 4) grids; Qwen2-VL given those three grids
  // numbers the same prompt the same way.
  const std::vector<int64_t> ids = Cat({{1, 50, 51},
                                        VisionRun(kVideo, 4),
                                        {52, 53},
                                        VisionRun(kVideo, 4),
                                        {54, 55},
                                        VisionRun(kVideo, 4),
                                        {2}});
  const MropeIndex a = Index(Tokens(MropeIndexRules::kQwen3Vl), ids, {}, {{3, 4, 4}});
  const MropeIndex b =
      Index(Tokens(MropeIndexRules::kQwen2Vl), ids, {}, {{1, 4, 4}, {1, 4, 4}, {1, 4, 4}});
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.rope_deltas, b.rope_deltas);
}

TEST(MropeIndexIdentities, LeftPaddingShiftsNothingButTheDelta) {
  const std::vector<int64_t> row = Cat({{1, 2}, VisionRun(kImage, 6), {3, 4}});
  const MropeIndex plain = Index(Tokens(MropeIndexRules::kQwen2Vl), row, {{1, 4, 6}});
  std::vector<int64_t> padded = Cat({{0, 0, 0}, row});
  std::vector<int64_t> mask(padded.size(), 1);
  std::fill(mask.begin(), mask.begin() + 3, 0);
  const MropeIndex index =
      Index(Tokens(MropeIndexRules::kQwen2Vl), padded, {{1, 4, 6}}, {}, {}, mask);
  for (int s = 0; s < 3; ++s) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(index.Position(s, 0, j), 1);
    for (int64_t j = 0; j < plain.tokens; ++j) {
      EXPECT_EQ(index.Position(s, 0, j + 3), plain.Position(s, 0, j));
    }
  }
  EXPECT_EQ(index.rope_deltas[0], plain.rope_deltas[0] - 3);
}

TEST(MropeIndexConfig, ReadsEachModelType) {
  const QwenVlTokens qwen2 = QwenVlTokensFromConfig(R"({
    "model_type": "qwen2_vl", "image_token_id": 151655, "video_token_id": 151656,
    "vision_start_token_id": 151652, "vision_config": {"spatial_merge_size": 2}})");
  EXPECT_EQ(qwen2.rules, MropeIndexRules::kQwen2Vl);
  EXPECT_EQ(qwen2.image_token_id, 151655);
  EXPECT_EQ(qwen2.video_token_id, 151656);
  EXPECT_EQ(qwen2.vision_start_token_id, 151652);
  EXPECT_EQ(qwen2.spatial_merge_size, 2);

  const std::string qwen2_5_text = R"({
    "model_type": "qwen2_5_vl", "image_token_id": 151655, "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}})";
  const QwenVlTokens qwen2_5 = QwenVlTokensFromConfig(qwen2_5_text);
  EXPECT_EQ(qwen2_5.rules, MropeIndexRules::kQwen2_5Vl);
  EXPECT_EQ(qwen2_5.tokens_per_second, 2);
  EXPECT_EQ(QwenVlTokensFromConfig(qwen2_5_text, MropeIndexRules::kQwen2_5VlIntSeconds).rules,
            MropeIndexRules::kQwen2_5VlIntSeconds);
  // Qwen2_5_VLVisionConfig's default when the key is absent.
  EXPECT_EQ(QwenVlTokensFromConfig(R"({"model_type": "qwen2_5_vl", "image_token_id": 1,
    "video_token_id": 2, "vision_start_token_id": 3})")
                .tokens_per_second,
            4);

  // Ids in text_config (as later releases save them), merge size from vision_config.
  const QwenVlTokens qwen3 = QwenVlTokensFromConfig(R"({
    "model_type": "qwen3_vl_moe",
    "text_config": {"image_token_id": 151655, "video_token_id": 151656,
                    "vision_start_token_id": 151652},
    "vision_config": {"spatial_merge_size": 2, "patch_size": 16}})");
  EXPECT_EQ(qwen3.rules, MropeIndexRules::kQwen3Vl);
  EXPECT_EQ(qwen3.video_token_id, 151656);
  EXPECT_EQ(qwen3.tokens_per_second, 0);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(MropeIndexConfig, ReadsThePublishedConfigs) {
  struct Case {
    const char* file;
    MropeIndexRules rules;
    int64_t tokens_per_second;
  };
  const Case cases[] = {
      {"real/qwen2_vl-qwen2-vl-7b-instruct.json", MropeIndexRules::kQwen2Vl, 0},
      {"real/qwen2_5_vl-qwen2.5-vl-7b-instruct.json", MropeIndexRules::kQwen2_5Vl, 2},
      {"real/qwen3_vl-qwen3-vl-8b-instruct.json", MropeIndexRules::kQwen3Vl, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const QwenVlTokens t = QwenVlTokensFromConfig(ReadText(testing_support::ConfigPath(c.file)));
    EXPECT_EQ(t.rules, c.rules);
    EXPECT_EQ(t.image_token_id, kImage);
    EXPECT_EQ(t.video_token_id, kVideo);
    EXPECT_EQ(t.vision_start_token_id, kStart);
    EXPECT_EQ(t.spatial_merge_size, 2);
    EXPECT_EQ(t.tokens_per_second, c.tokens_per_second);
  }
}

TEST(MropeIndexConfig, RefusesWhatItCannotUse) {
  ExpectError([] { QwenVlTokensFromConfig("{"); },
              "[mrope_index_config] config must be valid JSON, got "
              "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error "
              "while parsing object key - unexpected end of input; expected string literal");
  ExpectError([] { QwenVlTokensFromConfig(R"({"model_type": "llama"})"); },
              "[mrope_index_config] model_type must be qwen2_vl, qwen2_5_vl, qwen3_vl or "
              "qwen3_vl_moe, got \"llama\"");
  ExpectError(
      [] {
        QwenVlTokensFromConfig(R"({"model_type": "qwen2_vl", "image_token_id": 1,
          "video_token_id": 2, "vision_start_token_id": 3})",
                               MropeIndexRules::kQwen2_5Vl);
      },
      "[mrope_index_config] rules must belong to the config's model_type qwen2_vl, got "
      "qwen2_5_vl");
  ExpectError(
      [] {
        QwenVlTokensFromConfig(R"({"model_type": "qwen2_vl", "image_token_id": 1,
          "video_token_id": 2})");
      },
      "[hf_config] vision_start_token_id must be present (at the top level or in text_config), "
      "got nothing (the key is missing)");
  ExpectError(
      [] {
        QwenVlTokensFromConfig(R"({"model_type": "qwen2_vl", "image_token_id": 1.5,
          "video_token_id": 2, "vision_start_token_id": 3})");
      },
      "[hf_config] image_token_id must be an integer in [0, 2147483647], got 1.5");
  ExpectError(
      [] {
        QwenVlTokensFromConfig(R"({"model_type": "qwen2_vl", "image_token_id": 1,
          "video_token_id": 2, "vision_start_token_id": 3,
          "vision_config": {"spatial_merge_size": 0}})");
      },
      "[hf_config] vision_config.spatial_merge_size must be an integer in [1, 64], got 0");
  ExpectError(
      [] {
        QwenVlTokensFromConfig(R"({"model_type": "qwen2_vl", "image_token_id": 1,
          "video_token_id": 1, "vision_start_token_id": 3})");
      },
      "[mrope_index] image_token_id, video_token_id and vision_start_token_id must differ, "
      "got 1, 1, 3");
}

TEST(MropeIndexRulesNames, RoundTripAndRefuseOthers) {
  for (MropeIndexRules rules : kAllRules) {
    EXPECT_EQ(ParseMropeIndexRules(MropeIndexRulesName(rules)), rules);
  }
  ExpectError([] { ParseMropeIndexRules("qwen2.5"); },
              "[mrope_index] rules must be one of qwen2_vl, qwen2_5_vl, qwen2_5_vl_int_seconds, "
              "qwen3_vl, qwen2_vl_transformers5, qwen2_5_vl_transformers5, "
              "qwen3_vl_transformers5, got \"qwen2.5\"");
}

TEST(MropeIndexErrors, SizesAndMask) {
  const QwenVlTokens tokens = Tokens(MropeIndexRules::kQwen2Vl);
  const std::vector<int64_t> ids{1, 2, 3, 4};
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 0, 4, {}, {}, {}, {}); },
              "[mrope_index] batch must be in [1, 2^40], got 0");
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 1, 0, {}, {}, {}, {}); },
              "[mrope_index] seq_len must be >= 1 with batch * seq_len <= 2^40, got 0");
  ExpectError(
      [&] {
        QwenVlRopeIndex(tokens, ids, std::numeric_limits<int64_t>::max() / 2, 4, {}, {}, {}, {});
      },
      "[mrope_index] batch must be in [1, 2^40], got 4611686018427387903");
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 1 << 20, 1 << 21, {}, {}, {}, {}); },
              "[mrope_index] seq_len must be >= 1 with batch * seq_len <= 2^40, got 2097152");
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 1, 5, {}, {}, {}, {}); },
              "[mrope_index] input_ids must hold batch * seq_len = 5 ids, got 4 ids");
  const std::vector<int64_t> short_mask{1, 1, 1};
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 2, 2, {}, {}, {}, short_mask); },
              "[mrope_index] attention_mask must be empty or hold batch * seq_len = 4 values, "
              "got 3 values");
  const std::vector<int64_t> bad_mask{1, 1, 2, 1};
  ExpectError([&] { QwenVlRopeIndex(tokens, ids, 2, 2, {}, {}, {}, bad_mask); },
              "[mrope_index] attention_mask[1][0] must be 0 or 1, got 2");
  QwenVlTokens bad = tokens;
  bad.spatial_merge_size = 0;
  ExpectError([&] { QwenVlRopeIndex(bad, ids, 1, 4, {}, {}, {}, {}); },
              "[mrope_index] spatial_merge_size must be in [1, 64], got 0");
  bad = tokens;
  bad.vision_start_token_id = -1;
  ExpectError([&] { QwenVlRopeIndex(bad, ids, 1, 4, {}, {}, {}, {}); },
              "[mrope_index] vision_start_token_id must be in [0, 2^31), got -1");
  bad = Tokens(MropeIndexRules::kQwen2_5Vl, 0);
  ExpectError([&] { QwenVlRopeIndex(bad, ids, 1, 4, {}, {}, {}, {}); },
              "[mrope_index] tokens_per_second must be in [1, 2^20] for rules qwen2_5_vl, got 0");
  bad = tokens;
  bad.rules = static_cast<MropeIndexRules>(17);
  ExpectError([&] { QwenVlRopeIndex(bad, ids, 1, 4, {}, {}, {}, {}); },
              "[mrope_index] rules must be a MropeIndexRules value, got 17");
}

TEST(MropeIndexErrors, Grids) {
  const QwenVlTokens tokens = Tokens(MropeIndexRules::kQwen2Vl);
  const std::vector<int64_t> ids = Cat({{1}, VisionRun(kImage, 6), {2}});
  ExpectError([&] { Index(tokens, ids, {{1, 5, 6}}); },
              "[mrope_index] image_grids[0] must have h and w divisible by spatial_merge_size 2, "
              "got (1, 5, 6)");
  ExpectError([&] { Index(tokens, ids, {{0, 4, 6}}); },
              "[mrope_index] image_grids[0] must have t, h and w in [1, 2^20], got (0, 4, 6)");
  ExpectError([&] { Index(tokens, ids, {{1, 4, int64_t{1} << 40}}); },
              "[mrope_index] image_grids[0] must have t, h and w in [1, 2^20], got (1, 4, "
              "1099511627776)");
  ExpectError([&] { Index(tokens, ids, {}, {{1, 4, 6}, {-2, 2, 2}}); },
              "[mrope_index] video_grids[1] must have t, h and w in [1, 2^20], got (-2, 2, 2)");
  // Qwen3-VL: a video's frames each need a run, so t far beyond the input is refused before
  // the per-frame list is built.
  ExpectError(
      [&] { Index(Tokens(MropeIndexRules::kQwen3Vl), ids, {{1, 4, 6}}, {{1 << 20, 2, 2}}); },
      "[mrope_index] video_grids must ask for at most as many runs as input_ids has tokens (10), "
      "got 1048576 runs");
  // A run of 6 image tokens against grid (2, 4, 6), which merges to 2 x 2 x 3 = 12 tokens.
  ExpectError([&] { Index(tokens, ids, {{2, 4, 6}}); },
              "[mrope_index] input_ids must hold t * (h/2) * (w/2) = 12 tokens in the run of "
              "image_grids[0] (2, 4, 6), got 6 tokens at row 0, unmasked token 2");
  ExpectError([&] { Index(tokens, ids); },
              "[mrope_index] input_ids must have no more image runs than image_grids (0), got "
              "another image run at row 0, unmasked token 2");
  ExpectError([&] { Index(tokens, ids, {{1, 4, 6}, {1, 2, 2}}); },
              "[mrope_index] image_grids must be matched by as many image runs in input_ids, got "
              "2 grids for 1 runs");
  ExpectError([&] { Index(tokens, ids, {{1, 4, 6}}, {{1, 2, 2}}); },
              "[mrope_index] video_grids must be matched by as many video runs in input_ids, got "
              "1 grids for 0 runs");
  const std::vector<int64_t> frames = Cat({{1}, VisionRun(kVideo, 4), {7}, VisionRun(kVideo, 4)});
  ExpectError([&] { Index(Tokens(MropeIndexRules::kQwen3Vl), frames, {}, {{3, 4, 4}}); },
              "[mrope_index] video_grids must have as many frames (t summed) as video runs in "
              "input_ids, got 3 frames for 2 runs");
  ExpectError([&] { Index(Tokens(MropeIndexRules::kQwen3Vl), frames, {}, {{1, 4, 4}}); },
              "[mrope_index] input_ids must have no more video runs than video frames "
              "(video_grids t summed: 1), got another video run at row 0, unmasked token 9");
  ExpectError([&] { Index(Tokens(MropeIndexRules::kQwen3Vl), frames, {}, {{2, 4, 2}}); },
              "[mrope_index] input_ids must hold t * (h/2) * (w/2) = 2 tokens in the run of "
              "video_grids[0] (2, 4, 2) frame 0, got 4 tokens at row 0, unmasked token 2");
}

TEST(MropeIndexErrors, RunsAndRows) {
  const QwenVlTokens tokens = Tokens(MropeIndexRules::kQwen2Vl);
  // Image tokens without vision_start before them.
  const std::vector<int64_t> bare{1, kImage, kImage, kImage, kImage, kImage, kImage, 2};
  ExpectError([&] { Index(tokens, bare, {{1, 4, 6}}); },
              "[mrope_index] input_ids must open every run of image tokens with "
              "vision_start_token_id 151652, got a run at row 0, unmasked token 1 without it");
  // Image tokens straight after video tokens: the second run has no vision_start.
  const std::vector<int64_t> glued = Cat({{1, kStart, kVideo, kImage}, {2}});
  ExpectError([&] { Index(tokens, glued, {{1, 2, 2}}, {{1, 2, 2}}); },
              "[mrope_index] input_ids must open every run of image tokens with "
              "vision_start_token_id 151652, got a run at row 0, unmasked token 3 without it");
  // A masked-out vision_start does not open the run.
  const std::vector<int64_t> ids = Cat({{1}, VisionRun(kImage, 1), {2}});
  const std::vector<int64_t> mask{1, 0, 1, 1, 1};
  ExpectError([&] { Index(tokens, ids, {{1, 2, 2}}, {}, {}, mask); },
              "[mrope_index] input_ids must open every run of image tokens with "
              "vision_start_token_id 151652, got a run at row 0, unmasked token 1 without it");
  const std::vector<int64_t> two_rows = Cat({ids, {1, 2, 3, 4, 5}});
  std::vector<int64_t> empty_row(10, 1);
  std::fill(empty_row.begin() + 5, empty_row.end(), 0);
  ExpectError([&] { Index(tokens, two_rows, {{1, 2, 2}}, {}, {}, empty_row, 2); },
              "[mrope_index] attention_mask must keep at least one token of every row when grids "
              "are given, got row 1 all 0");
}

TEST(MropeIndexErrors, Seconds) {
  const std::vector<int64_t> ids = Cat({{1}, VisionRun(kVideo, 8), {2}});
  const QwenVlTokens qwen2_5 = Tokens(MropeIndexRules::kQwen2_5Vl);
  ExpectError([&] { Index(qwen2_5, ids, {}, {{4, 2, 4}}, {1.0, 2.0}); },
              "[mrope_index] second_per_grid_ts must be empty or hold one value per video (1), "
              "got 2 values");
  ExpectError([&] { Index(qwen2_5, ids, {}, {{4, 2, 4}}, {-0.5}); },
              "[mrope_index] second_per_grid_ts[0] must be finite and in [0, 86400], got -0.5");
  ExpectError(
      [&] { Index(qwen2_5, ids, {}, {{4, 2, 4}}, {std::numeric_limits<double>::quiet_NaN()}); },
      "[mrope_index] second_per_grid_ts[0] must be finite and in [0, 86400], got nan");
  ExpectError([&] { Index(Tokens(MropeIndexRules::kQwen2Vl), ids, {}, {{4, 2, 4}}, {0.5}); },
              "[mrope_index] second_per_grid_ts must be empty for rules qwen2_vl (only "
              "Qwen2.5-VL scales time), got 1 values");
}

TEST(MropeIndexTime, SecondsBelowOneCollapseOnlyUnderTheIntCast) {
  // A video of 4 temporal grids at 0.5 s per grid and 2 tokens per second: released Qwen2.5-VL
  // steps 1 per grid; the int cast puts all four at the same time.
  const std::vector<int64_t> ids = Cat({{1, 2}, VisionRun(kVideo, 8), {3}});
  const MropeIndex released =
      Index(Tokens(MropeIndexRules::kQwen2_5Vl, 2), ids, {}, {{4, 2, 4}}, {0.5});
  const MropeIndex cast =
      Index(Tokens(MropeIndexRules::kQwen2_5VlIntSeconds, 2), ids, {}, {{4, 2, 4}}, {0.5});
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(released.Position(0, 0, 3 + 2 * i), 3 + i);
    EXPECT_EQ(cast.Position(0, 0, 3 + 2 * i), 3);
  }
}

}  // namespace
}  // namespace posenc
