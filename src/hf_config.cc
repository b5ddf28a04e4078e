#include "posenc/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

#include "float32_range.h"
#include "hf_config_reader.h"
#include "hf_json.h"
#include "posenc/error.h"
#include "posenc/files.h"
#include "posenc/positions.h"

namespace posenc {
namespace {

using namespace hf_json;  // NOLINT(google-build-using-namespace): the loader's vocabulary

constexpr double kDefaultTheta = 10000.0;

// Model families, by config.json model_type.
constexpr std::string_view kLlamaFamily[] = {  // model-level default ignores partial rotary
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3", "gemma3_text", "deepseek_v2", "deepseek_v3"};
constexpr std::string_view kPartialRotaryDefault[] = {  // own default that applies it
    "gpt_neox", "phi", "phi3", "gptj", "stablelm", "persimmon", "glm", "glm4", "glm4_moe"};
constexpr std::string_view kOtherRopeModels[] = {
    "nomic_bert", "gpt_oss", "olmo", "olmo2", "olmo3", "starcoder2", "cohere", "cohere2",
    "falcon", "gemma4", "gemma4_text", "internlm2", "granite", "llama4", "llama4_text",
    "smollm3", "exaone4", "chatglm", "modernbert", "mistral3", "ministral", "ministral3",
    "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text",
    "qwen3_next", "phimoe", "stablelm_epoch"};
// Attention layers without positions, between state-space layers (docs/MODELS.md).
constexpr std::string_view kNoPositionModels[] = {"mamba", "mamba2", "falcon_mamba", "rwkv",
                                                  "nemotron_h", "jamba"};
// Rotation of interleaved pairs (2i, 2i + 1) (docs/MODELS.md cites each model's code).
constexpr std::string_view kInterleavedModels[] = {"gptj", "deepseek_v2", "cohere", "cohere2",
                                                   "chatglm", "glm", "glm4", "llama4",
                                                   "llama4_text"};
constexpr std::string_view kRopeTypes[] = {"default", "linear", "dynamic", "yarn",
                                           "longrope", "llama3", "proportional"};


// ---------------------------------------------------------------------------------------------
// RoPE.

struct RopeContext {
  const Node& top;
  const std::string& model_type;
  int64_t head_dim;
  std::optional<int64_t> max_positions;  // M
  RopeScheme& scheme;
};

void Note(RopeScheme& scheme, std::string note) {
  if (std::find(scheme.notes.begin(), scheme.notes.end(), note) == scheme.notes.end()) {
    scheme.notes.push_back(std::move(note));
  }
}


int64_t ReadHeadDim(const Node& top, const std::string& model_type, int64_t heads) {
  // DeepSeek's rotary part of each head is qk_rope_head_dim (HF copies it into head_dim).
  if ((model_type == "deepseek_v2" || model_type == "deepseek_v3") &&
      top.Value("qk_rope_head_dim") != nullptr) {
    return RequiredInt(top, "qk_rope_head_dim", 2, kMaxHeadDim);
  }
  if (model_type == "chatglm") return RequiredInt(top, "kv_channels", 2, kMaxHeadDim);
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
  Note(c.scheme, "yarn follows transformers 4.45-4.50's rule (the correction range over "
                 "max_position_embeddings, no mscale), the release that wrote this config "
                 "(transformers_version " + text + "); yarn_rules transformers5 gives the "
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
    Note(c.scheme, dict.Key("factor") + " is null: max_position_embeddings / L0 = " +
                       Format(implied) + " is used");
  } else {
    yarn.factor = AsNumber(dict, "factor", *factor, "be a number >= 1", kAtLeastOne);
    if (c.max_positions) {
      const double implied = static_cast<double>(*c.max_positions) / l0;
      if (implied != yarn.factor && implied != 1.0) {
        Note(c.scheme, "max_position_embeddings / original_max_position_embeddings = " +
                           Format(implied) + " differs from " + dict.Key("factor") + " = " +
                           Format(yarn.factor) + "; the explicit factor is used, as transformers "
                           "does since 4.56.2 (4.51.0-4.56.1 used the ratio: yarn_rules "
                           "transformers4_51)");
      }
    }
  }
  // `get(key) or default`: missing, null and 0 all mean the default.
  for (auto [key, field, fallback] : {std::tuple{"beta_fast", &yarn.beta_fast, 32.0},
                                      std::tuple{"beta_slow", &yarn.beta_slow, 1.0}}) {
    const double value =
        OptionalNumber(dict, key, "be a number >= 0", kNonNegative).value_or(0.0);
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
        Note(c.scheme, dict.Key("truncate") + " = false is ignored: Hugging Face reads truncate "
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
    values.push_back(AsNumber(dict, std::string(key) + "[" + std::to_string(i) + "]",
                              (*list)[i], "be a number > 0", kPositive));
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
    Note(c.scheme, key + " \"mrope\" computes the default frequencies (Hugging Face maps it to "
                         "\"default\"); mrope_section is reported separately");
    type = "default";
  }
  if (type == "su" || (type == "yarn" && c.model_type == "phi3")) {
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
  if (c.model_type == "chatglm") {  // ChatGLM's RotaryEmbedding: base = 10000 * rope_ratio
    const double ratio =
        OptionalNumber(c.top, "rope_ratio", rule, kPositive).value_or(1.0);
    return kDefaultTheta * ratio;
  }
  if (const auto theta = OptionalNumber(dict, "rope_theta", rule, kPositive)) return *theta;
  if (const auto theta = OptionalNumber(c.top, "rope_theta", rule, kPositive)) return *theta;
  if (c.model_type == "gpt_neox") {
    if (const auto theta = OptionalNumber(c.top, "rotary_emb_base", rule, kPositive)) {
      return *theta;
    }
  }
  const double fallback = c.model_type == "gpt_oss" ? 150000.0 : kDefaultTheta;
  Note(c.scheme, "rope_theta absent: " + Format(fallback) +
                     " (the Hugging Face config class default) is used");
  return fallback;
}

// floor(head_dim * p), or GPT-J's rotary_dim; the Llama-family default ignores p.
int64_t ReadRotaryDim(const RopeContext& c, const Node& dict, const std::string& type) {
  if (c.model_type == "gptj") {
    return OptionalInt(c.top, "rotary_dim", 2, c.head_dim).value_or(c.head_dim);
  }
  if (c.model_type == "chatglm") {  // ChatGLM rotates the first half of each head
    Require(c.head_dim % 4 == 0, kFn, c.top.Key("kv_channels"),
            "be a multiple of 4 (ChatGLM rotates the first half of each head, in pairs)",
            c.head_dim);
    return c.head_dim / 2;
  }
  std::string key = dict.Key("partial_rotary_factor");
  std::optional<double> p = OptionalNumber(dict, "partial_rotary_factor", "be a number in (0, 1]",
                                           kUnitInterval);
  for (std::string_view top_key : {"partial_rotary_factor", "rotary_pct"}) {
    if (top_key == "rotary_pct" && c.model_type != "gpt_neox") continue;
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
  if (type == "default" && factor != 1.0 && !In(c.model_type, kPartialRotaryDefault)) {
    if (!In(c.model_type, kLlamaFamily)) {
      const Json shown = factor;
      Fail(key,
           "be 1 with rope_type \"default\" unless model_type says whether its default applies "
           "it (llama-family: no; gpt_neox, phi, phi3: yes)",
           &shown);
    }
    Note(c.scheme, key + " = " + Format(factor) + " is ignored by the " + c.model_type +
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
    if ((c.model_type == "deepseek_v2" || c.model_type == "deepseek_v3") &&
        yarn.mscale_all_dim != 0) {
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
int64_t ReadKeyValueHeads(const Node& top, const std::string& model_type, int64_t heads) {
  if (model_type == "chatglm") {  // ChatGLM2/3: multi_query_attention with multi_query_group_num
    const Json* mqa = top.Value("multi_query_attention");
    if (mqa != nullptr && !mqa->is_boolean()) Fail(top.Key("multi_query_attention"),
                                                   "be true or false", mqa);
    if (mqa == nullptr || !mqa->get<bool>()) return heads;
    return RequiredInt(top, "multi_query_group_num", 1, heads);
  }
  if (model_type == "falcon") {  // also RefinedWeb / RefinedWebModel
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
  Note(scheme, "M-RoPE (" + dict.Key("mrope_section") + "): for text tokens, whose three "
               "position streams are equal, it is this 1-D RoPE exactly; image and video tokens "
               "need (time, height, width) positions, which 1-D RoPE cannot express");
}

RopeScheme ReadRope(const Node& top, const std::string& model_type) {
  RopeScheme scheme;
  scheme.model_type = model_type;
  const std::string_view heads_key = FirstKey(top, {"num_attention_heads", "n_head"});
  scheme.num_attention_heads = RequiredInt(top, heads_key, 1, kMaxHeads);
  scheme.num_key_value_heads = ReadKeyValueHeads(top, model_type, scheme.num_attention_heads);
  scheme.max_position_embeddings = OptionalInt(
      top, FirstKey(top, {"max_position_embeddings", "n_positions", "seq_length"}), 1,
      kMaxPositions);
  if (In(model_type, kInterleavedModels)) {
    scheme.layout = RopeLayout::kInterleaved;
  } else if (model_type == "deepseek_v3") {
    const Json* interleave = top.Value("rope_interleave");
    if (interleave != nullptr && !interleave->is_boolean()) {
      Fail("rope_interleave", "be true or false", interleave);
    }
    if (interleave == nullptr || interleave->get<bool>()) {
      scheme.layout = RopeLayout::kInterleaved;
      Note(scheme, "deepseek_v3 rotates interleaved pairs (2i, 2i+1) but stores the result "
                   "de-interleaved; q.k is the interleaved result (reference §0.4)");
    }
  }
  const int64_t head_dim = ReadHeadDim(top, model_type, scheme.num_attention_heads);
  RopeContext c{top, model_type, head_dim, scheme.max_position_embeddings, scheme};

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
  } else if ((model_type == "gemma3" || model_type == "gemma3_text") &&
             top.Value("rope_local_base_freq") != nullptr) {
    // Gemma 3's released configs: rope_scaling and rope_theta are the global layers'; sliding
    // layers use plain RoPE at rope_local_base_freq.
    scheme.layers.push_back(ReadLayer(c, dict, "full_attention", false));
    const double local_theta =
        RequiredNumber(top, "rope_local_base_freq", "be a number > 0", kPositive);
    scheme.layers.push_back(ReadLayer(c, Node{EmptyObject(), ""}, "sliding_attention", false,
                                      local_theta));
  } else if (model_type == "modernbert") {
    // ModernBertAttention: global layers rotate at global_rope_theta, local (sliding) layers at
    // local_rope_theta; both plain RoPE.
    for (auto [layer_type, key, fallback] :
         {std::tuple{"full_attention", "global_rope_theta", 160000.0},
          std::tuple{"sliding_attention", "local_rope_theta", 10000.0}}) {
      const std::optional<double> theta =
          OptionalNumber(top, key, "be a number > 0", kPositive);
      if (!theta) Note(scheme, std::string(key) + " absent: " + Format(fallback) +
                                   " (ModernBertConfig's default)");
      scheme.layers.push_back(ReadLayer(c, dict, layer_type, false, theta.value_or(fallback)));
    }
  } else {
    scheme.layers.push_back(ReadLayer(c, dict, "", false));
    ReadMropeSection(dict, scheme, scheme.layers.back().rotary_dim);
  }

  // DeepSeek V2/V3 multi-head latent attention: the q/k head is [qk_nope_head_dim features that
  // never rotate | qk_rope_head_dim rotated ones] (DeepseekV3Attention splits q into q_nope and
  // q_pe and concatenates them back in that order).
  if ((model_type == "deepseek_v2" || model_type == "deepseek_v3") &&
      top.Value("qk_nope_head_dim") != nullptr && top.Value("qk_rope_head_dim") != nullptr) {
    const int64_t nope = RequiredInt(top, "qk_nope_head_dim", 0, kMaxHeadDim);
    for (RopeLayerScheme& layer : scheme.layers) {
      layer.rotary_offset = nope;
      layer.head_dim = nope + layer.head_dim;
    }
  }

  // Gemma 2/3 scale scores by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2, and cap them
  // by attn_logit_softcapping (Gemma2Attention passes softcap=config.attn_logit_softcapping to
  // its attention function; Gemma 3's configs give null).
  if (model_type == "gemma2" || model_type == "gemma3" || model_type == "gemma3_text") {
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

// ---------------------------------------------------------------------------------------------
// ALiBi, learned absolute positions, none.

AlibiScheme ReadMptAlibi(const Node& top) {
  AlibiScheme scheme{.model_type = "mpt", .notes = {}};
  scheme.num_heads = RequiredInt(top, "n_heads", 1, kMaxHeads);
  const Json* attn = top.Value("attn_config");
  if (attn != nullptr && !attn->is_object()) Fail("attn_config", "be an object", attn);
  const Node attn_config{attn != nullptr ? *attn : EmptyObject(), "attn_config."};
  if (const Json* alibi = attn_config.Value("alibi")) {
    if (!alibi->is_boolean() || !alibi->get<bool>()) {
      Fail("attn_config.alibi", "be true (posenc reads MPT with ALiBi only)", alibi);
    }
  }
  const std::optional<double> max_bias =
      OptionalNumber(attn_config, "alibi_bias_max", "be a number > 0", kPositive);
  scheme.max_bias = max_bias.value_or(8.0);
  if (!max_bias) scheme.notes.push_back("attn_config.alibi_bias_max absent: 8 (MPT's default)");
  if (scheme.max_bias != 8.0) {
    scheme.notes.push_back("Hugging Face's MptModel ignores alibi_bias_max and always uses 8 "
                           "(reference §8, §10.10)");
  }
  return scheme;
}

LearnedPositionScheme ReadLearned(const Node& top, const std::string& model_type) {
  const bool gpt2_keys = model_type == "gpt2" || model_type == "gpt_bigcode";  // else opt, bert
  if (model_type == "bert") {
    const std::string kind = OptionalString(top, "position_embedding_type").value_or("absolute");
    if (kind != "absolute") {
      Fail("position_embedding_type", "be \"absolute\"", top.Find("position_embedding_type"));
    }
  }
  return {.model_type = model_type,
          .max_positions = RequiredInt(top, gpt2_keys ? "n_positions" : "max_position_embeddings",
                                       1, kMaxPositions),
          .dim = RequiredInt(top, gpt2_keys ? "n_embd" : "hidden_size", 1,
                             kMaxHeadDim * kMaxHeads)};
}

bool HasRopeKeys(const Node& top) {
  for (std::string_view key : {"rope_theta", "rope_scaling", "rope_parameters", "rotary_pct",
                               "rotary_emb_base", "partial_rotary_factor"}) {
    if (top.Value(key) != nullptr) return true;
  }
  return false;
}

// Baichuan's remote code decides by model: Baichuan-7B (architectures BaiChuanForCausalLM) and
// Baichuan2-7B (hidden_size 4096) rotate; Baichuan-13B and Baichuan2-13B add ALiBi biases. vLLM's
// baichuan.py makes the same choice (BaiChuanForCausalLM: RoPE; BaichuanForCausalLM: RoPE when
// hidden_size == 4096, else ALiBi).
bool BaichuanUsesRope(const Node& top) {
  const Json* architectures = top.Value("architectures");
  if (architectures != nullptr && architectures->is_array()) {
    for (const Json& name : *architectures) {
      if (name.is_string() && name.get<std::string>() == "BaiChuanForCausalLM") return true;
    }
  }
  return RequiredInt(top, "hidden_size", 1, kMaxHeadDim * kMaxHeads) == 4096;
}

// T5's relative buckets (T5Config: relative_attention_num_buckets 32, _max_distance 128).
RelativeBiasScheme ReadRelativeBias(const Node& top, const std::string& model_type) {
  RelativeBiasScheme scheme{.model_type = model_type, .notes = {}};
  scheme.num_heads = RequiredInt(top, "num_heads", 1, kMaxHeads);
  const std::optional<int64_t> buckets =
      OptionalInt(top, "relative_attention_num_buckets", 0, int64_t{1} << 20);
  const std::optional<int64_t> distance =
      OptionalInt(top, "relative_attention_max_distance", 0, kMaxPositions);
  if (!buckets) scheme.notes.push_back("relative_attention_num_buckets absent: 32 (T5Config)");
  if (!distance) scheme.notes.push_back("relative_attention_max_distance absent: 128 (T5Config)");
  scheme.num_buckets = buckets.value_or(32);
  scheme.max_distance = distance.value_or(128);
  // The encoder halves the buckets (keys before / after the query) and each half keeps half of
  // its buckets exact: at least 4 buckets leave one exact bucket per side.
  if (scheme.num_buckets < 4) {
    Fail(top.Key("relative_attention_num_buckets"),
         "be an integer >= 4 (the encoder splits them by direction, then into exact and "
         "logarithmic halves)",
         top.Find("relative_attention_num_buckets"));
  }
  if (scheme.max_distance <= scheme.num_buckets / 2) {
    Fail(top.Key("relative_attention_max_distance"),
         "be > relative_attention_num_buckets / 2 (" + std::to_string(scheme.num_buckets / 2) +
             "), the distances that get exact buckets",
         top.Find("relative_attention_max_distance"));
  }
  scheme.encoder_layers = OptionalInt(top, "num_layers", 1, kMaxLayers).value_or(6);
  scheme.decoder_layers =
      OptionalInt(top, "num_decoder_layers", 1, kMaxLayers).value_or(scheme.encoder_layers);
  scheme.bias_in_every_layer = model_type == "umt5";
  return scheme;
}

PositionScheme ReadScheme(const Node& top, const std::string& model_type) {
  if (model_type == "bloom") {
    return AlibiScheme{.model_type = model_type,
                       .num_heads = RequiredInt(top, FirstKey(top, {"n_head", "num_attention_heads"}),
                                                1, kMaxHeads),
                       .notes = {}};
  }
  if (model_type == "mpt") return ReadMptAlibi(top);
  if (model_type == "falcon" && top.Value("alibi") != nullptr) {
    const Json* alibi = top.Value("alibi");
    if (!alibi->is_boolean()) Fail(top.Key("alibi"), "be true or false", alibi);
    if (alibi->get<bool>()) {
      return AlibiScheme{
          .model_type = model_type,
          .num_heads = RequiredInt(top, FirstKey(top, {"num_attention_heads", "n_head"}), 1,
                                   kMaxHeads),
          .notes = {}};
    }
  }
  if (model_type == "baichuan") {
    if (!BaichuanUsesRope(top)) {
      return AlibiScheme{.model_type = model_type,
                         .num_heads = RequiredInt(top, "num_attention_heads", 1, kMaxHeads),
                         .notes = {"Baichuan 13B models add ALiBi biases (their remote code; "
                                   "architectures is not BaiChuanForCausalLM and hidden_size is "
                                   "not 4096)"}};
    }
    RopeScheme rope = ReadRope(top, model_type);
    Note(rope, "Baichuan 7B models rotate (their remote code; architectures "
               "BaiChuanForCausalLM or hidden_size 4096)");
    return rope;
  }
  if (model_type == "gpt2" || model_type == "gpt_bigcode" || model_type == "gpt_neo" ||
      model_type == "bert") {
    return ReadLearned(top, model_type);
  }
  if (model_type == "opt") {
    LearnedPositionScheme opt = ReadLearned(top, model_type);
    opt.offset = 2;  // OPTLearnedPositionalEmbedding: "OPT is set up so that if padding_idx is
                     // specified then offset the embedding ids by 2"
    return opt;
  }
  if (model_type == "t5" || model_type == "mt5" || model_type == "umt5") {
    return ReadRelativeBias(top, model_type);
  }
  if (In(model_type, kNoPositionModels)) return NoPositionScheme{model_type};
  if (In(model_type, kLlamaFamily) || In(model_type, kPartialRotaryDefault) ||
      In(model_type, kOtherRopeModels) || HasRopeKeys(top)) {
    return ReadRope(top, model_type);
  }
  if (model_type.empty()) {
    Fail(top.Key("model_type"),
         "be present (or the config must have rope_theta, rope_scaling or rope_parameters)",
         top.Find("model_type"));
  }
  const Json shown = model_type;
  Fail(top.Key("model_type"),
       "name a model whose position scheme posenc knows (docs/MODELS.md lists them); for another "
       "RoPE model, rope_theta (or rope_parameters) says how it rotates",
       &shown);
}

}  // namespace

namespace hf_json {

namespace {

// Multimodal wrappers whose text_config may omit model_type.
constexpr std::pair<std::string_view, std::string_view> kWrapperTextModels[] = {
    {"llama4", "llama4_text"}, {"gemma3", "gemma3_text"}, {"gemma4", "gemma4_text"},
    {"mistral3", "mistral"},   {"qwen3_vl", "qwen3_vl_text"}};

// Config-class defaults that released configs rely on (Gemma 3's multimodal text_config leaves
// out its head shape and RoPE bases), from Gemma3TextConfig and Llama4TextConfig.
struct FamilyDefault {
  std::string_view model_type, key, value_json, config_class;
};
constexpr FamilyDefault kFamilyDefaults[] = {
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

}  // namespace

LanguageModel SelectLanguageModel(const Json& root) {
  if (!root.is_object()) Fail("config", "be a JSON object", &root);
  const Node top{root, ""};
  const std::string wrapper_type = OptionalString(top, "model_type").value_or("");
  LanguageModel model;
  const Json* text_config = top.Value("text_config");
  if (text_config != nullptr) {
    if (!text_config->is_object()) Fail("text_config", "be an object", text_config);
    model.config = *text_config;
    model.prefix = "text_config.";
    model.model_type = OptionalString(Node{*text_config, model.prefix}, "model_type").value_or("");
    if (model.model_type.empty()) {
      model.model_type = wrapper_type;
      for (const auto& [wrapper, text] : kWrapperTextModels) {
        if (wrapper == wrapper_type) model.model_type = std::string(text);
      }
      if (model.model_type.empty()) {
        Fail("text_config.model_type", "be present (or the wrapper's model_type)", nullptr);
      }
      model.notes.push_back("text_config.model_type absent: \"" + model.model_type +
                            "\", the text model of \"" + wrapper_type + "\"");
    }
  } else {
    model.config = root;
    model.model_type = wrapper_type;
  }
  if (model.model_type == "RefinedWeb" || model.model_type == "RefinedWebModel") {
    model.notes.push_back("model_type \"" + model.model_type + "\" is Falcon's original name "
                          "(its remote code): read as falcon");
    model.model_type = "falcon";
  }
  for (const FamilyDefault& d : kFamilyDefaults) {
    if (d.model_type != model.model_type) continue;
    const std::string key(d.key);
    if (model.config.contains(key) && !model.config[key].is_null()) continue;
    // A v5 config keeps its bases in rope_parameters; do not add the legacy keys beside it.
    if ((key == "rope_theta" || key == "rope_local_base_freq") &&
        model.config.contains("rope_parameters")) {
      continue;
    }
    model.config[key] = Json::parse(d.value_json);
    model.notes.push_back(model.prefix + key + " absent: " + std::string(d.value_json) + " (" +
                          std::string(d.config_class) + "'s default)");
  }
  return model;
}

PositionScheme ReadPositionScheme(const Node& top, const std::string& model_type) {
  return ReadScheme(top, model_type);
}

// ---------------------------------------------------------------------------------------------
// The vision tower's 2-D RoPE (vision_config).

namespace {

// vision_config.model_type, or the wrapper's model_type when the vision config has none (the
// wrapper's config class then builds its own vision config class).
constexpr std::pair<std::string_view, VisionRopeKind> kVisionModelTypes[] = {
    {"qwen2_vl", VisionRopeKind::kQwen2Vl}, {"qwen2_5_vl", VisionRopeKind::kQwen25Vl},
    {"qwen3_vl", VisionRopeKind::kQwen3Vl}, {"qwen3_vl_moe", VisionRopeKind::kQwen3Vl},
    {"pixtral", VisionRopeKind::kPixtral},  {"llama4_vision_model", VisionRopeKind::kLlama4}};
constexpr std::pair<std::string_view, VisionRopeKind> kWrapperVisionKinds[] = {
    {"qwen2_vl", VisionRopeKind::kQwen2Vl}, {"qwen2_5_vl", VisionRopeKind::kQwen25Vl},
    {"qwen3_vl", VisionRopeKind::kQwen3Vl}, {"qwen3_vl_moe", VisionRopeKind::kQwen3Vl},
    {"mistral3", VisionRopeKind::kPixtral}, {"llama4", VisionRopeKind::kLlama4}};

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

// Pixtral's and Llama 4's base: rope_parameters.rope_theta (v5), else rope_theta, else 10000.
double ReadVisionTheta(const Node& node, std::string_view config_class,
                       std::vector<std::string>& notes) {
  const Json* params = node.Value("rope_parameters");
  if (params != nullptr && !params->is_object()) {
    Fail(node.Key("rope_parameters"), "be an object", params);
  }
  const Node dict{params != nullptr ? *params : EmptyObject(), node.Key("rope_parameters.")};
  if (const auto type = OptionalString(dict, "rope_type"); type && *type != "default") {
    Fail(dict.Key("rope_type"), "be \"default\" (the vision tower's 2-D RoPE has no scaling rule)",
         dict.Find("rope_type"));
  }
  const std::string rule = "be a number > 0";
  if (const auto theta = OptionalNumber(dict, "rope_theta", rule, kPositive)) return *theta;
  if (const auto theta = OptionalNumber(node, "rope_theta", rule, kPositive)) return *theta;
  notes.push_back(node.Key("rope_theta") + " absent: 10000 (" + std::string(config_class) +
                  "'s default)");
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
  std::optional<VisionRopeKind> kind;
  for (const auto& [name, k] : kVisionModelTypes) {
    if (name == vision.model_type) kind = k;
  }
  if (vision.model_type.empty()) {
    for (const auto& [name, k] : kWrapperVisionKinds) {
      if (name == wrapper) kind = k;
    }
  }
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
      // VisionRotaryEmbedding(dim, theta=10000.0): the towers never pass a theta.
      vision.spatial_merge_size =
          IntOrDefault(node, "spatial_merge_size", 2, 1, kMaxImageSide, keys.config_class, notes);
      vision.temporal_patch_size =
          IntOrDefault(node, "temporal_patch_size", 2, 1, kMaxImageSide, keys.config_class, notes);
      break;
    case VisionRopeKind::kPixtral:
    case VisionRopeKind::kLlama4: {
      vision.theta = ReadVisionTheta(node, keys.config_class, notes);
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

}  // namespace hf_json

PositionScheme ParseHfConfig(std::string_view json_text) {
  return DescribeModel(json_text).scheme;
}

PositionScheme LoadHfConfig(const std::filesystem::path& path) {
  return LoadModelPositions(path).scheme;
}

RopeFrequencies ComputeRopeFrequencies(const RopeLayerScheme& layer,
                                       const RopeFrequencyOptions& options) {
  return ComputeRopeFrequencies(layer.rope_theta, layer.rotary_dim, layer.scaling, options);
}

std::string_view VisionRopeKindName(VisionRopeKind kind) {
  switch (kind) {
    case VisionRopeKind::kQwen2Vl: return "qwen2_vl";
    case VisionRopeKind::kQwen25Vl: return "qwen2_5_vl";
    case VisionRopeKind::kQwen3Vl: return "qwen3_vl";
    case VisionRopeKind::kPixtral: return "pixtral";
    case VisionRopeKind::kLlama4: return "llama4";
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
  return MRope::Sections(std::move(rope), scheme.mrope_section,
                         scheme.mrope_interleaved ? MropeSections::kInterleaved
                                                  : MropeSections::kBlocks);
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
