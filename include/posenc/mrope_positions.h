// M-RoPE positions of Qwen-VL prompts: the (time, height, width) position streams that
// posenc/mrope.h rotates by, built from token ids and image/video grids exactly as Hugging Face's
// `get_rope_index` builds them (Qwen2VLModel, Qwen2_5_VLModel, Qwen3VLModel).
//
// A prompt interleaves text with vision runs, each run opened by vision_start_token_id and made
// of one image_token_id (or video_token_id) per merged patch:
//
//   text ... <vision_start> <image> x (t * h/m * w/m) <vision_end> text ...
//
// where (t, h, w) is the grid before merging (`image_grid_thw`) and m is spatial_merge_size.
// Numbering, with p = 1 + the largest position used so far (0 at the start):
//
//   text token j of a text stretch:      (p + j, p + j, p + j)
//   vision token (i, r, c) of a run that follows a stretch of n text tokens:
//                                        (p + n + T(i), p + n + r, p + n + c)
//
// i < t is the temporal index, r < h/m the row, c < w/m the column, tokens in (i, r, c)
// row-major order. T(i) is the rule that changed between models and releases
// (MropeIndexRules). Text after a run resumes at 1 + the run's largest position in any stream.
// Padded slots (attention_mask 0) are skipped and hold 1, as Hugging Face leaves them.
//
// rope_deltas[b] = (largest position of row b) + 1 - seq_len: the offset that turns a cache
// position into the position of the next decoded token (next = cache_position + delta). seq_len
// is the padded row length, so left padding makes the delta more negative.
//
// Without any grid (both grid lists empty) Hugging Face numbers by the mask alone:
// positions = cumsum(mask) - 1 with padded slots 1, and the delta takes the row's largest value
// including those 1s; posenc does the same.
//
// transformers 5 (the *Transformers5 rules, checked against 5.23.0) numbers differently in four
// places: text after a run resumes at base + max(h/m, w/m) whatever the run's time span (p above
// is no longer 1 + the largest position: a long video's time positions can pass the text that
// follows it); padded slots hold 0; rope_deltas[b] = (largest position of row b) + 1 - (unmasked
// tokens of row b); and there is no mask-only branch: text-only rows are numbered 0, 1, ... over
// their unmasked tokens with delta 0 (every row needs an unmasked token). Runs are the blocks of
// image or video tokens (its mm_token_type_ids), as here.
//
// Golden numbers: tests/golden/mrope_index/ (SOURCES.md names each source function and commit);
// docs/MULTIMODAL.md walks through an example and each release difference.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace posenc {

// A grid as `image_grid_thw` / `video_grid_thw` give it: patches before spatial merging.
struct VisionGrid {
  int64_t t = 1;  // temporal patches (1 for an image)
  int64_t h = 0;  // patch rows, divisible by spatial_merge_size
  int64_t w = 0;  // patch columns, divisible by spatial_merge_size
};

// The numbering rule of each model as released, and later releases' rules where they differ.
// The 4.x rules number text and images the same way; they differ in T(i) for videos and in how a
// video's grid maps onto runs. The transformers 5 rules also move text after a run, padded slots
// and the delta (see above).
enum class MropeIndexRules {
  // Qwen2-VL, transformers v4.45.0: T(i) = i, one run per video.
  kQwen2Vl,
  // Qwen2.5-VL, transformers v4.49.0: for a video,
  // T(i) = trunc(float32(float32(i * s) * tokens_per_second)), s = second_per_grid_ts[video]
  // rounded to float32 (1.0 when absent); for an image T(i) = 0.
  kQwen2_5Vl,
  // Qwen2.5-VL in later 4.5x releases (get_rope_index on Qwen2_5_VLModel, until transformers
  // PR #48669): s is first cast to int64 (truncated), T(i) = i * trunc(s) * tokens_per_second.
  // 0.5 s or 2/3 s per grid puts every frame of a video at the same time position.
  kQwen2_5VlIntSeconds,
  // Qwen3-VL, transformers v4.57.0: a video of grid (t, h, w) is t runs of grid (1, h, w), each
  // with its own vision_start, timestamps between them as ordinary text; T(i) = 0.
  kQwen3Vl,
  // transformers 5's get_rope_index (checked against 5.23.0, tests/golden/mrope_index_v5/), with
  // the resume point, padded slots, delta and text-only numbering described above.
  // Qwen2-VL: T(i) = i, one run per video.
  kQwen2VlTransformers5,
  // Qwen2.5-VL: for a video T(i) = trunc(float32(i) * float32(tokens_per_second * s)), s the
  // float32 seconds (without second_per_grid_ts: i * tokens_per_second); for an image T(i) = i.
  kQwen2_5VlTransformers5,
  // Qwen3-VL: frames as separate runs as kQwen3Vl, T(i) = 0.
  kQwen3VlTransformers5,
};

// "qwen2_vl", "qwen2_5_vl", "qwen2_5_vl_int_seconds", "qwen3_vl", "qwen2_vl_transformers5",
// "qwen2_5_vl_transformers5", "qwen3_vl_transformers5" (the golden files' `release`).
std::string_view MropeIndexRulesName(MropeIndexRules rules);
// The inverse of MropeIndexRulesName; posenc::Error for any other name.
MropeIndexRules ParseMropeIndexRules(std::string_view name);

// The token ids and sizes that get_rope_index reads from a Qwen-VL config.
struct QwenVlTokens {
  int64_t image_token_id = 0;
  int64_t video_token_id = 0;
  int64_t vision_start_token_id = 0;
  int64_t spatial_merge_size = 2;  // vision_config.spatial_merge_size
  int64_t tokens_per_second = 0;   // vision_config.tokens_per_second; Qwen2.5-VL rules only
  MropeIndexRules rules = MropeIndexRules::kQwen2Vl;

  // Ids in [0, 2^31) and pairwise different, spatial_merge_size in [1, 64], tokens_per_second in
  // [1, 2^20] for the Qwen2.5-VL rules (ignored by the others).
  void Validate() const;
};

// Reads a Qwen-VL config.json (model_type qwen2_vl, qwen2_5_vl, qwen3_vl or qwen3_vl_moe; the
// token ids at the top level or in text_config, the vision sizes in vision_config, with the
// config classes' defaults: spatial_merge_size 2, tokens_per_second 4). `rules` defaults to the
// model's release rules and must belong to the config's model.
QwenVlTokens QwenVlTokensFromConfig(std::string_view config_json_text,
                                    std::optional<MropeIndexRules> rules = std::nullopt);

// Positions of a batch, row-major [3, batch, tokens] (stream 0 time, 1 height, 2 width).
struct MropeIndex {
  int64_t batch = 0;
  int64_t tokens = 0;
  std::vector<int64_t> positions;    // 3 * batch * tokens
  std::vector<int64_t> rope_deltas;  // batch

  int64_t Position(int stream, int64_t row, int64_t token) const {
    return positions[static_cast<size_t>((stream * batch + row) * tokens + token)];
  }
};

// Hugging Face's get_rope_index. input_ids and attention_mask are row-major [batch, seq_len];
// an empty attention_mask means all ones. Grids are consumed in order across the whole batch
// (row 0's runs first), images and videos separately. second_per_grid_ts: one per video for the
// Qwen2.5-VL rules, or empty for 1.0 each; empty for the other rules.
//
// Checked before anything is allocated beyond the input's size, each a posenc::Error naming the
// parameter and value: sizes, mask values 0/1, grids (t, h, w >= 1 and <= 2^20, h and w
// divisible by spatial_merge_size), every vision run directly after vision_start_token_id, each
// run's length equal to its grid's merged token count, as many runs as grids (Qwen3-VL: video
// frames), no row without an unmasked token when grids are given, seconds finite in [0, 86400].
MropeIndex QwenVlRopeIndex(const QwenVlTokens& tokens, std::span<const int64_t> input_ids,
                           int64_t batch, int64_t seq_len, std::span<const VisionGrid> image_grids,
                           std::span<const VisionGrid> video_grids,
                           std::span<const double> second_per_grid_ts,
                           std::span<const int64_t> attention_mask);

}  // namespace posenc
