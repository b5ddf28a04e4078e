// Model families by config.json model_type: what the config readers look up about each family.
// Internal to src/models/.
#pragma once

#include <string_view>
#include <utility>

#include "posenc/hf_config.h"

namespace posenc::hf_json {

// Model families, by config.json model_type.
inline constexpr std::string_view kLlamaFamily[] = {  // model-level default ignores partial rotary
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3", "gemma3_text", "deepseek_v2", "deepseek_v3"};
inline constexpr std::string_view kPartialRotaryDefault[] = {  // own default that applies it
    "gpt_neox", "phi", "phi3", "gptj", "stablelm", "persimmon", "glm", "glm4", "glm4_moe"};
inline constexpr std::string_view kOtherRopeModels[] = {
    "nomic_bert", "gpt_oss", "olmo", "olmo2", "olmo3", "starcoder2", "cohere", "cohere2",
    "falcon", "gemma4", "gemma4_text", "internlm2", "granite", "llama4", "llama4_text",
    "smollm3", "exaone4", "chatglm", "modernbert", "mistral3", "ministral", "ministral3",
    "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text",
    "qwen3_next", "phimoe", "stablelm_epoch"};
// Attention layers without positions, between state-space layers (docs/MODELS.md).
inline constexpr std::string_view kNoPositionModels[] = {"mamba", "mamba2", "falcon_mamba", "rwkv",
                                                  "nemotron_h", "jamba"};
// Rotation of interleaved pairs (2i, 2i + 1) (docs/MODELS.md cites each model's code).
inline constexpr std::string_view kInterleavedModels[] = {"gptj", "deepseek_v2", "cohere", "cohere2",
                                                   "chatglm", "glm", "glm4", "llama4",
                                                   "llama4_text"};

// Qwen2's rule: with use_sliding_window, layers from max_window_layers on slide (Qwen2Config:
// "sliding_attention" if sliding_window is not None and i >= max_window_layers).
inline constexpr std::string_view kQwenWindowModels[] = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                                                  "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl",
                                                  "qwen2_5_vl_text"};
// Every layer slides when sliding_window is set (MistralAttention, Phi3Attention, ...).
inline constexpr std::string_view kAllLayersWindowModels[] = {"mistral", "mixtral", "phi3", "phimoe",
                                                       "starcoder2", "ministral"};
inline constexpr std::string_view kEncoderModels[] = {"bert", "modernbert", "nomic_bert"};

// Multimodal wrappers whose text_config may omit model_type.
inline constexpr std::pair<std::string_view, std::string_view> kWrapperTextModels[] = {
    {"llama4", "llama4_text"}, {"gemma3", "gemma3_text"}, {"gemma4", "gemma4_text"},
    {"mistral3", "mistral"},   {"qwen3_vl", "qwen3_vl_text"}};

// Config-class defaults that released configs rely on (Gemma 3's multimodal text_config leaves
// out its head shape and RoPE bases), from Gemma3TextConfig and Llama4TextConfig.
struct FamilyDefault {
  std::string_view model_type, key, value_json, config_class;
};
inline constexpr FamilyDefault kFamilyDefaults[] = {
    {"gemma3_text", "num_attention_heads", "8", "Gemma3TextConfig"},
    {"gemma3_text", "num_key_value_heads", "4", "Gemma3TextConfig"},
    {"gemma3_text", "head_dim", "256", "Gemma3TextConfig"},
    {"gemma3_text", "num_hidden_layers", "26", "Gemma3TextConfig"},
    {"gemma3_text", "max_position_embeddings", "131072", "Gemma3TextConfig"},
    {"gemma3_text", "rope_theta", "1000000.0", "Gemma3TextConfig"},
    {"gemma3_text", "rope_local_base_freq", "10000.0", "Gemma3TextConfig"},
    {"gemma3_text", "sliding_window", "4096", "Gemma3TextConfig"},
    {"llama4_text", "num_attention_heads", "40", "Llama4TextConfig"},
    {"llama4_text", "num_key_value_heads", "8", "Llama4TextConfig"},
    {"llama4_text", "head_dim", "128", "Llama4TextConfig"},
    {"llama4_text", "num_hidden_layers", "48", "Llama4TextConfig"},
    {"llama4_text", "rope_theta", "500000", "Llama4TextConfig"},
    {"llama4_text", "attention_chunk_size", "8192", "Llama4TextConfig"},
};

// vision_config.model_type, or the wrapper's model_type when the vision config has none (the
// wrapper's config class then builds its own vision config class).
inline constexpr std::pair<std::string_view, VisionRopeKind> kVisionModelTypes[] = {
    {"qwen2_vl", VisionRopeKind::kQwen2Vl}, {"qwen2_5_vl", VisionRopeKind::kQwen25Vl},
    {"qwen3_vl", VisionRopeKind::kQwen3Vl}, {"qwen3_vl_moe", VisionRopeKind::kQwen3Vl},
    {"pixtral", VisionRopeKind::kPixtral},  {"llama4_vision_model", VisionRopeKind::kLlama4}};
inline constexpr std::pair<std::string_view, VisionRopeKind> kWrapperVisionKinds[] = {
    {"qwen2_vl", VisionRopeKind::kQwen2Vl}, {"qwen2_5_vl", VisionRopeKind::kQwen25Vl},
    {"qwen3_vl", VisionRopeKind::kQwen3Vl}, {"qwen3_vl_moe", VisionRopeKind::kQwen3Vl},
    {"mistral3", VisionRopeKind::kPixtral}, {"llama4", VisionRopeKind::kLlama4}};

}  // namespace posenc::hf_json
