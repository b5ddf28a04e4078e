// Rotations built from a described config: a layer's Rope and MRope, the vision tower's MRope.
#include "posenc/hf_config.h"

#include <utility>

#include "posenc/rope_scaling.h"

namespace posenc {

RopeFrequencies ComputeRopeFrequencies(const RopeLayerScheme& layer,
                                       const RopeFrequencyOptions& options) {
  return ComputeRopeFrequencies(layer.rope_theta, layer.rotary_dim, layer.scaling, options);
}

std::string_view VisionRopeKindName(VisionRopeKind kind) {
  switch (kind) {
    case VisionRopeKind::kQwen2Vl:
      return "qwen2_vl";
    case VisionRopeKind::kQwen25Vl:
      return "qwen2_5_vl";
    case VisionRopeKind::kQwen3Vl:
      return "qwen3_vl";
    case VisionRopeKind::kPixtral:
      return "pixtral";
    case VisionRopeKind::kLlama4:
      return "llama4";
  }
  return "";
}

Rope MakeRope(const RopeScheme& scheme, const RopeLayerScheme& layer,
              const RopeFrequencyOptions& options) {
  RopeFrequencies frequencies = ComputeRopeFrequencies(layer, options);
  Rope rope{.head_dim = layer.head_dim,
            .rotary_dim = layer.rotary_dim,
            .layout = scheme.layout,
            .inv_freq = std::move(frequencies.inv_freq),
            .attention_factor = frequencies.attention_factor,
            .rotary_offset = layer.rotary_offset};
  rope.Validate();
  return rope;
}

MRope MakeMRope(const RopeScheme& scheme, const RopeLayerScheme& layer,
                const RopeFrequencyOptions& options) {
  Rope rope = MakeRope(scheme, layer, options);
  if (scheme.mrope_section.empty()) return MRope::OneStream(std::move(rope));
  return MRope::Sections(
      std::move(rope), scheme.mrope_section,
      scheme.mrope_interleaved ? MropeSections::kInterleaved : MropeSections::kBlocks);
}

MRope MakeVisionRope(const VisionRopeScheme& vision) {
  switch (vision.kind) {
    case VisionRopeKind::kPixtral:
      return MRope::Pixtral(vision.head_dim, vision.theta);
    case VisionRopeKind::kLlama4:
      return MRope::Llama4Vision(vision.head_dim, vision.theta);
    default:
      return MRope::QwenVision(vision.head_dim, vision.theta);
  }
}

}  // namespace posenc
