#include "arms.h"

#include <cmath>

namespace posenc::study {

Settings Settings::Full() { return Settings{}; }

Settings Settings::Quick() {
  Settings s;
  s.quick = true;
  s.shape.d_model = 32;
  s.shape.heads = 2;
  s.train_length = 32;
  s.shape.learned_rows = 16 * 32;
  s.batch = 8;
  s.steps = 30;
  s.finetune_steps = 10;
  s.eval_chars = 1024;
  s.eval_batch_tokens = 2048;
  s.log_every = 10;
  s.checkpoint_every = 20;
  s.self_extend_window = 16;
  s.shape.t5_max_distance = 32;
  s.shape.xpos_scale_base = 16.0;
  s.shape.fire_threshold = 32.0;
  return s;
}

std::string StretchName(Stretch stretch) {
  switch (stretch) {
    case Stretch::kNone:
      return "none";
    case Stretch::kPi:
      return "pi";
    case Stretch::kNtk:
      return "ntk";
    case Stretch::kDynamicNtk:
      return "dynamic";
    case Stretch::kYarn:
      return "yarn";
  }
  return "?";
}

std::vector<Run> Runs(const Settings& s) {
  std::vector<Run> runs;
  using M = PositionMethod;
  const PositionMethod base_methods[] = {M::kRope, M::kAlibi,     M::kSinusoidal, M::kLearned,
                                         M::kNone, M::kT5,        M::kXpos,       M::kKerple,
                                         M::kFire, M::kRandomized};
  for (uint64_t seed : s.seeds) {
    for (PositionMethod m : base_methods) {
      runs.push_back({.name = MethodName(m) + "-s" + std::to_string(seed),
                      .method = m,
                      .seed = seed,
                      .length = s.train_length,
                      .batch = s.batch,
                      .steps = s.steps,
                      .learning_rate = s.learning_rate});
    }
  }
  // Fine-tunes at finetune_factor x the training length, as many tokens per step as the base.
  const int64_t ft_length = s.finetune_factor * s.train_length;
  const int64_t ft_batch = std::max<int64_t>(1, s.batch / s.finetune_factor);
  for (uint64_t seed : s.seeds) {
    for (Stretch st : {Stretch::kPi, Stretch::kYarn}) {
      runs.push_back({.name = "rope-" + StretchName(st) + "-ft-s" + std::to_string(seed),
                      .method = PositionMethod::kRope,
                      .seed = seed,
                      .stretch = st,
                      .init_from = "rope-s" + std::to_string(seed),
                      .length = ft_length,
                      .batch = ft_batch,
                      .steps = s.finetune_steps,
                      .learning_rate = s.finetune_learning_rate,
                      .warmup_and_decay = false});
    }
  }
  return runs;
}

std::vector<Arm> Arms() {
  using M = PositionMethod;
  using S = Stretch;
  return {
      {"Learned absolute", "learned", M::kLearned, S::kNone, "learned", true},
      {"Sinusoidal", "sinusoidal", M::kSinusoidal, S::kNone, "sinusoidal", true},
      {"RoPE", "rope", M::kRope, S::kNone, "rope", true},
      {"ALiBi", "alibi", M::kAlibi, S::kNone, "alibi", true},
      {"NoPE (causal mask only)", "nope", M::kNone, S::kNone, "nope", true},
      {"T5 relative bias", "t5", M::kT5, S::kNone, "t5", true},
      {"xPos", "xpos", M::kXpos, S::kNone, "xpos", true},
      {"KERPLE (log)", "kerple", M::kKerple, S::kNone, "kerple", true},
      {"FIRE (composed attention)", "fire", M::kFire, S::kNone, "fire", true},
      {"RoPE, randomized positions", "rope-randomized", M::kRandomized, S::kNone, "rope-randomized",
       true},
      {"RoPE + PI x4 (zero-shot)", "rope-pi", M::kRope, S::kPi, "rope"},
      {"RoPE + NTK-aware x4 (zero-shot)", "rope-ntk", M::kRope, S::kNtk, "rope"},
      {"RoPE + dynamic NTK (zero-shot)", "rope-dynamic", M::kRope, S::kDynamicNtk, "rope"},
      {"RoPE + YaRN x4 (zero-shot)", "rope-yarn", M::kRope, S::kYarn, "rope"},
      {"RoPE + PI x4, fine-tuned at 4x", "rope-pi-ft", M::kRope, S::kPi, "rope-pi-ft"},
      {"RoPE + YaRN x4, fine-tuned at 4x", "rope-yarn-ft", M::kRope, S::kYarn, "rope-yarn-ft"},
      {"RoPE + Self-Extend (zero-shot)", "rope-self-extend", M::kRope, S::kNone, "rope", false,
       Reading::kSelfExtend},
      {"RoPE + dual chunk attention (zero-shot)", "rope-dual-chunk", M::kRope, S::kNone, "rope",
       false, Reading::kDualChunk},
      {"RoPE + sinks, cache positions (zero-shot)", "rope-sinks", M::kRope, S::kNone, "rope", false,
       Reading::kSinksCache},
      {"RoPE + sinks, text positions (zero-shot)", "rope-sinks-text", M::kRope, S::kNone, "rope",
       false, Reading::kSinksText},
  };
}

YarnScaling YarnScalingFor(const Settings& s) {
  YarnScaling yarn;
  yarn.factor = static_cast<double>(s.finetune_factor);
  yarn.original_max_positions = s.train_length;
  yarn.beta_fast = s.yarn_beta_fast;
  yarn.beta_slow = s.yarn_beta_slow;
  return yarn;
}

SelfExtend SelfExtendFor(const Settings& s, int64_t length) {
  const int64_t w = s.self_extend_window, room = s.train_length - w;
  SelfExtend se{.group_size = 1, .neighbor_window = w};
  while ((room * se.group_size) + w < length) ++se.group_size;
  return se;
}

DualChunk DualChunkFor(const Settings& s) {
  return {.chunk_size = 3 * s.train_length / 4, .local_size = s.train_length / 16};
}

LongContext LongContextFor(const Settings& s, Reading reading, int64_t length) {
  LongContext c;
  switch (reading) {
    case Reading::kFull:
      break;
    case Reading::kSelfExtend:
      c.kind = LongContext::Kind::kSelfExtend;
      c.self_extend = SelfExtendFor(s, length);
      break;
    case Reading::kDualChunk:
      c.kind = LongContext::Kind::kDualChunk;
      c.dual_chunk = DualChunkFor(s);
      break;
    case Reading::kSinksCache:
    case Reading::kSinksText:
      c.kind = LongContext::Kind::kSinks;
      c.sinks = s.sink_tokens;
      c.cache = s.train_length;
      c.positions = reading == Reading::kSinksCache ? SinkPositions::kCache : SinkPositions::kText;
      break;
  }
  return c;
}

Rope RopeFor(const Settings& s, Stretch stretch, int64_t length) {
  const int64_t dim = s.head_dim();
  const double factor = static_cast<double>(s.finetune_factor);
  double base = s.rope_base;
  RopeScaling scaling = NoScaling{};
  switch (stretch) {
    case Stretch::kNone:
      break;
    case Stretch::kPi:
      scaling = LinearScaling{.factor = factor};
      break;
    // NTK-aware (bloc97): the base grows by s^(d / (d - 2)), so the slowest pair is divided by
    // exactly s while the fastest is left almost alone.
    case Stretch::kNtk:
      base *= std::pow(factor, static_cast<double>(dim) / static_cast<double>(dim - 2));
      break;
    // Hugging Face's dynamic rule with factor 1: at a window of L > L0 positions it is NTK-aware
    // with s = L / L0, and the plain frequencies up to L0.
    case Stretch::kDynamicNtk:
      scaling = DynamicNtkScaling{.factor = 1.0, .max_positions = s.train_length};
      break;
    case Stretch::kYarn:
      scaling = YarnScalingFor(s);
      break;
  }
  const RopeFrequencies f = ComputeRopeFrequencies(
      base, dim, scaling, {.precision = RopePrecision::kExact, .seq_len = length});
  Rope rope = Rope::Default(dim, base);
  rope.inv_freq = f.inv_freq;
  rope.attention_factor = f.attention_factor;
  return rope;
}

}  // namespace posenc::study
