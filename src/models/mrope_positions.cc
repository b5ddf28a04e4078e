// Qwen-VL M-RoPE positions (posenc/mrope_positions.h): Hugging Face's get_rope_index, one row at
// a time, with every input checked before the output is allocated.
#include "posenc/mrope_positions.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "families.h"
#include "hf_json.h"
#include "posenc/error.h"

namespace posenc {
namespace {

constexpr std::string_view kFn = "mrope_index";
constexpr std::string_view kConfigFn = "mrope_index_config";
constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxMergeSize = 64;
constexpr int64_t kMaxTokensPerSecond = int64_t{1} << 20;
constexpr int64_t kMaxGridSide = int64_t{1} << 20;
constexpr int64_t kMaxTotalTokens = int64_t{1} << 40;
constexpr double kMaxSecondsPerGrid = 86400;

struct RuleInfo {
  MropeIndexRules rules;
  std::string_view name;
};
constexpr RuleInfo kRules[] = {
    {MropeIndexRules::kQwen2Vl, "qwen2_vl"},
    {MropeIndexRules::kQwen2_5Vl, "qwen2_5_vl"},
    {MropeIndexRules::kQwen2_5VlIntSeconds, "qwen2_5_vl_int_seconds"},
    {MropeIndexRules::kQwen3Vl, "qwen3_vl"},
    {MropeIndexRules::kQwen2VlTransformers5, "qwen2_vl_transformers5"},
    {MropeIndexRules::kQwen2_5VlTransformers5, "qwen2_5_vl_transformers5"},
    {MropeIndexRules::kQwen3VlTransformers5, "qwen3_vl_transformers5"},
};

// The model a rule belongs to, named by its release rule.
MropeIndexRules ModelOf(MropeIndexRules rules) {
  switch (rules) {
    case MropeIndexRules::kQwen2Vl:
    case MropeIndexRules::kQwen2VlTransformers5:
      return MropeIndexRules::kQwen2Vl;
    case MropeIndexRules::kQwen2_5Vl:
    case MropeIndexRules::kQwen2_5VlIntSeconds:
    case MropeIndexRules::kQwen2_5VlTransformers5:
      return MropeIndexRules::kQwen2_5Vl;
    case MropeIndexRules::kQwen3Vl:
    case MropeIndexRules::kQwen3VlTransformers5:
      return MropeIndexRules::kQwen3Vl;
  }
  return rules;
}

bool IsQwen2_5(MropeIndexRules rules) { return ModelOf(rules) == MropeIndexRules::kQwen2_5Vl; }
bool IsQwen3(MropeIndexRules rules) { return ModelOf(rules) == MropeIndexRules::kQwen3Vl; }
// transformers 5's get_rope_index: runs from mm_token_type_ids, text resumes at
// base + max(h/m, w/m), padded slots 0, the delta over the unpadded row, no mask-only branch.
bool IsTransformers5(MropeIndexRules rules) {
  return rules == MropeIndexRules::kQwen2VlTransformers5 ||
         rules == MropeIndexRules::kQwen2_5VlTransformers5 ||
         rules == MropeIndexRules::kQwen3VlTransformers5;
}

std::string GridText(const VisionGrid& g) {
  std::ostringstream out;
  out << '(' << g.t << ", " << g.h << ", " << g.w << ')';
  return out.str();
}

// Checks one grid and returns its merged token count t * (h/m) * (w/m) (at most 2^60).
int64_t MergedTokens(const VisionGrid& g, int64_t merge, std::string_view list, size_t index) {
  const std::string name = std::string(list) + "[" + std::to_string(index) + "]";
  Require(g.t >= 1 && g.h >= 1 && g.w >= 1 && g.t <= kMaxGridSide && g.h <= kMaxGridSide &&
              g.w <= kMaxGridSide,
          kFn, name, "have t, h and w in [1, 2^20]", GridText(g));
  Require(g.h % merge == 0 && g.w % merge == 0, kFn, name,
          "have h and w divisible by spatial_merge_size " + std::to_string(merge), GridText(g));
  return g.t * (g.h / merge) * (g.w / merge);
}

// One grid as the rows consume it: Qwen3-VL splits each video into one (1, h, w) grid per frame.
struct Grid {
  int64_t t, rows, cols;  // merged
  int64_t tokens;
  size_t source;  // index into the caller's list
  int64_t frame;  // Qwen3-VL: frame within the video; otherwise 0
};

std::vector<Grid> ConsumableGrids(std::span<const VisionGrid> grids, int64_t merge,
                                  std::string_view list, bool split_frames, int64_t limit) {
  int64_t count = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    MergedTokens(grids[i], merge, list, i);
    count += split_frames ? grids[i].t : 1;
    // Every grid needs at least one token of the input, so more grids than tokens is an error
    // found here, before the list below is allocated.
    Require(count <= limit, kFn, list,
            "ask for at most as many runs as input_ids has tokens (" + std::to_string(limit) + ")",
            std::to_string(count) + " runs");
  }
  std::vector<Grid> out;
  out.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    const int64_t rows = g.h / merge, cols = g.w / merge;
    if (split_frames) {
      for (int64_t f = 0; f < g.t; ++f) out.push_back({1, rows, cols, rows * cols, i, f});
    } else {
      out.push_back({g.t, rows, cols, g.t * rows * cols, i, 0});
    }
  }
  return out;
}

// T(i) of one run, per rule (see MropeIndexRules).
class TemporalIndex {
 public:
  TemporalIndex(MropeIndexRules rules, bool video, double seconds, int64_t tokens_per_second)
      : rules_(rules), video_(video), tokens_per_second_(tokens_per_second) {
    seconds_f32_ = static_cast<float>(seconds);
    // as_tensor(float32 seconds, dtype=int64) truncates toward zero.
    seconds_int_ = static_cast<int64_t>(seconds_f32_);
    // transformers 5: time_interval = tokens_per_second * second_per_grid_t, an int times a
    // float32 scalar tensor, so float32.
    interval_f32_ = static_cast<float>(tokens_per_second_) * seconds_f32_;
  }

  // transformers 5, Qwen2.5-VL: without second_per_grid_ts the seconds are the Python int 1, so
  // the interval is the int tokens_per_second and T(i) = i * tokens_per_second exactly.
  void SetIntegerSeconds() { integer_seconds_ = true; }

  int64_t operator()(int64_t i) const {
    switch (rules_) {
      case MropeIndexRules::kQwen2Vl:
      case MropeIndexRules::kQwen3Vl:
        return i;
      case MropeIndexRules::kQwen2_5Vl: {
        if (!video_) return 0;  // second_per_grid_t = 0 for images
        // int64 range times a float32 scalar is float32; then times the integer
        // tokens_per_second, still float32; .long() truncates.
        const float step = static_cast<float>(i) * seconds_f32_;
        const float time = step * static_cast<float>(tokens_per_second_);
        return static_cast<int64_t>(time);
      }
      case MropeIndexRules::kQwen2_5VlIntSeconds:
        return video_ ? i * seconds_int_ * tokens_per_second_ : 0;
      case MropeIndexRules::kQwen2VlTransformers5:
      case MropeIndexRules::kQwen3VlTransformers5:
        return i;  // (arange(t) * 1.0).long()
      case MropeIndexRules::kQwen2_5VlTransformers5: {
        if (!video_) return i;  // time_interval 1 for images
        if (integer_seconds_) return i * tokens_per_second_;
        // (arange(t) * float32 interval).long(): int64 range times a float32 scalar.
        return static_cast<int64_t>(static_cast<float>(i) * interval_f32_);
      }
    }
    return 0;
  }

 private:
  MropeIndexRules rules_;
  bool video_;
  int64_t tokens_per_second_;
  float seconds_f32_ = 0;
  int64_t seconds_int_ = 0;
  float interval_f32_ = 0;
  bool integer_seconds_ = false;
};

// The text-only branch of get_rope_index (no grid at all).
MropeIndex TextOnly(int64_t batch, int64_t seq_len, std::span<const int64_t> mask) {
  MropeIndex out{batch, seq_len, std::vector<int64_t>(static_cast<size_t>(3 * batch * seq_len)),
                 std::vector<int64_t>(static_cast<size_t>(batch))};
  for (int64_t b = 0; b < batch; ++b) {
    int64_t count = 0, largest = std::numeric_limits<int64_t>::min();
    for (int64_t j = 0; j < seq_len; ++j) {
      const size_t at = static_cast<size_t>(b * seq_len + j);
      int64_t p = j;
      if (!mask.empty()) {
        count += mask[at];
        p = mask[at] == 1 ? count - 1 : 1;
      }
      largest = std::max(largest, p);
      for (int s = 0; s < 3; ++s)
        out.positions[static_cast<size_t>((s * batch + b) * seq_len + j)] = p;
    }
    out.rope_deltas[static_cast<size_t>(b)] = mask.empty() ? 0 : largest + 1 - seq_len;
  }
  return out;
}

}  // namespace

std::string_view MropeIndexRulesName(MropeIndexRules rules) {
  for (const RuleInfo& info : kRules) {
    if (info.rules == rules) return info.name;
  }
  throw Error(ErrorMessage(kFn, "rules", "be a MropeIndexRules value", static_cast<int>(rules)));
}

MropeIndexRules ParseMropeIndexRules(std::string_view name) {
  for (const RuleInfo& info : kRules) {
    if (info.name == name) return info.rules;
  }
  throw Error(ErrorMessage(kFn, "rules",
                           "be one of qwen2_vl, qwen2_5_vl, qwen2_5_vl_int_seconds, qwen3_vl, "
                           "qwen2_vl_transformers5, qwen2_5_vl_transformers5, "
                           "qwen3_vl_transformers5",
                           "\"" + std::string(name) + "\""));
}

void QwenVlTokens::Validate() const {
  MropeIndexRulesName(rules);
  const auto id_ok = [](int64_t id) { return id >= 0 && id <= kMaxTokenId; };
  Require(id_ok(image_token_id), kFn, "image_token_id", "be in [0, 2^31)", image_token_id);
  Require(id_ok(video_token_id), kFn, "video_token_id", "be in [0, 2^31)", video_token_id);
  Require(id_ok(vision_start_token_id), kFn, "vision_start_token_id", "be in [0, 2^31)",
          vision_start_token_id);
  Require(image_token_id != video_token_id && image_token_id != vision_start_token_id &&
              video_token_id != vision_start_token_id,
          kFn, "image_token_id, video_token_id and vision_start_token_id", "differ",
          std::to_string(image_token_id) + ", " + std::to_string(video_token_id) + ", " +
              std::to_string(vision_start_token_id));
  Require(spatial_merge_size >= 1 && spatial_merge_size <= kMaxMergeSize, kFn, "spatial_merge_size",
          "be in [1, 64]", spatial_merge_size);
  if (IsQwen2_5(rules)) {
    Require(tokens_per_second >= 1 && tokens_per_second <= kMaxTokensPerSecond, kFn,
            "tokens_per_second",
            "be in [1, 2^20] for rules " + std::string(MropeIndexRulesName(rules)),
            tokens_per_second);
  }
}

namespace {

// The get_rope_index rules of a Qwen-VL vision tower; nullopt for another tower.
std::optional<MropeIndexRules> IndexRulesOf(std::optional<VisionRopeKind> tower) {
  if (!tower) return std::nullopt;
  switch (*tower) {
    case VisionRopeKind::kQwen2Vl:
      return MropeIndexRules::kQwen2Vl;
    case VisionRopeKind::kQwen25Vl:
      return MropeIndexRules::kQwen2_5Vl;
    case VisionRopeKind::kQwen3Vl:
      return MropeIndexRules::kQwen3Vl;
    case VisionRopeKind::kPixtral:
    case VisionRopeKind::kLlama4:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

QwenVlTokens QwenVlTokensFromConfig(std::string_view config_json_text,
                                    std::optional<MropeIndexRules> rules) {
  using hf_json::Json;
  using hf_json::Node;
  hf_json::CheckShape(config_json_text);
  Json root;
  try {
    root = Json::parse(config_json_text.begin(), config_json_text.end());
  } catch (const Json::exception& e) {
    throw Error(ErrorMessage(kConfigFn, "config", "be valid JSON", e.what()));
  }
  Require(root.is_object(), kConfigFn, "config", "be a JSON object", hf_json::Shown(&root));
  const Node top{root, ""};
  const std::string model_type = hf_json::OptionalString(top, "model_type").value_or("");
  // The index rules follow the wrapper's vision tower.
  const std::optional<MropeIndexRules> model_rules =
      IndexRulesOf(hf_json::FamilyOf(model_type).vision);
  if (!model_rules) {
    throw Error(ErrorMessage(kConfigFn, "model_type",
                             "be qwen2_vl, qwen2_5_vl, qwen3_vl or qwen3_vl_moe",
                             "\"" + model_type + "\""));
  }
  QwenVlTokens out;
  out.rules = rules.value_or(*model_rules);
  const bool same_model = ModelOf(out.rules) == *model_rules;
  Require(same_model, kConfigFn, "rules", "belong to the config's model_type " + model_type,
          MropeIndexRulesName(out.rules));

  const Json* text_config = top.Value("text_config");
  if (text_config != nullptr && !text_config->is_object()) {
    hf_json::Fail("text_config", "be an object", text_config);
  }
  const Node text{text_config != nullptr ? *text_config : hf_json::EmptyObject(), "text_config."};
  const auto token_id = [&](std::string_view key) {
    std::optional<int64_t> id = hf_json::OptionalInt(top, key, 0, kMaxTokenId);
    if (!id) id = hf_json::OptionalInt(text, key, 0, kMaxTokenId);
    if (!id) hf_json::Fail(key, "be present (at the top level or in text_config)", nullptr);
    return *id;
  };
  out.image_token_id = token_id("image_token_id");
  out.video_token_id = token_id("video_token_id");
  out.vision_start_token_id = token_id("vision_start_token_id");

  const Json* vision_config = top.Value("vision_config");
  if (vision_config != nullptr && !vision_config->is_object()) {
    hf_json::Fail("vision_config", "be an object", vision_config);
  }
  const Node vision{vision_config != nullptr ? *vision_config : hf_json::EmptyObject(),
                    "vision_config."};
  out.spatial_merge_size =
      hf_json::OptionalInt(vision, "spatial_merge_size", 1, kMaxMergeSize).value_or(2);
  if (IsQwen2_5(out.rules)) {
    // Qwen2_5_VLVisionConfig's default; the released configs write 2.
    out.tokens_per_second =
        hf_json::OptionalInt(vision, "tokens_per_second", 1, kMaxTokensPerSecond).value_or(4);
  }
  out.Validate();
  return out;
}

MropeIndex QwenVlRopeIndex(const QwenVlTokens& tokens, std::span<const int64_t> input_ids,
                           int64_t batch, int64_t seq_len, std::span<const VisionGrid> image_grids,
                           std::span<const VisionGrid> video_grids,
                           std::span<const double> second_per_grid_ts,
                           std::span<const int64_t> attention_mask) {
  tokens.Validate();
  const MropeIndexRules rules = tokens.rules;
  const std::string rules_name(MropeIndexRulesName(rules));
  Require(batch >= 1 && batch <= kMaxTotalTokens, kFn, "batch", "be in [1, 2^40]", batch);
  Require(seq_len >= 1 && seq_len <= kMaxTotalTokens / batch, kFn, "seq_len",
          "be >= 1 with batch * seq_len <= 2^40", seq_len);
  const int64_t total = batch * seq_len;
  Require(static_cast<int64_t>(input_ids.size()) == total, kFn, "input_ids",
          "hold batch * seq_len = " + std::to_string(total) + " ids",
          std::to_string(input_ids.size()) + " ids");
  Require(attention_mask.empty() || static_cast<int64_t>(attention_mask.size()) == total, kFn,
          "attention_mask",
          "be empty or hold batch * seq_len = " + std::to_string(total) + " values",
          std::to_string(attention_mask.size()) + " values");
  for (size_t i = 0; i < attention_mask.size(); ++i) {
    Require(attention_mask[i] == 0 || attention_mask[i] == 1, kFn,
            "attention_mask[" + std::to_string(i / static_cast<size_t>(seq_len)) + "][" +
                std::to_string(i % static_cast<size_t>(seq_len)) + "]",
            "be 0 or 1", attention_mask[i]);
  }
  if (IsQwen2_5(rules)) {
    Require(second_per_grid_ts.empty() || second_per_grid_ts.size() == video_grids.size(), kFn,
            "second_per_grid_ts",
            "be empty or hold one value per video (" + std::to_string(video_grids.size()) + ")",
            std::to_string(second_per_grid_ts.size()) + " values");
    for (size_t i = 0; i < second_per_grid_ts.size(); ++i) {
      const double s = second_per_grid_ts[i];
      Require(std::isfinite(s) && s >= 0 && s <= kMaxSecondsPerGrid, kFn,
              "second_per_grid_ts[" + std::to_string(i) + "]", "be finite and in [0, 86400]", s);
    }
  } else {
    Require(second_per_grid_ts.empty(), kFn, "second_per_grid_ts",
            "be empty for rules " + rules_name + " (only Qwen2.5-VL scales time)",
            std::to_string(second_per_grid_ts.size()) + " values");
  }
  const int64_t merge = tokens.spatial_merge_size;
  const std::vector<Grid> images =
      ConsumableGrids(image_grids, merge, "image_grids", /*split_frames=*/false, total);
  const bool split_frames = IsQwen3(rules);
  const bool v5 = IsTransformers5(rules);
  const std::vector<Grid> videos =
      ConsumableGrids(video_grids, merge, "video_grids", split_frames, total);

  // Vision runs in every row, checked against the grids before the output exists; a run is a
  // maximal block of image (or video) tokens among the row's unmasked tokens.
  const auto unmasked = [&](int64_t b, int64_t j) {
    return attention_mask.empty() || attention_mask[static_cast<size_t>(b * seq_len + j)] == 1;
  };
  struct Run {
    int64_t start, length;  // in the row's unmasked tokens
    const Grid* grid;
    bool video;
  };
  std::vector<std::vector<Run>> runs(static_cast<size_t>(batch));
  std::vector<int64_t> kept(static_cast<size_t>(seq_len));  // the row's unmasked slots
  size_t image_next = 0, video_next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t n = 0;
    for (int64_t j = 0; j < seq_len; ++j) {
      if (unmasked(b, j)) kept[static_cast<size_t>(n++)] = j;
    }
    const auto id_at = [&](int64_t k) {
      return input_ids[static_cast<size_t>(b * seq_len + kept[static_cast<size_t>(k)])];
    };
    for (int64_t k = 0; k < n;) {
      const int64_t id = id_at(k);
      const bool video = id == tokens.video_token_id;
      if (id != tokens.image_token_id && !video) {
        ++k;
        continue;
      }
      int64_t end = k + 1;
      while (end < n && id_at(end) == id) ++end;
      const std::string what = video ? "video" : "image";
      const std::string where =
          "row " + std::to_string(b) + ", unmasked token " + std::to_string(k);
      Require(k > 0 && id_at(k - 1) == tokens.vision_start_token_id, kFn, "input_ids",
              "open every run of " + what + " tokens with vision_start_token_id " +
                  std::to_string(tokens.vision_start_token_id),
              "a run at " + where + " without it");
      const std::vector<Grid>& grids = video ? videos : images;
      size_t& next = video ? video_next : image_next;
      const bool frames = video && split_frames;
      Require(
          next < grids.size(), kFn, "input_ids",
          "have no more " + what + " runs than " +
              (frames ? std::string("video frames (video_grids t summed: ") : what + "_grids (") +
              std::to_string(grids.size()) + ")",
          "another " + what + " run at " + where);
      const Grid& grid = grids[next];
      const size_t source = grid.source;
      Require(end - k == grid.tokens, kFn, "input_ids",
              "hold t * (h/" + std::to_string(merge) + ") * (w/" + std::to_string(merge) +
                  ") = " + std::to_string(grid.tokens) + " tokens in the run of " +
                  (video ? "video_grids[" : "image_grids[") + std::to_string(source) + "] " +
                  GridText((video ? video_grids : image_grids)[source]) +
                  (frames ? " frame " + std::to_string(grid.frame) : std::string()),
              std::to_string(end - k) + " tokens at " + where);
      runs[static_cast<size_t>(b)].push_back({k, end - k, &grid, video});
      ++next;
      k = end;
    }
    if (v5) {
      // transformers 5 concatenates the row's position blocks, none for an empty row.
      Require(n > 0, kFn, "attention_mask",
              "keep at least one token of every row for rules " + rules_name,
              "row " + std::to_string(b) + " all 0");
    } else if (!image_grids.empty() || !video_grids.empty()) {
      Require(n > 0, kFn, "attention_mask",
              "keep at least one token of every row when grids are given",
              "row " + std::to_string(b) + " all 0");
    }
  }
  Require(image_next == images.size(), kFn, "image_grids",
          "be matched by as many image runs in input_ids",
          std::to_string(images.size()) + " grids for " + std::to_string(image_next) + " runs");
  Require(video_next == videos.size(), kFn, "video_grids",
          split_frames ? "have as many frames (t summed) as video runs in input_ids"
                       : "be matched by as many video runs in input_ids",
          std::to_string(videos.size()) + (split_frames ? " frames" : " grids") + " for " +
              std::to_string(video_next) + " runs");

  if (!v5 && image_grids.empty() && video_grids.empty()) {
    return TextOnly(batch, seq_len, attention_mask);
  }

  // Padded slots keep the value the output was created with: torch.ones in 4.x, zeros in 5.
  MropeIndex out{batch, seq_len, std::vector<int64_t>(static_cast<size_t>(3 * total), v5 ? 0 : 1),
                 std::vector<int64_t>(static_cast<size_t>(batch))};
  const auto put = [&](int64_t b, int64_t slot, int64_t t, int64_t h, int64_t w) {
    out.positions[static_cast<size_t>((0 * batch + b) * seq_len + slot)] = t;
    out.positions[static_cast<size_t>((1 * batch + b) * seq_len + slot)] = h;
    out.positions[static_cast<size_t>((2 * batch + b) * seq_len + slot)] = w;
  };
  for (int64_t b = 0; b < batch; ++b) {
    int64_t n = 0;
    for (int64_t j = 0; j < seq_len; ++j) {
      if (unmasked(b, j)) kept[static_cast<size_t>(n++)] = j;
    }
    const auto slot = [&](int64_t k) { return kept[static_cast<size_t>(k)]; };
    int64_t st = 0;          // next unmasked token to number
    int64_t next_start = 0;  // where text resumes (4.x: 1 + the largest position so far)
    int64_t row_largest = -1;
    for (const Run& run : runs[static_cast<size_t>(b)]) {
      const int64_t text_len = run.start - st;
      for (int64_t j = 0; j < text_len; ++j) {
        const int64_t p = next_start + j;
        put(b, slot(st + j), p, p, p);
      }
      const int64_t base = next_start + text_len;
      const Grid& g = *run.grid;
      double seconds = 1.0;
      if (run.video && !second_per_grid_ts.empty()) seconds = second_per_grid_ts[g.source];
      TemporalIndex temporal(rules, run.video, seconds, tokens.tokens_per_second);
      if (run.video && second_per_grid_ts.empty()) temporal.SetIntegerSeconds();
      int64_t largest = base;
      int64_t k = run.start;
      for (int64_t i = 0; i < g.t; ++i) {
        const int64_t t = base + temporal(i);
        for (int64_t r = 0; r < g.rows; ++r) {
          for (int64_t c = 0; c < g.cols; ++c) put(b, slot(k++), t, base + r, base + c);
        }
        largest = std::max({largest, t, base + g.rows - 1, base + g.cols - 1});
      }
      row_largest = std::max(row_largest, largest);
      // 4.x: st_idx = llm_pos_ids_list[-1].max() + 1; 5: current_pos += max(h, w) // m.
      next_start = v5 ? base + std::max(g.rows, g.cols) : largest + 1;
      st = run.start + run.length;
    }
    for (int64_t j = 0; st + j < n; ++j) {
      const int64_t p = next_start + j;
      put(b, slot(st + j), p, p, p);
    }
    if (st < n) row_largest = std::max(row_largest, next_start + (n - st) - 1);
    // 4.x: len(total_input_ids[i]) is the padded row; 5: len(current_input_ids), the unpadded.
    out.rope_deltas[static_cast<size_t>(b)] = row_largest + 1 - (v5 ? n : seq_len);
  }
  return out;
}

}  // namespace posenc
