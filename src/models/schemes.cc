// The model-level position scheme of a config: RoPE, ALiBi, learned absolute positions, T5's
// relative buckets, or none, chosen by model_type (and, for a RoPE model posenc does not name, by
// its RoPE keys).
#include <string>

#include "families.h"
#include "hf_config_reader.h"
#include "hf_json.h"
#include "posenc/error.h"

namespace posenc::hf_json {
namespace {

AlibiScheme ReadMptAlibi(const Node& top) {
  AlibiScheme scheme{.model_type = "mpt", .notes = {}};
  scheme.num_heads = RequiredInt(top, "n_heads", 1, kMaxHeads);
  const Json* attn = top.Value("attn_config");
  if (attn != nullptr && !attn->is_object()) Fail("attn_config", "be an object", attn);
  const Node attn_config{attn != nullptr ? *attn : EmptyObject(), "attn_config."};
  const Json* alibi = attn_config.Value("alibi");
  if (alibi != nullptr && (!alibi->is_boolean() || !alibi->get<bool>())) {
    Fail("attn_config.alibi", "be true (posenc reads MPT with ALiBi only)", alibi);
  }
  const std::optional<double> max_bias =
      OptionalNumber(attn_config, "alibi_bias_max", "be a number > 0", kPositive);
  scheme.max_bias = max_bias.value_or(8.0);
  if (!max_bias) scheme.notes.push_back("attn_config.alibi_bias_max absent: 8 (MPT's default)");
  if (scheme.max_bias != 8.0) {
    scheme.notes.push_back(
        "Hugging Face's MptModel ignores alibi_bias_max and always uses 8 "
        "(reference §8, §10.10)");
  }
  return scheme;
}

LearnedPositionScheme ReadLearned(const Node& top, const std::string& model_type,
                                  const Family& family) {
  const bool gpt2_keys = family.learned_keys == LearnedKeys::kGpt2;
  if (family.absolute_positions_only) {
    const std::string kind = OptionalString(top, "position_embedding_type").value_or("absolute");
    if (kind != "absolute") {
      Fail("position_embedding_type", "be \"absolute\"", top.Find("position_embedding_type"));
    }
  }
  LearnedPositionScheme scheme{
      .model_type = model_type,
      .max_positions =
          RequiredInt(top, gpt2_keys ? "n_positions" : "max_position_embeddings", 1, kMaxPositions),
      .dim = RequiredInt(top, gpt2_keys ? "n_embd" : "hidden_size", 1, kMaxHeadDim * kMaxHeads)};
  scheme.offset = family.learned_offset;
  return scheme;
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
RelativeBiasScheme ReadRelativeBias(const Node& top, const std::string& model_type,
                                    const Family& family) {
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
  scheme.bias_in_every_layer = family.bias_in_every_layer;
  return scheme;
}

}  // namespace

PositionScheme ReadPositionScheme(const Node& top, const std::string& model_type) {
  const Family& family = FamilyOf(model_type);
  switch (family.position) {
    case PositionKind::kAlibi:
      return AlibiScheme{.model_type = model_type,
                         .num_heads = RequiredInt(
                             top, FirstKey(top, {"n_head", "num_attention_heads"}), 1, kMaxHeads),
                         .notes = {}};
    case PositionKind::kMptAlibi:
      return ReadMptAlibi(top);
    case PositionKind::kRopeOrAlibi:
      if (const Json* alibi = top.Value("alibi")) {
        if (!alibi->is_boolean()) Fail(top.Key("alibi"), "be true or false", alibi);
        if (alibi->get<bool>()) {
          return AlibiScheme{
              .model_type = model_type,
              .num_heads =
                  RequiredInt(top, FirstKey(top, {"num_attention_heads", "n_head"}), 1, kMaxHeads),
              .notes = {}};
        }
      }
      return ReadRope(top, model_type);
    case PositionKind::kBaichuan: {
      if (!BaichuanUsesRope(top)) {
        return AlibiScheme{.model_type = model_type,
                           .num_heads = RequiredInt(top, "num_attention_heads", 1, kMaxHeads),
                           .notes = {"Baichuan 13B models add ALiBi biases (their remote code; "
                                     "architectures is not BaiChuanForCausalLM and hidden_size is "
                                     "not 4096)"}};
      }
      RopeScheme rope = ReadRope(top, model_type);
      Note(rope,
           "Baichuan 7B models rotate (their remote code; architectures "
           "BaiChuanForCausalLM or hidden_size 4096)");
      return rope;
    }
    case PositionKind::kLearned:
      return ReadLearned(top, model_type, family);
    case PositionKind::kRelativeBias:
      return ReadRelativeBias(top, model_type, family);
    case PositionKind::kNoPositions:
      return NoPositionScheme{model_type};
    case PositionKind::kRope:
      return ReadRope(top, model_type);
    case PositionKind::kRopeIfRopeKeys:
      if (HasRopeKeys(top)) return ReadRope(top, model_type);
      break;
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

}  // namespace posenc::hf_json
