// libFuzzer target for the Hugging Face config loader: any byte string must either load or be
// rejected with posenc::Error. Anything else (another exception, a crash, a leak, undefined
// behaviour under ASan + UBSan) is a bug; its input goes into fuzz/regressions once fixed.
//
// The input goes through DescribeModel, the per-layer description every front end uses; each
// layer's attention options are then built (a layer may be refused with posenc::Error: no
// attention, a symmetric window), every RoPE layer type must compute its frequencies and its
// multi-stream RoPE, a vision tower its 2-D RoPE, and the report its JSON. The same input also
// goes through the Qwen-VL token reader of get_rope_index.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>

#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/model_report.h"
#include "posenc/mrope_positions.h"

namespace {

// Layers past this many are checked only at the end of the stack: a config may name 65536 layers,
// and one input must stay fast. The patterns (every n-th layer, windows) repeat well before it.
constexpr int64_t kLayersChecked = 256;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const posenc::ModelPositions model = posenc::DescribeModel(text);
    const auto count = static_cast<int64_t>(model.layers.size());
    for (int64_t i = 0; i < count; ++i) {
      if (i == kLayersChecked) i = std::max(i, count - 1);
      const posenc::LayerPositions& layer = model.layers[static_cast<size_t>(i)];
      if (layer.index != i) __builtin_trap();  // layers are listed in order
      try {
        const posenc::AttentionOptions options = posenc::LayerAttentionOptions(model, i);
        // A RoPE layer's options rotate; no other layer's do.
        if (options.rope.has_value() != (layer.scheme == posenc::LayerScheme::kRope)) {
          __builtin_trap();
        }
      } catch (const posenc::Error&) {
        // A layer without attention, or one whose mask Attention cannot express.
      }
    }
    const auto* rope = std::get_if<posenc::RopeScheme>(&model.scheme);
    if (rope == nullptr) return 0;
    for (const posenc::LayerPositions& layer : model.layers) {
      if (layer.scheme != posenc::LayerScheme::kRope) continue;
      if (layer.rope_layer < 0 || static_cast<size_t>(layer.rope_layer) >= rope->layers.size()) {
        __builtin_trap();  // a RoPE layer names one of the scheme's layer types
      }
    }
    // A loaded scheme must also compute: both precisions, construction time and long inputs.
    for (const posenc::RopeLayerScheme& layer : rope->layers) {
      for (const auto precision :
           {posenc::RopePrecision::kReference, posenc::RopePrecision::kExact}) {
        for (const std::optional<int64_t> seq_len :
             {std::optional<int64_t>{}, std::optional<int64_t>{1},
              std::optional<int64_t>{int64_t{1} << 40}}) {
          posenc::MakeRope(*rope, layer, {.precision = precision, .seq_len = seq_len});
        }
      }
      const posenc::MRope mrope = posenc::MakeMRope(*rope, layer);
      if (mrope.num_streams != (rope->mrope_section.empty() ? 1 : 3)) __builtin_trap();
    }
    if (rope->vision) posenc::MakeVisionRope(*rope->vision);
    posenc::ModelPositionsJson(model);
  } catch (const posenc::Error&) {
    // The documented outcome for bad input.
  }
  try {
    posenc::QwenVlTokensFromConfig(text);
  } catch (const posenc::Error&) {
    // Not a Qwen-VL config, or a malformed one.
  }
  return 0;
}
