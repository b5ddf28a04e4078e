// The vision tower's 2-D RoPE (vision_config): which tower, its head shape and its RoPE base, with
// each tower config class's defaults.
#include <cmath>
#include <string>

#include "families.h"
#include "hf_config_reader.h"
#include "hf_json.h"
#include "posenc/error.h"

namespace posenc::hf_json {

namespace {

constexpr int64_t kMaxImageSide = int64_t{1} << 24;  // pixels; real towers take 336 to 1540

// What each tower's config class calls its keys, and their defaults.
struct VisionKeys {
  std::string_view config_class, width, heads;
  int64_t width_default, heads_default, patch_size, image_size;
};

VisionKeys KeysOf(VisionRopeKind kind) {
  switch (kind) {
    case VisionRopeKind::kQwen2Vl:
      return {"Qwen2VLVisionConfig", "embed_dim", "num_heads", 1280, 16, 14, 0};
    case VisionRopeKind::kQwen25Vl:
      return {"Qwen2_5_VLVisionConfig", "hidden_size", "num_heads", 3584, 16, 14, 0};
    case VisionRopeKind::kQwen3Vl:
      return {"Qwen3VLVisionConfig", "hidden_size", "num_heads", 1152, 16, 16, 0};
    case VisionRopeKind::kPixtral:
      return {"PixtralVisionConfig", "hidden_size", "num_attention_heads", 1024, 16, 16, 1024};
    case VisionRopeKind::kLlama4:
      return {"Llama4VisionConfig", "hidden_size", "num_attention_heads", 768, 16, 14, 448};
  }
  return {};
}

// An integer key, or the config class's default (noted).
int64_t IntOrDefault(const Node& node, std::string_view key, int64_t fallback, int64_t lo,
                     int64_t hi, std::string_view config_class, std::vector<std::string>& notes) {
  if (const auto value = OptionalInt(node, key, lo, hi)) return *value;
  notes.push_back(node.Key(key) + " absent: " + std::to_string(fallback) + " (" +
                  std::string(config_class) + "'s default)");
  return fallback;
}

// A tower's base: rope_parameters.rope_theta (v5), else rope_theta, else 10000 (noted, except
// for the Qwen towers: see ReadVisionRope). rope_type, when written: "default", or for the Qwen
// towers also "axial" (transformers 5's name for theirs: its config class turns "default" into
// it and its rotary module refuses any other).
double ReadVisionTheta(const Node& node, std::string_view config_class, bool qwen,
                       std::vector<std::string>& notes) {
  const Json* params = node.Value("rope_parameters");
  if (params != nullptr && !params->is_object()) {
    Fail(node.Key("rope_parameters"), "be an object", params);
  }
  const Node dict{params != nullptr ? *params : EmptyObject(), node.Key("rope_parameters.")};
  if (const auto type = OptionalString(dict, "rope_type");
      type && *type != "default" && !(qwen && *type == "axial")) {
    Fail(dict.Key("rope_type"),
         std::string(qwen ? "be \"axial\" or \"default\"" : "be \"default\"") +
             " (the vision tower's 2-D RoPE has no scaling rule)",
         dict.Find("rope_type"));
  }
  const std::string rule = "be a number > 0";
  if (const auto theta = OptionalNumber(dict, "rope_theta", rule, kPositive)) return *theta;
  if (const auto theta = OptionalNumber(node, "rope_theta", rule, kPositive)) return *theta;
  if (!qwen) {
    notes.push_back(node.Key("rope_theta") + " absent: 10000 (" + std::string(config_class) +
                    "'s default)");
  }
  return 10000.0;
}

}  // namespace

std::optional<VisionRopeScheme> ReadVisionRope(const Json& root, std::vector<std::string>& notes) {
  const Json* vision_config = Node{root, ""}.Value("vision_config");
  if (vision_config == nullptr) return std::nullopt;
  if (!vision_config->is_object()) Fail("vision_config", "be an object", vision_config);
  const Node node{*vision_config, "vision_config."};
  VisionRopeScheme vision;
  vision.model_type = OptionalString(node, "model_type").value_or("");
  const std::string wrapper = OptionalString(Node{root, ""}, "model_type").value_or("");
  // vision_config.model_type names the tower; without it, the wrapper's config class builds its
  // own vision config class.
  const std::optional<VisionRopeKind> kind =
      vision.model_type.empty() ? FamilyOf(wrapper).vision : FamilyOf(vision.model_type).tower;
  if (!kind) {
    notes.push_back("vision_config (model_type \"" +
                    (vision.model_type.empty() ? "absent" : vision.model_type) +
                    "\") is not read: posenc knows the 2-D RoPE of the Qwen2-VL, Qwen2.5-VL, "
                    "Qwen3-VL, Pixtral and Llama 4 vision towers");
    return std::nullopt;
  }
  vision.kind = *kind;
  const VisionKeys keys = KeysOf(vision.kind);
  const int64_t width = IntOrDefault(node, keys.width, keys.width_default, 1,
                                     kMaxHeadDim * kMaxHeads, keys.config_class, notes);
  vision.num_heads =
      IntOrDefault(node, keys.heads, keys.heads_default, 1, kMaxHeads, keys.config_class, notes);
  vision.head_dim = width / vision.num_heads;
  if (vision.head_dim < 4 || vision.head_dim > kMaxHeadDim || vision.head_dim % 4 != 0) {
    Require(false, kFn, node.Key(keys.width),
            "give a head_dim (" + std::string(keys.width) + " // " + std::string(keys.heads) +
                ") that is a multiple of 4 in [4, 65536] (2-D RoPE turns two equal sets of pairs)",
            std::to_string(width) + " // " + std::to_string(vision.num_heads) + " = " +
                std::to_string(vision.head_dim));
  }
  vision.patch_size =
      IntOrDefault(node, "patch_size", keys.patch_size, 1, kMaxImageSide, keys.config_class, notes);
  switch (vision.kind) {
    case VisionRopeKind::kQwen2Vl:
    case VisionRopeKind::kQwen25Vl:
    case VisionRopeKind::kQwen3Vl:
      // Transformers 5 reads the base from rope_parameters.rope_theta (a rope_theta key becomes
      // it; the class's default 10000). 4.x's VisionRotaryEmbedding(dim) always took 10000, and
      // no published Qwen config writes either key: the default is not noted.
      vision.theta = ReadVisionTheta(node, keys.config_class, true, notes);
      vision.spatial_merge_size =
          IntOrDefault(node, "spatial_merge_size", 2, 1, kMaxImageSide, keys.config_class, notes);
      vision.temporal_patch_size =
          IntOrDefault(node, "temporal_patch_size", 2, 1, kMaxImageSide, keys.config_class, notes);
      break;
    case VisionRopeKind::kPixtral:
    case VisionRopeKind::kLlama4: {
      vision.theta = ReadVisionTheta(node, keys.config_class, false, notes);
      vision.image_size = IntOrDefault(node, "image_size", keys.image_size, 1, kMaxImageSide,
                                       keys.config_class, notes);
      if (vision.image_size < vision.patch_size) {
        const Json shown = vision.image_size;
        Fail(node.Key("image_size"),
             "be >= patch_size (" + std::to_string(vision.patch_size) +
                 "): the tower's patches per side are image_size // patch_size",
             &shown);
      }
      break;
    }
  }
  if (vision.kind == VisionRopeKind::kPixtral) {
    // PixtralVisionConfig.__init__: self.head_dim = hidden_size // num_attention_heads.
    const std::optional<int64_t> written = OptionalInt(node, "head_dim", 1, kMaxHeadDim);
    if (written && *written != vision.head_dim) {
      notes.push_back(node.Key("head_dim") + " = " + std::to_string(*written) +
                      " is replaced by hidden_size // num_attention_heads = " +
                      std::to_string(vision.head_dim) + ", as PixtralVisionConfig does");
    }
  }
  if (vision.kind == VisionRopeKind::kQwen25Vl) {
    vision.window_size =
        IntOrDefault(node, "window_size", 112, 1, kMaxImageSide, keys.config_class, notes);
    if (vision.WindowUnits() < 1) {
      const Json shown = vision.window_size;
      Fail(node.Key("window_size"),
           "be >= spatial_merge_size x patch_size (" +
               std::to_string(vision.spatial_merge_size * vision.patch_size) +
               "), so that a window holds a merged token",
           &shown);
    }
    const Json* blocks = node.Value("fullatt_block_indexes");
    if (blocks == nullptr) {
      vision.fullatt_block_indexes = {7, 15, 23, 31};
      notes.push_back(node.Key("fullatt_block_indexes") + " absent: [7, 15, 23, 31] (" +
                      std::string(keys.config_class) + "'s default)");
    } else {
      if (!blocks->is_array() || blocks->size() > static_cast<size_t>(kMaxLayers)) {
        Fail(node.Key("fullatt_block_indexes"), "be a list of block indexes", blocks);
      }
      for (size_t i = 0; i < blocks->size(); ++i) {
        vision.fullatt_block_indexes.push_back(static_cast<int64_t>(
            AsNumber(node, "fullatt_block_indexes[" + std::to_string(i) + "]", (*blocks)[i],
                     IntRule(0, kMaxLayers - 1),
                     [](double v) { return v >= 0 && v < kMaxLayers && std::trunc(v) == v; })));
      }
    }
    const std::optional<double> rate =
        OptionalNumber(node, "tokens_per_second", "be a number > 0", kPositive);
    if (!rate) {
      notes.push_back(node.Key("tokens_per_second") + " absent: 4 (" +
                      std::string(keys.config_class) + "'s default)");
    }
    vision.tokens_per_second = rate.value_or(4.0);
  }
  return vision;
}

}  // namespace posenc::hf_json
