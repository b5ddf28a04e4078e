// A model's positions told for people and programs: the account that `posenc inspect` prints
// and `posenc.model_positions` returns, written once here so that every front end says the same.
//
//   ModelPositionsJson   the model-level keys and one object per layer (posenc inspect --json)
//   LayerSummary         the layers run-length coded ("layers 3, 7, ..., 47 (12): NoPE, ...")
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/mrope.h"

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
// max_bias. RoPE models also have mrope (null for 1-D RoPE, else {sections, layout "blocks" or
// "interleaved", streams ["time", "height", "width"], pair_stream, pairs: MropeSummary's words})
// and vision_rope (null without a vision tower posenc knows, else {kind, model_type, head_dim,
// num_heads, theta, layout, patch_size, spatial_merge_size, temporal_patch_size, image_size,
// patches_per_side, window_size, window_units, fullatt_block_indexes, tokens_per_second (the
// values a tower does not use are null), streams, pair_stream, inv_freq, pairs}). Strings from
// the config are JSON-escaped as they are (a front end that prints them
// to a terminal makes them printable).
std::string ModelPositionsJson(const ModelPositions& model);

// One line per distinct layer description, in order of first appearance: "all 32 layers: ..."
// when every layer is alike, else "layers 3, 7, ..., 47 (12): NoPE, query scale ..." (more than
// four runs shown as the first two and the last). Empty when the config gives no layer count.
std::vector<std::string> LayerSummary(const ModelPositions& model);

// Which rotary pairs each position stream turns, in words. Runs of pairs, "pairs 0-15 time,
// 16-39 height, 40-63 width", or, when the streams take turns from pair 0 for at least two
// rounds, the pattern by first letters and what follows it: "t h w t h w ... (pairs 0-59), t
// (60-63)". stream_names holds one name per stream.
std::string PairStreamSummary(const MRope& mrope, std::span<const std::string> stream_names);

// The names of M-RoPE's streams: time, height, width (a fourth is "stream 3").
std::vector<std::string> MropeStreamNames(int64_t num_streams);
// The names of a vision tower's two streams: row, column; Llama 4's tower: column, row.
std::vector<std::string> VisionStreamNames(VisionRopeKind kind);

// The M-RoPE line of a RoPE model: "sections [16, 24, 24] in blocks: pairs 0-15 time, 16-39
// height, 40-63 width", "sections [24, 20, 20] interleaved: t h w t h w ... (pairs 0-59), t
// (60-63)"; "" for 1-D RoPE.
std::string MropeSummary(const RopeScheme& scheme);

// The vision tower's 2-D RoPE in words, one line each: the kind, head, base and which pairs turn
// by row and by column at which frequencies; then its patch grid (patch size, merge, window,
// image size).
std::vector<std::string> VisionRopeSummary(const VisionRopeScheme& vision);

// "1 + 0.1 ln(1 + floor((p + 1) / 8192))".
std::string QueryScaleFormula(const LogFloorQueryScale& scale);

// A number in the shortest form that reads back exactly: 10000 -> "1e4", 500000 -> "5e5",
// 0.1 -> "0.1", 8192 -> "8192".
std::string ShortNumber(double value);

// "interleaved" or "half-split".
std::string_view RopeLayoutName(RopeLayout layout);

}  // namespace posenc
