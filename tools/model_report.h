// The per-layer part of posenc inspect: a ModelPositions (posenc/model_positions.h) as JSON, one
// object per layer, and as a compact run-length text view ("layers 0-2, 4-6, ..., 44-46 (36):
// RoPE theta 5e5, chunks of 8192").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "posenc/model_positions.h"

namespace posenc::cli {

// {"index", "scheme", "layer_type", "rope_theta", "rope_type", "sliding_window",
//  "attention_chunk_size", "query_scale", "causal", "symmetric_window"}: absent values are null.
nlohmann::json LayerJson(const ModelPositions& model, const LayerPositions& layer);

// The model-level keys every scheme shares: scheme (MainScheme's name), model_type,
// config_prefix, notes (the scheme's, then the model's), layers (one object per layer, or []
// when the config gives no layer count), and per scheme: RoPE head_dim, rotary_dim,
// rotary_offset, layout, mrope_section (list or null), mrope_interleaved; relative_bias
// num_heads, num_buckets, max_distance, bidirectional, encoder_layers, decoder_layers,
// bias_in_every_layer; learned max_positions, dim, offset; alibi num_heads, max_bias.
nlohmann::json ModelJson(const ModelPositions& model);

// "1 + 0.1 ln(1 + floor((p + 1) / 8192))".
std::string QueryScaleFormula(const LogFloorQueryScale& scale);

// One line per distinct layer description, in order of first appearance: "all 32 layers: ..."
// when every layer is alike, else "layers 3, 7, ..., 47 (12): NoPE, query scale ..." (more than
// four runs shown as the first two and the last). Empty when
// the config gives no layer count.
std::vector<std::string> LayerSummary(const ModelPositions& model);

// A number in the shortest form that reads back exactly: 10000 -> "1e4", 500000 -> "5e5",
// 0.1 -> "0.1", 8192 -> "8192".
std::string ShortNumber(double value);

// "interleaved" or "half-split".
const char* LayoutName(RopeLayout layout);

}  // namespace posenc::cli
