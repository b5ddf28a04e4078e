// A model's positions told for people and programs: the account that `posenc inspect` prints
// and `posenc.model_positions` returns, written once here so that every front end says the same.
//
//   ModelPositionsJson   the model-level keys and one object per layer (posenc inspect --json)
//   LayerSummary         the layers run-length coded ("layers 3, 7, ..., 47 (12): NoPE, ...")
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "posenc/model_positions.h"

namespace posenc {

// A JSON object (text) with: scheme (MainScheme's name), model_type, config_prefix, notes (the
// scheme's, then the model's), layers (one object per layer, [] without a layer count: index,
// scheme, layer_type, rope_theta, rope_type, sliding_window, attention_chunk_size, query_scale
// {rule, beta, floor_scale, offset}, causal, symmetric_window; absent values null), and per
// scheme: RoPE head_dim, rotary_dim, rotary_offset, layout, mrope_section (list or null),
// mrope_interleaved, num_attention_heads, num_key_value_heads, max_position_embeddings,
// original_max_position_embeddings, softmax_scale (number or null), layer_types;
// relative_bias num_heads, num_buckets, max_distance, bidirectional, encoder_layers,
// decoder_layers, bias_in_every_layer; learned max_positions, dim, offset; alibi num_heads,
// max_bias. Strings from the config are JSON-escaped as they are (a front end that prints them
// to a terminal makes them printable).
std::string ModelPositionsJson(const ModelPositions& model);

// One line per distinct layer description, in order of first appearance: "all 32 layers: ..."
// when every layer is alike, else "layers 3, 7, ..., 47 (12): NoPE, query scale ..." (more than
// four runs shown as the first two and the last). Empty when the config gives no layer count.
std::vector<std::string> LayerSummary(const ModelPositions& model);

// "1 + 0.1 ln(1 + floor((p + 1) / 8192))".
std::string QueryScaleFormula(const LogFloorQueryScale& scale);

// A number in the shortest form that reads back exactly: 10000 -> "1e4", 500000 -> "5e5",
// 0.1 -> "0.1", 8192 -> "8192".
std::string ShortNumber(double value);

// "interleaved" or "half-split".
std::string_view RopeLayoutName(RopeLayout layout);

}  // namespace posenc
