// A RoPE model's parameters from its config: rope_parameters or the legacy rope_scaling (one dict,
// or one per layer type), theta, head_dim, the rotary width and each scaling rule's keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <sstream>
#include <tuple>
#include <utility>

#include "families.h"
#include "float32_range.h"
#include "hf_config_reader.h"
#include "hf_json.h"
#include "posenc/error.h"
#include "posenc/positions.h"
#include "posenc/rope_scaling.h"

namespace posenc::hf_json {

void Note(RopeScheme& scheme, std::string note) {
  if (std::find(scheme.notes.begin(), scheme.notes.end(), note) == scheme.notes.end()) {
    scheme.notes.push_back(std::move(note));
  }
}

namespace {

constexpr std::string_view kRopeTypes[] = {"default",  "linear", "dynamic",     "yarn",
                                           "longrope", "llama3", "proportional"};

struct RopeContext {
  const Node& top;
  const Family& family;
  int64_t head_dim;
  std::optional<int64_t> max_positions;  // M
  RopeScheme& scheme;
};

int64_t ReadHeadDim(const Node& top, const Family& family, int64_t heads) {
  // DeepSeek's rotary part of each head is qk_rope_head_dim (HF copies it into head_dim).
  if (family.head_dim == HeadDimKey::kQkRopeHeadDim && top.Value("qk_rope_head_dim") != nullptr) {
    return RequiredInt(top, "qk_rope_head_dim", 2, kMaxHeadDim);
  }
  if (family.head_dim == HeadDimKey::kKvChannels) {
    return RequiredInt(top, "kv_channels", 2, kMaxHeadDim);
  }
  if (const auto head_dim = OptionalInt(top, "head_dim", 2, kMaxHeadDim)) return *head_dim;
  const std::string_view hidden_key = FirstKey(top, {"hidden_size", "n_embd"});
  const int64_t hidden = RequiredInt(top, hidden_key, 2, kMaxHeadDim * kMaxHeads);
  const int64_t head_dim = hidden / heads;
  Require(head_dim >= 2 && head_dim <= kMaxHeadDim, kFn, top.Key(hidden_key),
          "give a head_dim (hidden_size // num_attention_heads) in [2, 65536]",
          std::to_string(hidden) + " // " + std::to_string(heads));
  return head_dim;
}

// L0 for llama3 / yarn / longrope: the top level wins, then the dict, then M.
int64_t ReadOriginalMax(const RopeContext& c, const Node& dict) {
  constexpr std::string_view kKey = "original_max_position_embeddings";
  if (c.top.Value(kKey) != nullptr) return RequiredInt(c.top, kKey, 1, kMaxPositions);
  if (dict.Value(kKey) != nullptr) return RequiredInt(dict, kKey, 1, kMaxPositions);
  if (!c.max_positions) {
    Fail(dict.Key(kKey), "be an integer in [1, 2^53] (or max_position_embeddings must be set)",
         nullptr);
  }
  Note(c.scheme, dict.Key(kKey) + " absent: max_position_embeddings (" +
                     std::to_string(*c.max_positions) + ") is used, as Hugging Face does");
  return *c.max_positions;
}

int64_t RequireMax(const RopeContext& c, std::string_view why) {
  if (!c.max_positions) {
    Fail("max_position_embeddings", "be an integer in [1, 2^53] (" + std::string(why) + ")",
         c.top.Find("max_position_embeddings"));
  }
  return *c.max_positions;
}

double ReadFactor(const Node& dict, std::string_view type) {
  return RequiredNumber(dict, "factor",
                        "be a number >= 1 (required by rope_type \"" + std::string(type) + "\")",
                        kAtLeastOne);
}

// The YaRN rules of the release that wrote the config (`transformers_version`): the 4.45-4.50
// rule for a version before 4.51 (the only YaRN transformers had then), unless the config runs
// its own code (`auto_map`: DeepSeek V3's files say 4.33.1); else, and when the version is absent
// or unreadable, the current rule. 4.51.0-4.56.1's factor override is never a default: it was a
// regression, fixed in 4.56.2 (it is offered by name).
YarnRules ReleaseYarnRules(const RopeContext& c) {
  const Json* version = c.top.Value("transformers_version");
  if (version == nullptr || !version->is_string() || c.top.Value("auto_map") != nullptr) {
    return YarnRules::kTransformers5;
  }
  const std::string& text = version->get_ref<const std::string&>();
  int major = 0, minor = 0;
  if (std::sscanf(text.c_str(), "%d.%d", &major, &minor) != 2) return YarnRules::kTransformers5;
  if (major > 4 || (major == 4 && minor >= 51)) return YarnRules::kTransformers5;
  Note(c.scheme,
       "yarn follows transformers 4.45-4.50's rule (the correction range over "
       "max_position_embeddings, no mscale), the release that wrote this config "
       "(transformers_version " +
           text +
           "); yarn_rules transformers5 gives the "
           "current rule");
  return YarnRules::kTransformers4_50;
}

YarnScaling ReadYarn(const RopeContext& c, const Node& dict, bool nested) {
  YarnScaling yarn;
  yarn.original_max_positions = ReadOriginalMax(c, dict);
  yarn.max_positions = c.max_positions.value_or(0);
  if (dict.Value("original_max_position_embeddings") != nullptr) {
    yarn.parameters_original_max_positions =
        RequiredInt(dict, "original_max_position_embeddings", 1, kMaxPositions);
  }
  yarn.rules = ReleaseYarnRules(c);
  const double l0 = static_cast<double>(yarn.original_max_positions);
  const Json* factor = dict.Find("factor");
  if (factor == nullptr) {
    Fail(dict.Key("factor"),
         "be a number >= 1 (required by rope_type \"yarn\"; null means "
         "max_position_embeddings / original_max_position_embeddings)",
         nullptr);
  }
  if (factor->is_null()) {
    const double implied = static_cast<double>(RequireMax(c, "yarn's factor is null")) / l0;
    Require(implied >= 1, kFn, dict.Key("factor"),
            "be >= 1 (null: max_position_embeddings / original_max_position_embeddings)", implied);
    yarn.factor = implied;
    Note(c.scheme, dict.Key("factor") +
                       " is null: max_position_embeddings / L0 = " + Format(implied) + " is used");
  } else {
    yarn.factor = AsNumber(dict, "factor", *factor, "be a number >= 1", kAtLeastOne);
    if (c.max_positions) {
      const double implied = static_cast<double>(*c.max_positions) / l0;
      if (implied != yarn.factor && implied != 1.0) {
        Note(c.scheme,
             "max_position_embeddings / original_max_position_embeddings = " + Format(implied) +
                 " differs from " + dict.Key("factor") + " = " + Format(yarn.factor) +
                 "; the explicit factor is used, as transformers "
                 "does since 4.56.2 (4.51.0-4.56.1 used the ratio: yarn_rules "
                 "transformers4_51)");
      }
    }
  }
  // `get(key) or default`: missing, null and 0 all mean the default.
  for (auto [key, field, fallback] : {std::tuple{"beta_fast", &yarn.beta_fast, 32.0},
                                      std::tuple{"beta_slow", &yarn.beta_slow, 1.0}}) {
    const double value = OptionalNumber(dict, key, "be a number >= 0", kNonNegative).value_or(0.0);
    *field = value != 0 ? value : fallback;
  }
  if (yarn.beta_slow > yarn.beta_fast) {
    Fail(dict.Key("beta_slow"), "be <= beta_fast (" + Format(yarn.beta_fast) + ")",
         dict.Find("beta_slow"));
  }
  yarn.mscale = OptionalNumber(dict, "mscale", "be a number >= 0", kNonNegative).value_or(0.0);
  yarn.mscale_all_dim =
      OptionalNumber(dict, "mscale_all_dim", "be a number >= 0", kNonNegative).value_or(0.0);
  yarn.attention_factor = OptionalNumber(dict, "attention_factor", "be a number > 0", kPositive);
  if (const Json* truncate = dict.Find("truncate")) {
    if (!truncate->is_boolean() && !truncate->is_null()) {
      Fail(dict.Key("truncate"), "be true or false", truncate);
    }
    const bool value = truncate->is_boolean() && truncate->get<bool>();  // null is falsy
    if (nested) {
      if (!value) {
        Note(c.scheme, dict.Key("truncate") +
                           " = false is ignored: Hugging Face reads truncate "
                           "from the top level of rope_parameters only (reference §10.1)");
      }
    } else {
      yarn.truncate = value;
    }
  }
  return yarn;
}

std::vector<double> ReadFactorList(const Node& dict, std::string_view key, int64_t rotary_dim) {
  const std::string rule = "be a list of rotary_dim / 2 = " + std::to_string(rotary_dim / 2) +
                           " numbers > 0 (required by rope_type \"longrope\")";
  const Json* list = dict.Value(key);
  if (list == nullptr || !list->is_array() ||
      static_cast<int64_t>(list->size()) != rotary_dim / 2) {
    Fail(dict.Key(key), rule, dict.Find(key));
  }
  std::vector<double> values;
  values.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    values.push_back(AsNumber(dict, std::string(key) + "[" + std::to_string(i) + "]", (*list)[i],
                              "be a number > 0", kPositive));
  }
  return values;
}

LongRopeScaling ReadLongRope(const RopeContext& c, const Node& dict, int64_t rotary_dim) {
  LongRopeScaling rule;
  rule.short_factor = ReadFactorList(dict, "short_factor", rotary_dim);
  rule.long_factor = ReadFactorList(dict, "long_factor", rotary_dim);
  rule.original_max_positions = ReadOriginalMax(c, dict);
  Require(rule.original_max_positions > 1, kFn, "original_max_position_embeddings", "be > 1",
          rule.original_max_positions);
  rule.factor = OptionalNumber(dict, "factor", "be a number > 0", kPositive);
  rule.max_positions = rule.factor ? c.max_positions.value_or(rule.original_max_positions)
                                   : RequireMax(c, "longrope's factor defaults to M / L0");
  rule.attention_factor = OptionalNumber(dict, "attention_factor", "be a number > 0", kPositive);
  return rule;
}

Llama3Scaling ReadLlama3(const RopeContext& c, const Node& dict) {
  Llama3Scaling rule;
  rule.factor = ReadFactor(dict, "llama3");
  rule.low_freq_factor = RequiredNumber(
      dict, "low_freq_factor", "be a number > 0 (required by rope_type \"llama3\")", kPositive);
  const double low = rule.low_freq_factor;
  rule.high_freq_factor = RequiredNumber(
      dict, "high_freq_factor",
      "be a number >= low_freq_factor (" + Format(low) + ") (required by rope_type \"llama3\")",
      [low](double v) { return v >= low; });
  rule.original_max_positions = ReadOriginalMax(c, dict);
  return rule;
}

// The rope type a dict names, with Phi-3's legacy names mapped to longrope.
std::string ReadRopeType(const RopeContext& c, const Node& dict, std::string& key) {
  key = dict.Key(dict.Value("rope_type") != nullptr ? "rope_type" : "type");
  const std::string_view field = dict.Value("rope_type") != nullptr ? "rope_type" : "type";
  std::string type = OptionalString(dict, field).value_or("default");
  if (type == "mrope") {  // Qwen2-VL's configs: the frequencies are the default rule's
    Note(c.scheme, key +
                       " \"mrope\" computes the default frequencies (Hugging Face maps it to "
                       "\"default\"); mrope_section is reported separately");
    type = "default";
  }
  if (type == "su" || (type == "yarn" && c.family.yarn_means_longrope)) {
    Note(c.scheme, key + " \"" + type + "\" is Phi-3's legacy name for \"longrope\"");
    type = "longrope";
  }
  if (!In(type, kRopeTypes)) {
    const Json shown = type;
    Fail(key, "be one of default, linear, dynamic, yarn, longrope, llama3, proportional", &shown);
  }
  return type;
}

double ReadTheta(const RopeContext& c, const Node& dict, std::optional<double> theta_override) {
  const std::string rule = "be a number > 0";
  if (theta_override) return *theta_override;
  if (c.family.theta == ThetaKey::kRopeRatio) {  // ChatGLM's RotaryEmbedding: 10000 * rope_ratio
    const double ratio = OptionalNumber(c.top, "rope_ratio", rule, kPositive).value_or(1.0);
    return c.family.default_theta * ratio;
  }
  if (const auto theta = OptionalNumber(dict, "rope_theta", rule, kPositive)) return *theta;
  if (const auto theta = OptionalNumber(c.top, "rope_theta", rule, kPositive)) return *theta;
  if (c.family.theta == ThetaKey::kRotaryEmbBase) {
    if (const auto theta = OptionalNumber(c.top, "rotary_emb_base", rule, kPositive)) {
      return *theta;
    }
  }
  const double fallback = c.family.default_theta;
  Note(c.scheme, "rope_theta absent: " + Format(fallback) +
                     " (the Hugging Face config class default) is used");
  return fallback;
}

// floor(head_dim * p), or GPT-J's rotary_dim; the Llama-family default ignores p.
int64_t ReadRotaryDim(const RopeContext& c, const Node& dict, const std::string& type) {
  if (c.family.partial_rotary == PartialRotary::kRotaryDimKey) {
    return OptionalInt(c.top, "rotary_dim", 2, c.head_dim).value_or(c.head_dim);
  }
  if (c.family.partial_rotary == PartialRotary::kHalfHead) {
    Require(c.head_dim % 4 == 0, kFn, c.top.Key("kv_channels"),
            "be a multiple of 4 (ChatGLM rotates the first half of each head, in pairs)",
            c.head_dim);
    return c.head_dim / 2;
  }
  std::string key = dict.Key("partial_rotary_factor");
  std::optional<double> p =
      OptionalNumber(dict, "partial_rotary_factor", "be a number in (0, 1]", kUnitInterval);
  for (std::string_view top_key : {"partial_rotary_factor", "rotary_pct"}) {
    if (top_key == "rotary_pct" && c.family.theta != ThetaKey::kRotaryEmbBase) continue;
    if (const auto top_p = OptionalNumber(c.top, top_key, "be a number in (0, 1]", kUnitInterval)) {
      p = top_p;  // the top level overrides the dict
      key = std::string(top_key);
      break;
    }
  }
  const double factor = p.value_or(1.0);
  if (type == "proportional") return c.head_dim;
  // Without a partial rotary factor the whole head rotates: an odd head is the head's fault.
  if (!p && c.head_dim % 2 != 0) {
    Require(false, kFn, "head_dim",
            "be even: RoPE rotates pairs of features, and without partial_rotary_factor every "
            "feature of the head rotates",
            c.head_dim);
  }
  if (type == "default" && factor != 1.0 && c.family.partial_rotary != PartialRotary::kApplied) {
    if (c.family.partial_rotary != PartialRotary::kIgnoredByDefault) {
      const Json shown = factor;
      Fail(key,
           "be 1 with rope_type \"default\" unless model_type says whether its default applies "
           "it (llama-family: no; gpt_neox, phi, phi3: yes)",
           &shown);
    }
    Note(c.scheme, key + " = " + Format(factor) + " is ignored by the " + c.scheme.model_type +
                       " default rotary embedding (reference §0.1, §10.8); rotary_dim = head_dim");
    return c.head_dim;
  }
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
  if (rotary_dim < 2 || rotary_dim % 2 != 0) {
    const Json shown = factor;
    Fail(key,
         "give an even rotary_dim >= 2 (floor(head_dim " + std::to_string(c.head_dim) + " x " +
             Format(factor) + ") = " + std::to_string(rotary_dim) + ")",
         &shown);
  }
  return rotary_dim;
}

RopeLayerScheme ReadLayer(const RopeContext& c, const Node& dict, std::string layer_type,
                          bool nested, std::optional<double> theta_override = std::nullopt) {
  RopeLayerScheme layer;
  layer.layer_type = std::move(layer_type);
  layer.parameters_key = dict.path.empty() ? "" : dict.path.substr(0, dict.path.size() - 1);
  layer.head_dim = c.head_dim;
  std::string type_key;
  const std::string type = ReadRopeType(c, dict, type_key);
  layer.rope_theta = ReadTheta(c, dict, theta_override);
  layer.rotary_dim = ReadRotaryDim(c, dict, type);
  if (type == "yarn" && layer.rope_theta <= 1) {
    const Json shown = layer.rope_theta;
    Fail(dict.Key("rope_theta"), "be a number > 1 for rope_type \"yarn\"", &shown);
  }
  if (type == "dynamic" && dict.Value("original_max_position_embeddings") != nullptr) {
    Note(c.scheme, dict.Key("original_max_position_embeddings") +
                       " is ignored by rope_type \"dynamic\", which uses max_position_embeddings"
                       " (reference §10.11)");
  }

  if (type == "default") {
    layer.scaling = NoScaling{};
  } else if (type == "linear") {
    layer.scaling = LinearScaling{ReadFactor(dict, type)};
  } else if (type == "dynamic") {
    const double factor = ReadFactor(dict, type);
    const int64_t max_positions = RequireMax(c, "rope_type \"dynamic\" scales from it");
    Require(layer.rotary_dim >= 4, kFn, "rotary_dim", "be >= 4 for rope_type \"dynamic\"",
            layer.rotary_dim);
    layer.scaling = DynamicNtkScaling{factor, max_positions};
  } else if (type == "yarn") {
    YarnScaling yarn = ReadYarn(c, dict, nested);
    if (c.family.latent_attention && yarn.mscale_all_dim != 0) {
      const double g = YarnMscale(yarn.factor, yarn.mscale_all_dim);
      // The multiplier scales attention scores, which are float32.
      Require(internal::IsPositiveFloat32(g * g), kFn, dict.Key("mscale_all_dim"),
              "give a softmax multiplier (0.1 mscale_all_dim ln factor + 1)^2 that is a positive "
              "normal float32",
              yarn.mscale_all_dim);
      c.scheme.softmax_scale_multiplier = g * g;
    }
    layer.scaling = yarn;
  } else if (type == "longrope") {
    layer.scaling = ReadLongRope(c, dict, layer.rotary_dim);
  } else if (type == "llama3") {
    layer.scaling = ReadLlama3(c, dict);
  } else {  // proportional
    Require(c.head_dim % 2 == 0, kFn, "head_dim", "be even", c.head_dim);
    const std::optional<double> p =
        OptionalNumber(c.top, "partial_rotary_factor", "be a number in (0, 1]", kUnitInterval);
    layer.scaling = ProportionalScaling{
        OptionalNumber(dict, "factor", "be a number >= 1", kAtLeastOne).value_or(1.0),
        p ? *p
          : OptionalNumber(dict, "partial_rotary_factor", "be a number in (0, 1]", kUnitInterval)
                .value_or(1.0)};
  }
  std::visit(
      [&](const auto& rule) {
        using Rule = std::decay_t<decltype(rule)>;
        if constexpr (requires(const Rule& r) { r.original_max_positions; }) {
          if constexpr (!std::is_same_v<Rule, DynamicNtkScaling>) {
            c.scheme.original_max_position_embeddings = rule.original_max_positions;
          }
        }
      },
      layer.scaling);
  return layer;
}

// Per-layer-type configs nest one dict per layer type (Gemma 3/4, DeepSeek V4).
bool IsPerLayer(const Json& params) {
  if (!params.is_object() || params.empty()) return false;
  return std::all_of(params.begin(), params.end(),
                     [](const Json& value) { return value.is_object(); });
}

// Grouped-query heads under each family's name for them.
int64_t ReadKeyValueHeads(const Node& top, const Family& family, int64_t heads) {
  if (family.kv_heads == KeyValueHeadsKey::kChatGlm) {  // ChatGLM2/3
    const Json* mqa = top.Value("multi_query_attention");
    if (mqa != nullptr && !mqa->is_boolean())
      Fail(top.Key("multi_query_attention"), "be true or false", mqa);
    if (mqa == nullptr || !mqa->get<bool>()) return heads;
    return RequiredInt(top, "multi_query_group_num", 1, heads);
  }
  if (family.kv_heads == KeyValueHeadsKey::kFalcon) {
    const std::string_view key = FirstKey(top, {"num_kv_heads", "n_head_kv"});
    const Json* new_arch = top.Value("new_decoder_architecture");
    const bool is_new = (new_arch != nullptr && new_arch->is_boolean() && new_arch->get<bool>()) ||
                        top.Value("n_head_kv") != nullptr;
    if (is_new && top.Value(key) != nullptr) return RequiredInt(top, key, 1, heads);
    const Json* mq = top.Value("multi_query");
    if (mq != nullptr && !mq->is_boolean()) Fail(top.Key("multi_query"), "be true or false", mq);
    return mq != nullptr && mq->get<bool>() ? 1 : heads;
  }
  return OptionalInt(top, "num_key_value_heads", 1, heads).value_or(heads);
}

// Qwen2.5-1M's dual_chunk_attention_config. vLLM reads it with .get(key, default)
// (DualChunkFlashAttentionImpl: chunk_size 8192, local_size 1024,
// original_max_position_embeddings 0) and forms the chunk length chunk_size - local_size, which
// must be >= 1.
void ReadDualChunk(const Node& top, RopeScheme& scheme) {
  const Json* value = top.Value("dual_chunk_attention_config");
  if (value == nullptr) return;
  if (!value->is_object()) Fail(top.Key("dual_chunk_attention_config"), "be an object", value);
  const Node dict{*value, top.Key("dual_chunk_attention_config.")};
  DualChunk dca;
  for (auto [field, key, lo, fallback] :
       {std::tuple{&dca.chunk_size, "chunk_size", int64_t{2}, int64_t{8192}},
        std::tuple{&dca.local_size, "local_size", int64_t{1}, int64_t{1024}},
        std::tuple{&dca.original_max_position_embeddings, "original_max_position_embeddings",
                   int64_t{0}, int64_t{0}}}) {
    const std::optional<int64_t> given = OptionalInt(dict, key, lo, kMaxPosition);
    if (!given) {
      Note(scheme, dict.Key(key) + " absent: " + std::to_string(fallback) + " (vLLM's default)");
    }
    *field = given.value_or(fallback);
  }
  if (dca.chunk_size <= dca.local_size) {
    const Json shown = dca.chunk_size;  // as given, or vLLM's default
    Fail(dict.Key("chunk_size"),
         "be > local_size (" + std::to_string(dca.local_size) +
             "): the chunk length chunk_size - local_size must be >= 1",
         &shown);
  }
  scheme.dual_chunk = dca;
}

// M-RoPE's sections (Qwen2-VL family): they must cover the rotary pairs exactly.
void ReadMropeSection(const Node& dict, RopeScheme& scheme, int64_t rotary_dim) {
  const Json* section = dict.Value("mrope_section");
  if (section == nullptr) return;
  const std::string rule = "be a list of positive integers summing to rotary_dim / 2 = " +
                           std::to_string(rotary_dim / 2);
  if (!section->is_array() || section->empty() || section->size() > 4) {
    Fail(dict.Key("mrope_section"), rule, section);
  }
  int64_t total = 0;
  for (size_t i = 0; i < section->size(); ++i) {
    const Json& value = (*section)[i];
    if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
        value.get<int64_t>() > kMaxHeadDim) {
      Fail(dict.Key("mrope_section[" + std::to_string(i) + "]"), IntRule(1, kMaxHeadDim), &value);
    }
    const int64_t pairs = value.get<int64_t>();
    scheme.mrope_section.push_back(pairs);
    total += pairs;
  }
  if (total != rotary_dim / 2) Fail(dict.Key("mrope_section"), rule, section);
  const Json* interleaved = dict.Value("mrope_interleaved");
  if (interleaved != nullptr && !interleaved->is_boolean()) {
    Fail(dict.Key("mrope_interleaved"), "be true or false", interleaved);
  }
  scheme.mrope_interleaved = interleaved != nullptr && interleaved->get<bool>();
  Note(scheme,
       "M-RoPE (" + dict.Key("mrope_section") +
           "): for text tokens, whose three "
           "position streams are equal, it is this 1-D RoPE exactly; image and video tokens "
           "need (time, height, width) positions, which 1-D RoPE cannot express");
}

}  // namespace

RopeScheme ReadRope(const Node& top, const std::string& model_type) {
  RopeScheme scheme;
  scheme.model_type = model_type;
  const Family& family = FamilyOf(model_type);
  const std::string_view heads_key = FirstKey(top, {"num_attention_heads", "n_head"});
  scheme.num_attention_heads = RequiredInt(top, heads_key, 1, kMaxHeads);
  scheme.num_key_value_heads = ReadKeyValueHeads(top, family, scheme.num_attention_heads);
  scheme.max_position_embeddings =
      OptionalInt(top, FirstKey(top, {"max_position_embeddings", "n_positions", "seq_length"}), 1,
                  kMaxPositions);
  if (family.pairs == PairLayout::kInterleaved) {
    scheme.layout = RopeLayout::kInterleaved;
  } else if (family.pairs == PairLayout::kInterleavedUnlessRopeInterleaveFalse) {
    const Json* interleave = top.Value("rope_interleave");
    if (interleave != nullptr && !interleave->is_boolean()) {
      Fail("rope_interleave", "be true or false", interleave);
    }
    if (interleave == nullptr || interleave->get<bool>()) {
      scheme.layout = RopeLayout::kInterleaved;
      Note(scheme,
           "deepseek_v3 rotates interleaved pairs (2i, 2i+1) but stores the result "
           "de-interleaved; q.k is the interleaved result (reference §0.4)");
    }
  }
  const int64_t head_dim = ReadHeadDim(top, family, scheme.num_attention_heads);
  RopeContext c{top, family, head_dim, scheme.max_position_embeddings, scheme};

  // A legacy rope_scaling replaces rope_parameters.
  const Json* legacy = top.Value("rope_scaling");
  const std::string params_key = legacy != nullptr ? "rope_scaling" : "rope_parameters";
  const Json* params = legacy != nullptr ? legacy : top.Value("rope_parameters");
  if (params != nullptr && !params->is_object()) Fail(params_key, "be an object", params);
  const Node dict{params != nullptr ? *params : EmptyObject(), params ? params_key + "." : ""};

  if (params != nullptr && IsPerLayer(*params)) {
    for (const auto& [layer_type, layer_params] : params->items()) {
      const Node layer_dict{layer_params, params_key + "." + layer_type + "."};
      scheme.layers.push_back(ReadLayer(c, layer_dict, layer_type, /*nested=*/true));
    }
  } else if (family.rope_layers == RopeLayers::kGemma3LocalBase &&
             top.Value("rope_local_base_freq") != nullptr) {
    // Gemma 3's released configs: rope_scaling and rope_theta are the global layers'; sliding
    // layers use plain RoPE at rope_local_base_freq.
    scheme.layers.push_back(ReadLayer(c, dict, "full_attention", false));
    const double local_theta =
        RequiredNumber(top, "rope_local_base_freq", "be a number > 0", kPositive);
    scheme.layers.push_back(
        ReadLayer(c, Node{EmptyObject(), ""}, "sliding_attention", false, local_theta));
  } else if (family.rope_layers == RopeLayers::kModernBertThetas) {
    // ModernBertAttention: global layers rotate at global_rope_theta, local (sliding) layers at
    // local_rope_theta; both plain RoPE.
    for (auto [layer_type, key, fallback] :
         {std::tuple{"full_attention", "global_rope_theta", 160000.0},
          std::tuple{"sliding_attention", "local_rope_theta", 10000.0}}) {
      const std::optional<double> theta = OptionalNumber(top, key, "be a number > 0", kPositive);
      if (!theta)
        Note(scheme,
             std::string(key) + " absent: " + Format(fallback) + " (ModernBertConfig's default)");
      scheme.layers.push_back(ReadLayer(c, dict, layer_type, false, theta.value_or(fallback)));
    }
  } else {
    scheme.layers.push_back(ReadLayer(c, dict, "", false));
    ReadMropeSection(dict, scheme, scheme.layers.back().rotary_dim);
  }

  // DeepSeek V2/V3 multi-head latent attention: the q/k head is [qk_nope_head_dim features that
  // never rotate | qk_rope_head_dim rotated ones] (DeepseekV3Attention splits q into q_nope and
  // q_pe and concatenates them back in that order).
  if (family.latent_attention && top.Value("qk_nope_head_dim") != nullptr &&
      top.Value("qk_rope_head_dim") != nullptr) {
    const int64_t nope = RequiredInt(top, "qk_nope_head_dim", 0, kMaxHeadDim);
    for (RopeLayerScheme& layer : scheme.layers) {
      layer.rotary_offset = nope;
      layer.head_dim = nope + layer.head_dim;
    }
  }

  // Gemma 2/3 scale scores by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2, and cap them
  // by attn_logit_softcapping (Gemma2Attention passes softcap=config.attn_logit_softcapping to
  // its attention function; Gemma 3's configs give null).
  if (family.gemma_scores) {
    if (const auto scalar =
            OptionalNumber(top, "query_pre_attn_scalar", "be a number > 0", kPositive)) {
      scheme.softmax_scale = 1.0 / std::sqrt(*scalar);
    }
    scheme.logit_softcap =
        OptionalNumber(top, "attn_logit_softcapping", "be a number > 0 or null", kPositive);
  }
  ReadDualChunk(top, scheme);
  if (scheme.softmax_scale_multiplier && top.Value("qk_nope_head_dim") != nullptr &&
      top.Value("qk_rope_head_dim") != nullptr) {
    const int64_t qk_head_dim = RequiredInt(top, "qk_nope_head_dim", 1, kMaxHeadDim) +
                                RequiredInt(top, "qk_rope_head_dim", 1, kMaxHeadDim);
    scheme.softmax_scale =
        *scheme.softmax_scale_multiplier / std::sqrt(static_cast<double>(qk_head_dim));
  }
  return scheme;
}

}  // namespace posenc::hf_json
