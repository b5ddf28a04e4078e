// A config's layers: their types (the config's layer_types or the family's pattern), and for each
// layer its scheme (RoPE, NoPE, none), window, chunk and query scale.
#include <cmath>
#include <string>
#include <utility>

#include "families.h"
#include "hf_config_reader.h"
#include "posenc/error.h"

namespace posenc::hf_json {
namespace {

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";
constexpr const char* kChunked = "chunked_attention";

std::optional<int64_t> ReadLayerCount(const Node& top) {
  return OptionalInt(top, FirstKey(top, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}),
                     1, kMaxLayers);
}

std::optional<bool> OptionalBool(const Node& top, std::string_view key) {
  const Json* value = top.Value(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) Fail(top.Key(key), "be true or false", value);
  return value->get<bool>();
}

// Python truthiness of a flag that released configs write as a number (Llama 4 Scout:
// "attn_temperature_tuning": 4), as `if config.flag` reads it.
std::optional<bool> OptionalTruthy(const Node& top, std::string_view key) {
  const Json* value = top.Value(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_boolean()) return value->get<bool>();
  if (value->is_number() && std::isfinite(value->get<double>())) return value->get<double>() != 0;
  Fail(top.Key(key), "be true, false or a number (read as Python's truth value)", value);
}

// A list of exactly n entries, each checked by `read`.
template <typename Read>
void ReadPerLayerList(const Node& top, std::string_view key, int64_t n, std::string_view what,
                      Read read) {
  const Json* list = top.Value(key);
  const std::string rule =
      "be a list of num_hidden_layers = " + std::to_string(n) + " " + std::string(what);
  if (list == nullptr || !list->is_array() || static_cast<int64_t>(list->size()) != n) {
    Fail(top.Key(key), rule, top.Find(key));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!read(i, (*list)[static_cast<size_t>(i)])) {
      Fail(top.Key(std::string(key) + "[" + std::to_string(i) + "]"), rule,
           &(*list)[static_cast<size_t>(i)]);
    }
  }
}

// Layer types: the config's layer_types, else the family's pattern.
std::vector<std::string> ReadLayerTypes(const Node& top, const Family& family, int64_t n) {
  std::vector<std::string> types(static_cast<size_t>(n));
  if (top.Value("layer_types") != nullptr) {
    ReadPerLayerList(top, "layer_types", n, "strings", [&](int64_t i, const Json& value) {
      if (!value.is_string()) return false;
      types[static_cast<size_t>(i)] = value.get<std::string>();
      return true;
    });
    return types;
  }
  const auto every = [&](auto type_of) {
    for (int64_t i = 0; i < n; ++i) types[static_cast<size_t>(i)] = type_of(i);
  };
  if (family.pattern == LayerPattern::kEverySecondSlides) {  // Gemma2Config: sliding if (i + 1) % 2
    every([](int64_t i) { return (i + 1) % 2 != 0 ? kSliding : kFull; });
  } else if (family.pattern == LayerPattern::kPeriodic ||
             (family.pattern == LayerPattern::kPeriodicWithWindow &&
              top.Value("sliding_window") != nullptr)) {
    // Gemma3TextConfig / Cohere2Config / Exaone4Config: sliding unless (i + 1) % pattern == 0.
    const Json* pattern = top.Value("sliding_window_pattern");
    if (pattern != nullptr && pattern->is_string()) {  // EXAONE 4: "LLLG"
      const std::string letters = pattern->get<std::string>();
      if (letters.empty() || letters.find_first_not_of("LG") != std::string::npos) {
        Fail(top.Key("sliding_window_pattern"),
             "be an integer >= 1 or a string of L (local) and G (global)", pattern);
      }
      every([&](int64_t i) {
        return letters[static_cast<size_t>(i) % letters.size()] == 'L' ? kSliding : kFull;
      });
    } else {
      const int64_t period =
          OptionalInt(top, "sliding_window_pattern", 1, kMaxLayers).value_or(family.pattern_period);
      every([&](int64_t i) { return (i + 1) % period != 0 ? kSliding : kFull; });
    }
  } else if (family.pattern == LayerPattern::kGlobalEveryN) {  // ModernBertAttention
    const int64_t every_n = OptionalInt(top, "global_attn_every_n_layers", 1, kMaxLayers)
                                .value_or(family.pattern_period);
    every([&](int64_t i) { return i % every_n == 0 ? kFull : kSliding; });
  } else if (family.pattern == LayerPattern::kFromMaxWindowLayers &&
             OptionalBool(top, "use_sliding_window").value_or(false) &&
             top.Value("sliding_window") != nullptr) {
    const int64_t first = OptionalInt(top, "max_window_layers", 0, kMaxLayers).value_or(n);
    every([&](int64_t i) { return i >= first ? kSliding : kFull; });
  } else if (family.pattern == LayerPattern::kAllSlideWithWindow &&
             top.Value("sliding_window") != nullptr) {
    every([](int64_t) { return kSliding; });
  } else if (family.pattern == LayerPattern::kHybridOverride) {  // NemotronHConfig's
    const Json* pattern = top.Value("hybrid_override_pattern");
    const std::string rule = "be a string of num_hidden_layers = " + std::to_string(n) +
                             " characters M (Mamba), * (attention), - (MLP) or E (mixture of "
                             "experts)";
    if (pattern == nullptr || !pattern->is_string() ||
        static_cast<int64_t>(pattern->get<std::string>().size()) != n) {
      Fail(top.Key("hybrid_override_pattern"), rule, top.Find("hybrid_override_pattern"));
    }
    const std::string letters = pattern->get<std::string>();
    for (int64_t i = 0; i < n; ++i) {
      switch (letters[static_cast<size_t>(i)]) {
        case 'M':
          types[static_cast<size_t>(i)] = "mamba";
          break;
        case '*':
          types[static_cast<size_t>(i)] = "attention";
          break;
        case '-':
          types[static_cast<size_t>(i)] = "mlp";
          break;
        case 'E':
          types[static_cast<size_t>(i)] = "moe";
          break;
        default:
          Fail(top.Key("hybrid_override_pattern"), rule, pattern);
      }
    }
  } else if (family.pattern == LayerPattern::kAttentionPeriod) {  // JambaConfig's
    const int64_t period =
        OptionalInt(top, "attn_layer_period", 1, kMaxLayers).value_or(family.pattern_period);
    const int64_t offset =
        OptionalInt(top, "attn_layer_offset", 0, period - 1).value_or(family.pattern_offset);
    every([&](int64_t i) { return i % period == offset ? "attention" : "mamba"; });
  }
  // As the config classes fill layer_types: every other layer attends to all keys.
  for (std::string& type : types) {
    if (type.empty()) type = kFull;
  }
  return types;
}

// SmolLM3 and Llama 4: no_rope_layers[i] == 1 means layer i USES RoPE (the name says the
// opposite); absent or empty, every no_rope_layer_interval-th layer is NoPE.
std::vector<bool> ReadUsesRope(const Node& top, int64_t n) {
  std::vector<bool> uses(static_cast<size_t>(n), true);
  const Json* list = top.Value("no_rope_layers");
  if (list != nullptr && !(list->is_array() && list->empty())) {
    ReadPerLayerList(top, "no_rope_layers", n, "0 (NoPE) or 1 (RoPE) entries",
                     [&](int64_t i, const Json& value) {
                       if (!value.is_number_integer() && !value.is_boolean()) return false;
                       const int64_t v =
                           value.is_boolean() ? value.get<bool>() : value.get<int64_t>();
                       if (v != 0 && v != 1) return false;
                       uses[static_cast<size_t>(i)] = v == 1;
                       return true;
                     });
    return uses;
  }
  const int64_t interval = OptionalInt(top, "no_rope_layer_interval", 1, kMaxLayers).value_or(4);
  for (int64_t i = 0; i < n; ++i) uses[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  return uses;
}

// The window of sliding layers, and a check that the config does not contradict itself.
int64_t ReadWindow(const Node& top, const Family& family) {
  if (family.window == WindowKey::kLocalAttention) {
    return OptionalInt(top, "local_attention", 2, kMaxPositions).value_or(128);
  }
  const Json* window = top.Value("sliding_window");
  if (window == nullptr) {
    Fail(top.Key("sliding_window"),
         "be an integer >= 1 (layer_types or the family's pattern has sliding layers)",
         top.Find("sliding_window"));
  }
  if (OptionalBool(top, "use_sliding_window") == false &&
      family.pattern != LayerPattern::kFromMaxWindowLayers) {
    Fail(top.Key("use_sliding_window"),
         "not be false when sliding_window gives sliding layers their window (conflicting "
         "window keys)",
         top.Find("use_sliding_window"));
  }
  return RequiredInt(top, "sliding_window", 1, kMaxPositions);
}

// Gemma 3/4, gpt-oss and other per-layer-type configs name the rope dict by layer type.
int FindRopeLayer(const Node& top, const RopeScheme& rope, const std::string& layer_type,
                  int64_t index) {
  if (rope.layers.size() == 1) return 0;
  for (size_t k = 0; k < rope.layers.size(); ++k) {
    if (rope.layers[k].layer_type == layer_type) return static_cast<int>(k);
  }
  std::string names;
  for (const RopeLayerScheme& layer : rope.layers) {
    names += (names.empty() ? "" : ", ") + layer.layer_type;
  }
  const Json shown = layer_type;
  Fail(top.Key("layer_types[" + std::to_string(index) + "]"),
       "name a layer type with RoPE parameters (" + names + ")", &shown);
}

std::vector<LayerPositions> ReadRelativeBiasLayers(const RelativeBiasScheme& t5) {
  std::vector<LayerPositions> layers;
  for (int64_t i = 0; i < t5.encoder_layers + t5.decoder_layers; ++i) {
    const bool encoder = i < t5.encoder_layers;
    LayerPositions layer;
    layer.index = i;
    layer.scheme = LayerScheme::kRelativeBias;
    layer.layer_type = encoder ? "encoder" : "decoder";
    layer.causal = !encoder;
    layers.push_back(std::move(layer));
  }
  return layers;
}

}  // namespace

LayerScheme BaseScheme(const PositionScheme& scheme) {
  struct {
    LayerScheme operator()(const RopeScheme&) const { return LayerScheme::kRope; }
    LayerScheme operator()(const AlibiScheme&) const { return LayerScheme::kAlibi; }
    LayerScheme operator()(const LearnedPositionScheme&) const { return LayerScheme::kLearned; }
    LayerScheme operator()(const NoPositionScheme&) const { return LayerScheme::kNone; }
    LayerScheme operator()(const RelativeBiasScheme&) const { return LayerScheme::kRelativeBias; }
  } visitor;
  return std::visit(visitor, scheme);
}

std::vector<LayerPositions> ReadLayers(const Node& top, const std::string& model_type,
                                       const PositionScheme& scheme) {
  if (const auto* t5 = std::get_if<RelativeBiasScheme>(&scheme)) return ReadRelativeBiasLayers(*t5);
  const std::optional<int64_t> count = ReadLayerCount(top);
  if (!count) {
    for (std::string_view key : {"layer_types", "no_rope_layers", "hybrid_override_pattern"}) {
      if (top.Value(key) != nullptr) {
        Fail(top.Key("num_hidden_layers"),
             "be an integer >= 1 (" + std::string(key) + " describes layers)", nullptr);
      }
    }
    return {};
  }
  const int64_t n = *count;
  const Family& family = FamilyOf(model_type);
  const std::vector<std::string> types = ReadLayerTypes(top, family, n);
  const LayerScheme base = BaseScheme(scheme);
  const auto* rope = std::get_if<RopeScheme>(&scheme);
  // Encoders, and EmbeddingGemma's use_bidirectional_attention, see keys on both sides.
  const bool encoder =
      family.encoder || OptionalBool(top, "use_bidirectional_attention").value_or(false);

  std::vector<bool> uses_rope(static_cast<size_t>(n), true);
  if (family.nope == NopeLayers::kNoRopeLayers) uses_rope = ReadUsesRope(top, n);

  std::vector<LayerPositions> layers;
  layers.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::string& type = types[static_cast<size_t>(i)];
    LayerPositions layer;
    layer.index = i;
    layer.scheme = base;
    layer.layer_type = type;
    layer.causal = !encoder;
    if (type == "mamba" || type == "mlp" || type == "moe") {
      layer.scheme = LayerScheme::kNone;
    } else if (type == "attention") {  // Nemotron-H, Jamba: attention with no positions
      layer.scheme = LayerScheme::kNope;
    } else if (type == kSliding) {
      layer.sliding_window = ReadWindow(top, family);
      layer.symmetric_window = encoder;
    } else if (type == kChunked) {
      layer.attention_chunk_size = RequiredInt(top, "attention_chunk_size", 1, kMaxPositions);
    }
    if (rope != nullptr && layer.scheme == LayerScheme::kRope) {
      // Cohere 2 and hybrid EXAONE 4 rotate on sliding layers only (Cohere2Attention,
      // Exaone4Attention: "We use global NoPE for hybrid attention model").
      const bool global_nope = family.nope == NopeLayers::kGlobalWithWindow && type == kFull &&
                               top.Value("sliding_window") != nullptr;
      if (!uses_rope[static_cast<size_t>(i)] || global_nope) {
        layer.scheme = LayerScheme::kNope;
      } else {
        layer.rope_layer = FindRopeLayer(top, *rope, type, i);
      }
    }
    layers.push_back(std::move(layer));
  }

  // Llama 4: RoPE layers attend within chunks, NoPE layers to everything with scaled queries
  // (Llama4TextConfig.layer_types; Llama4TextAttention's attn_temperature_tuning).
  if (family.chunked_rope_layers) {
    const std::optional<int64_t> chunk = OptionalInt(top, "attention_chunk_size", 1, kMaxPositions);
    const bool tuning = OptionalTruthy(top, "attn_temperature_tuning").value_or(true);
    LogFloorQueryScale temperature{
        .rule = "llama4_attn_temperature",
        .beta = OptionalNumber(top, "attn_scale", "be a number >= 0", kNonNegative).value_or(0.1),
        .floor_scale =
            OptionalNumber(top, "floor_scale", "be a number >= 1", kAtLeastOne).value_or(8192.0),
        .offset = 1};
    for (LayerPositions& layer : layers) {
      if (layer.scheme == LayerScheme::kRope && chunk && top.Value("layer_types") == nullptr) {
        layer.layer_type = kChunked;
        layer.attention_chunk_size = *chunk;
      } else if (layer.scheme == LayerScheme::kNope) {
        if (layer.layer_type.empty()) layer.layer_type = kFull;
        if (tuning) layer.query_scale = temperature;
      }
    }
  }

  // Ministral 3 / Mistral 3: every layer scales queries by llama_4_scaling_beta
  // (Ministral3Attention: 1 + beta * log(1 + floor(position / original_max_position_embeddings))).
  for (std::string_view params_key : {"rope_parameters", "rope_scaling"}) {
    const Json* params = top.Value(params_key);
    if (params == nullptr || !params->is_object()) continue;
    const Node dict{*params, top.Key(params_key) + "."};
    const std::optional<double> beta =
        OptionalNumber(dict, "llama_4_scaling_beta", "be a number >= 0", kNonNegative);
    if (!beta) continue;
    const double floor_scale = RequiredNumber(
        dict, "original_max_position_embeddings",
        "be a number >= 1 (llama_4_scaling_beta scales by position / it)", kAtLeastOne);
    for (LayerPositions& layer : layers) {
      if (layer.scheme == LayerScheme::kNone) continue;
      layer.query_scale = LogFloorQueryScale{
          .rule = "llama_4_scaling", .beta = *beta, .floor_scale = floor_scale, .offset = 0};
    }
    break;
  }
  return layers;
}

}  // namespace posenc::hf_json

namespace posenc {

LayerScheme ModelPositions::MainScheme() const { return hf_json::BaseScheme(scheme); }

}  // namespace posenc
