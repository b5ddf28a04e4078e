// Adapter: a Hugging Face config.json to the model's position scheme.
//
//   RoPE               Llama, Mistral, Qwen2, Gemma, Phi, Phi-3, GPT-NeoX, GPT-J, DeepSeek, ...
//                      and any config with rope_theta / rope_scaling / rope_parameters
//   ALiBi              BLOOM (n_head), MPT (attn_config.alibi_bias_max), Falcon with "alibi": true
//   learned absolute   GPT-2 and GPT-BigCode (n_positions x n_embd), GPT-Neo and BERT
//                      (max_position_embeddings x hidden_size)
//   none               Mamba, Mamba-2, Falcon-Mamba, RWKV (no attention positions)
//
// RoPE configs are read the way transformers (commit c49429ed) standardizes them
// (reference/rope-scaling.md §0.1, "ref §n" below):
//   - a legacy `rope_scaling` dict replaces `rope_parameters`; rope_type falls back to the legacy
//     `type`, then "default"; Phi-3's legacy names "su" (and "yarn" in a phi3 config) mean
//     "longrope";
//   - rope_theta: the dict, then the top level (GPT-NeoX: rotary_emb_base), then the config
//     class's default (10000; 150000 for gpt_oss), recorded in `notes`;
//   - a top-level partial_rotary_factor (GPT-NeoX: rotary_pct) overrides the dict's; GPT-J's
//     rotary_dim gives the rotated width directly;
//   - head_dim is `head_dim` (DeepSeek: qk_rope_head_dim) if set, else hidden_size //
//     num_attention_heads; rotary_dim = floor(head_dim * partial_rotary_factor), except that the
//     model-level "default" of the Llama family (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3,
//     gemma, gemma2, gemma3_text, deepseek_v2, deepseek_v3) ignores the factor (ref §0.1, §10.8);
//   - L0 (original_max_position_embeddings, llama3 / yarn / longrope only): the top level wins,
//     then the dict, then max_position_embeddings; "dynamic" ignores L0 and uses M (ref §10.11);
//   - YaRN: factor is a required key, explicit null means M / L0; beta_fast and beta_slow fall
//     back to 32 and 1 when missing, null or 0 (a falsy test); `truncate` is read from the top
//     level of rope_parameters only, so a per-layer dict's truncate is ignored (ref §10.1);
//   - per-layer-type dicts ({"full_attention": {...}, "sliding_attention": {...}}, and Gemma 3's
//     rope_local_base_freq) give one RopeLayerScheme per layer type.
// Everything else that changes the numbers must be present and well typed. A malformed file, a
// wrong type, a missing required key, an out-of-range value or an unknown rope type is a
// posenc::Error naming the key as written in the file, e.g.
//   [hf_config] rope_scaling.factor must be a number >= 1, got "4"
// Hostile input (nesting deeper than 64, more than 64 MiB, binary garbage) is an error too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "posenc/dual_chunk.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"
#include "posenc/rope_scaling.h"

namespace posenc {

// One rope_parameters dict after standardization: everything ComputeRopeFrequencies needs.
struct RopeLayerScheme {
  std::string layer_type;      // "" for a flat config, else the per-layer key ("full_attention")
  std::string parameters_key;  // where it was read: "rope_scaling", "rope_parameters.x", or ""
  int64_t head_dim = 0;        // the full q/k head (DeepSeek MLA: qk_nope + qk_rope = 192)
  int64_t rotary_dim = 0;      // features rotated; proportional: head_dim (ref §7)
  int64_t rotary_offset = 0;   // first rotated feature (DeepSeek MLA: qk_nope_head_dim)
  double rope_theta = 10000.0;
  RopeScaling scaling;
};

// The vision tower whose 2-D RoPE a multimodal config describes (posenc/mrope.h builds each;
// tests/golden/mrope/SOURCES.md quotes the reference lines).
enum class VisionRopeKind {
  kQwen2Vl,   // Qwen2-VL: VisionRotaryEmbedding(head_dim / 2), (row, column) in merge-block order
  kQwen25Vl,  // Qwen2.5-VL: the same rotation, patches in window order
  kQwen3Vl,   // Qwen3-VL: the same rotation and order as Qwen2-VL
  kPixtral,   // Pixtral (llava / mistral3 with a pixtral vision_config): even and odd frequencies
  kLlama4,    // Llama 4: interleaved pairs, (column + 1, row + 1), class token at (0, 0)
};

// "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "pixtral", "llama4".
std::string_view VisionRopeKindName(VisionRopeKind kind);

// A vision tower's 2-D RoPE, read from `vision_config` with the config class's defaults for keys
// it leaves out (noted in RopeScheme::notes). head_dim is the tower's width over its heads:
//
//   kind        head_dim                              theta                   also read
//   qwen2_vl    embed_dim // num_heads                rope_theta (10000) *    patch_size,
//   qwen2_5_vl  hidden_size // num_heads              rope_theta (10000) *    spatial_merge_size,
//   qwen3_vl    hidden_size // num_heads              rope_theta (10000) *    temporal_patch_size
//   pixtral     hidden_size // num_attention_heads    rope_theta (10000)      image_size,
//   llama4      hidden_size // num_attention_heads    rope_theta (10000)      patch_size
//
// rope_theta: rope_parameters.rope_theta (transformers 5), else rope_theta, else 10000. * As
// transformers 5 reads the Qwen towers (rope_type "axial"); 4.x took 10000 whatever the config
// said, and no published Qwen config writes a vision theta. model_type: 4.x's name or
// transformers 5's "<model>_vision" (qwen2_vl_vision, qwen2_5_vl_vision, qwen3_vl_vision).
//
// Qwen2.5-VL also has window_size, fullatt_block_indexes and tokens_per_second. Qwen2-VL's vision
// hidden_size is the language model's width (the merger's output); its tower is embed_dim wide.
// PixtralVisionConfig replaces a head_dim key by hidden_size // num_attention_heads.
struct VisionRopeScheme {
  VisionRopeKind kind = VisionRopeKind::kQwen2Vl;
  std::string model_type;  // vision_config.model_type as written, "" when absent
  int64_t num_heads = 0;
  int64_t head_dim = 0;  // the tower's q/k head; a multiple of 4 (two streams of pairs)
  double theta = 10000.0;
  int64_t patch_size = 0;           // pixels per patch side
  int64_t spatial_merge_size = 1;   // Qwen: s x s patches merge into one language-model token
  int64_t temporal_patch_size = 1;  // Qwen: video frames per patch
  int64_t image_size = 0;           // Pixtral, Llama 4: pixels per side of the largest image
  int64_t window_size = 0;          // Qwen2.5-VL: window-attention side in pixels (112)
  std::vector<int64_t> fullatt_block_indexes;  // Qwen2.5-VL: blocks that attend to everything
  double tokens_per_second = 0;                // Qwen2.5-VL: time positions per second of video

  // image_size / patch_size: Pixtral's max_width (position id = row * it + column), Llama 4's
  // patches per side (its tower sees side^2 patches and a class token). 0 for the Qwen towers.
  int64_t PatchesPerSide() const { return patch_size > 0 ? image_size / patch_size : 0; }
  // Qwen2.5-VL's window side in merged tokens: window_size / spatial_merge_size / patch_size
  // (112 / 2 / 14 = 4), as get_window_index computes it. 0 for the other towers.
  int64_t WindowUnits() const {
    return window_size > 0 ? window_size / spatial_merge_size / patch_size : 0;
  }
};

struct RopeScheme {
  std::string model_type;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  std::optional<int64_t> max_position_embeddings;           // M, when the config has it
  std::optional<int64_t> original_max_position_embeddings;  // L0 of llama3 / yarn / longrope
  RopeLayout layout = RopeLayout::kHalfSplit;  // interleaved: GPT-J, Cohere, GLM, DeepSeek,
                                               // Llama 4 (docs/MODELS.md)
  std::vector<RopeLayerScheme> layers;         // one per layer type; at least one
  // DeepSeek V2/V3 attention multiplies its softmax scale by g(s, mscale_all_dim)^2 (ref §4);
  // softmax_scale is (qk_nope_head_dim + qk_rope_head_dim)^-1/2 times that, when both are known.
  std::optional<double> softmax_scale_multiplier;
  std::optional<double> softmax_scale;
  // Gemma 2/3's attn_logit_softcapping (AttentionOptions::softcap), when the config gives a
  // number (Gemma 3's null: none).
  std::optional<double> logit_softcap;
  // Qwen2.5-1M's dual_chunk_attention_config (posenc/dual_chunk.h, docs/DUAL_CHUNK.md), when the
  // config gives one: vLLM serves such a model with dual chunk attention. Keys left out take
  // vLLM's defaults (chunk_size 8192, local_size 1024, original_max_position_embeddings 0).
  std::optional<DualChunk> dual_chunk;
  // Qwen2-VL / Qwen2.5-VL / Qwen3-VL M-RoPE: rotary pairs per position stream (time, height,
  // width), in blocks or interleaved across pairs. Empty for 1-D RoPE. For text tokens (equal
  // streams) M-RoPE is this 1-D RoPE exactly; image and video tokens need 3-D positions.
  std::vector<int64_t> mrope_section;
  bool mrope_interleaved = false;
  // The vision tower's 2-D RoPE, when the config has a vision_config posenc knows (Qwen2-VL,
  // Qwen2.5-VL, Qwen3-VL, Pixtral, Llama 4); MakeVisionRope builds it.
  std::optional<VisionRopeScheme> vision;
  std::vector<std::string> notes;  // defaults taken and reference quirks reproduced
};

// ALiBi slopes come from posenc/alibi.h with Alibi{num_heads, max_bias}.
struct AlibiScheme {
  std::string model_type;
  int64_t num_heads = 0;
  double max_bias = 8.0;  // MPT's attn_config.alibi_bias_max; 8 for BLOOM and Falcon
  std::vector<std::string> notes;
};

// A trained table of max_positions x dim added to the token embeddings (posenc/learned.h).
struct LearnedPositionScheme {
  std::string model_type;
  int64_t max_positions = 0;  // positions the model was trained on
  int64_t dim = 0;
  int64_t offset = 0;  // row of position 0 (OPT: 2, its table has max_positions + 2 rows)
};

// T5's learned relative-position buckets (posenc/relative_bias.h): the encoder's are
// bidirectional, the decoder's causal, with the same counts.
struct RelativeBiasScheme {
  std::string model_type;
  int64_t num_heads = 0;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  bool bias_in_every_layer = false;  // UMT5: each layer its own table; T5: the first of a stack
  std::vector<std::string> notes;
};

struct NoPositionScheme {
  std::string model_type;
};

using PositionScheme = std::variant<RopeScheme, AlibiScheme, LearnedPositionScheme,
                                    NoPositionScheme, RelativeBiasScheme>;

// Parses config.json text. Throws posenc::Error (see the header comment); never anything else.
// The model-level part of DescribeModel (posenc/model_positions.h), which also lists each layer.
PositionScheme ParseHfConfig(std::string_view json_text);

// Reads and parses a file. The file is sized with stat before it is read, so a missing file, a
// directory, a device such as /dev/zero or a file over 64 MiB is a posenc::Error naming the path
// that costs no memory.
PositionScheme LoadHfConfig(const std::filesystem::path& path);

// Frequencies of one layer type (see rope_scaling.h for precision and seq_len).
RopeFrequencies ComputeRopeFrequencies(const RopeLayerScheme& layer,
                                       const RopeFrequencyOptions& options = {});

// A ready-to-apply Rope for one layer type, attention factor included, in the scheme's layout.
Rope MakeRope(const RopeScheme& scheme, const RopeLayerScheme& layer,
              const RopeFrequencyOptions& options = {});

// The language model's RoPE as position streams (posenc/mrope.h): MRope::Sections over MakeRope's
// pairs when the scheme has mrope_section (in blocks, or interleaved for mrope_interleaved, as
// Hugging Face's apply_interleaved_mrope lays them), else MRope::OneStream. Streams: time,
// height, width.
MRope MakeMRope(const RopeScheme& scheme, const RopeLayerScheme& layer,
                const RopeFrequencyOptions& options = {});

// The vision tower's 2-D RoPE: MRope::QwenVision (the three Qwen kinds), MRope::Pixtral or
// MRope::Llama4Vision at the scheme's head_dim and theta. Its positions come from
// posenc/vision_positions.h.
MRope MakeVisionRope(const VisionRopeScheme& vision);

}  // namespace posenc
