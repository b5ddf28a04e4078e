#include "rope_report.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "models/model_report_json.h"
#include "posenc/hf_config.h"
#include "posenc/model_report.h"
#include "posenc/positions.h"
#include "posenc/rope.h"

namespace posenc::cli {

using Json = nlohmann::json;

const char* Name(PairClass c) {
  switch (c) {
    case PairClass::kExtrapolated:
      return "extrapolated";
    case PairClass::kBlended:
      return "blended";
    case PairClass::kInterpolated:
      return "interpolated";
    case PairClass::kUnrotated:
      return "unrotated";
  }
  return "";
}

namespace {

// What a dual_chunk_attention_config means (posenc/dual_chunk.h): the chunk length, the query
// positions of the three parts, the largest distance ever scored, and the length scaling f at
// max_position_embeddings.
Json DualChunkJson(const RopeScheme& scheme) {
  const DualChunk& dca = *scheme.dual_chunk;
  Json out{{"chunk_size", dca.chunk_size},
           {"local_size", dca.local_size},
           {"original_max_position_embeddings", dca.original_max_position_embeddings},
           {"chunk_length", dca.ChunkLength()},
           {"inter_query_position", dca.QueryPosition(DualChunkPart::kInter, 0)},
           {"largest_scored_distance", dca.chunk_size}};
  out["length_scaling_at_max_position_embeddings"] =
      scheme.max_position_embeddings ? Json(dca.LengthScaling(*scheme.max_position_embeddings))
                                     : Json(nullptr);
  return out;
}

double Wavelength(double inv_freq) {
  return inv_freq > 0 ? 2.0 * std::numbers::pi / inv_freq : std::numeric_limits<double>::infinity();
}

// Extrapolated: the frequency is kept, so angles past the original context are new to the pair.
// Interpolated: divided by the largest factor the rule applies to any pair (s for linear, YaRN,
// Llama 3; the bracket for dynamic NTK), so positions are squeezed into the trained range.
// Blended: in between. The tolerance absorbs float32 rounding in reference precision.
std::vector<PairRow> ClassifyPairs(const RopeFrequencies& scaled, const RopeFrequencies& plain) {
  constexpr double kTolerance = 1e-6;
  std::vector<PairRow> rows(scaled.inv_freq.size());
  double largest = 1.0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double w = scaled.inv_freq[i], w0 = i < plain.inv_freq.size() ? plain.inv_freq[i] : 0;
    rows[i] = {w, w0, Wavelength(w), Wavelength(w0), w > 0 ? w0 / w : 0.0, PairClass::kUnrotated};
    if (w > 0) largest = std::max(largest, rows[i].ratio);
  }
  for (PairRow& row : rows) {
    if (row.inv_freq == 0) continue;
    if (std::abs(row.ratio - 1.0) <= kTolerance) {
      row.treatment = PairClass::kExtrapolated;
    } else if (row.ratio >= largest * (1 - kTolerance)) {
      row.treatment = PairClass::kInterpolated;
    } else {
      row.treatment = PairClass::kBlended;
    }
  }
  return rows;
}

// The context the scaled model was trained on: L0 when the rule has one, else M.
std::optional<int64_t> OriginalContext(const RopeScheme& scheme, const RopeLayerScheme& layer) {
  if (std::holds_alternative<DynamicNtkScaling>(layer.scaling)) {
    return std::get<DynamicNtkScaling>(layer.scaling).max_positions;
  }
  return scheme.original_max_position_embeddings ? scheme.original_max_position_embeddings
                                                 : scheme.max_position_embeddings;
}

// The YaRN release rules the frequencies follow (posenc/rope_scaling.h); null for other rules.
Json YarnRulesJson(const RopeLayerScheme& layer, const RopeFrequencyOptions& options) {
  const auto* yarn = std::get_if<YarnScaling>(&layer.scaling);
  if (yarn == nullptr) return nullptr;
  return std::string(YarnRulesName(options.yarn_rules.value_or(yarn->rules)));
}

}  // namespace

RopeReport InspectRope(const ModelPositions& model, const ModelRopeOptions& options) {
  const RopeScheme& scheme = std::get<RopeScheme>(model.scheme);
  const RopeLayerScheme& layer = options.Layer(model);
  const RopeFrequencyOptions frequency_options = options.Frequencies();
  const RopeFrequencies scaled = ComputeRopeFrequencies(layer, frequency_options);
  const RopeFrequencies plain = ComputeRopeFrequencies(
      layer.rope_theta, layer.rotary_dim, NoScaling{}, {.precision = frequency_options.precision});
  const std::vector<PairRow> rows = ClassifyPairs(scaled, plain);
  const std::optional<int64_t> context = OriginalContext(scheme, layer);

  // The model-wide keys first (layers, notes, mrope_section, ...); the chosen layer's below.
  Json out = ModelPositionsObject(model);
  const std::optional<int64_t> index = options.LayerIndex();
  out["layer"] = index ? Json(*index) : Json(nullptr);
  out["rotary_offset"] = layer.rotary_offset;
  out.update(
      Json{{"scheme", "rope"},
           {"model_type", scheme.model_type},
           {"rope_type", RopeTypeName(layer.scaling)},
           {"layer_type", layer.layer_type},
           {"parameters_key", layer.parameters_key},
           {"head_dim", layer.head_dim},
           {"rotary_dim", layer.rotary_dim},
           {"rope_theta", layer.rope_theta},
           {"layout", std::string(RopeLayoutName(scheme.layout))},
           {"num_attention_heads", scheme.num_attention_heads},
           {"num_key_value_heads", scheme.num_key_value_heads},
           {"precision", options.precision},
           {"seq_len", options.seq_len ? Json(*options.seq_len) : Json(nullptr)},
           {"original_context", context ? Json(*context) : Json(nullptr)},
           {"max_position_embeddings",
            scheme.max_position_embeddings ? Json(*scheme.max_position_embeddings) : Json(nullptr)},
           {"yarn_rules", YarnRulesJson(layer, frequency_options)},
           {"inv_freq", scaled.inv_freq},
           {"attention_factor", scaled.attention_factor}});
  Json layers = Json::array();
  for (const RopeLayerScheme& l : scheme.layers) layers.push_back(l.layer_type);
  out["layer_types"] = layers;
  Json wavelength = Json::array(), original = Json::array(), treatment = Json::array();
  for (const PairRow& row : rows) {
    wavelength.push_back(std::isfinite(row.wavelength) ? Json(row.wavelength) : Json(nullptr));
    original.push_back(std::isfinite(row.original_wavelength) ? Json(row.original_wavelength)
                                                              : Json(nullptr));
    treatment.push_back(Name(row.treatment));
  }
  out["wavelength"] = wavelength;
  out["original_wavelength"] = original;
  out["pair_class"] = treatment;
  if (scheme.softmax_scale_multiplier) {
    out["softmax_scale_multiplier"] = *scheme.softmax_scale_multiplier;
  }
  if (scheme.softmax_scale) out["softmax_scale"] = *scheme.softmax_scale;
  if (scheme.dual_chunk) out["dual_chunk_attention"] = DualChunkJson(scheme);
  if (!options.positions.empty()) {
    // A printed cos and sin pair takes at most 64 bytes ("  pair  12  cos ...  sin ...").
    options.limit.Check("inspect", "--positions x rotary pairs",
                        static_cast<double>(options.positions.size()) * scaled.inv_freq.size(), 64);
    Json cos = Json::array(), sin = Json::array();
    for (const int64_t pos : options.positions) {
      ValidatePosition("inspect", "--positions", pos);
      Json c = Json::array(), s = Json::array();
      for (const double w : scaled.inv_freq) {
        const CosSin angle = RopeAngle(pos, w);
        c.push_back(angle.cos);
        s.push_back(angle.sin);
      }
      cos.push_back(c);
      sin.push_back(s);
    }
    out["positions"] = options.positions;
    out["cos"] = cos;
    out["sin"] = sin;
  }
  std::vector<std::string> vision_lines;
  if (scheme.vision) vision_lines = VisionRopeSummary(*scheme.vision);
  const std::string title =
      scheme.model_type + " " + std::string(RopeTypeName(layer.scaling)) + ": wavelength per pair";
  return {std::move(out), rows, std::move(vision_lines), context, title};
}

}  // namespace posenc::cli
