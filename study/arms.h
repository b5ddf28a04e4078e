// What the study trains and evaluates: its settings (full and quick), the trained runs, and the
// arms (a trained run read with one RoPE variant, or with its own position method).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "long_context.h"
#include "model.h"
#include "posenc/rope_scaling.h"

namespace posenc::study {

struct Settings {
  bool quick = false;
  ModelShape shape;
  int64_t train_length = 128;
  int64_t batch = 32;
  int64_t steps = 800;
  double learning_rate = 2e-3;
  int64_t finetune_factor = 4;  // fine-tunes train at finetune_factor * train_length
  int64_t finetune_steps = 100;
  double finetune_learning_rate = 5e-4;
  std::vector<uint64_t> seeds = {1, 2};
  std::vector<int64_t> multiples = {1, 2, 4, 8, 16};  // evaluation lengths / train_length
  int64_t eval_chars = 16384;  // held-out characters scored per (length, protocol)
  int64_t eval_batch_tokens = 8192;
  int64_t log_every = 25;
  int64_t checkpoint_every = 100;    // steps; and at least every checkpoint_seconds of training
  double checkpoint_seconds = 60.0;  // 0: after every step
  double rope_base = 10000.0;
  // YaRN's ramp for this model (see YarnScalingFor): pairs turning more than beta_fast times
  // over the training length are kept, those turning less than beta_slow times are divided.
  double yarn_beta_fast = 8.0;
  double yarn_beta_slow = 1.0;
  // Self-Extend's neighbour window W (half the training length); its group size G is chosen per
  // evaluation length by the authors' rule (SelfExtendFor).
  int64_t self_extend_window = 64;
  // Attention sinks: the first sink_tokens tokens stay, and the cache holds train_length tokens in
  // all (StreamingLLM's 4 sinks; a window the model was trained on).
  int64_t sink_tokens = 4;
  // Stop (as Ctrl-C would) after this many training steps in this process; 0: never. Lets a test
  // interrupt a run at a known point and check that resuming it changes nothing.
  int64_t stop_after_steps = 0;

  static Settings Full();
  static Settings Quick();
  int64_t head_dim() const { return shape.d_model / shape.heads; }
  // Randomized positions are drawn from [0, this): the longest evaluation length, 16x.
  int64_t random_position_range() const { return train_length * multiples.back(); }
};

// How a RoPE model's frequencies are stretched at evaluation (or during a fine-tune).
enum class Stretch { kNone, kPi, kNtk, kDynamicNtk, kYarn };
std::string StretchName(Stretch stretch);

// A model that is trained: from scratch (base) or fine-tuned from a base run's final weights.
struct Run {
  std::string name;  // e.g. "rope-s1", "rope-yarn-ft-s2"; the folder under runs/
  PositionMethod method;
  uint64_t seed;
  Stretch stretch = Stretch::kNone;      // the frequencies it trains with
  std::optional<std::string> init_from;  // base run whose weights a fine-tune starts from
  int64_t length, batch, steps;
  double learning_rate;
  bool warmup_and_decay = true;  // base runs: warm-up then cosine; fine-tunes: constant
};

// How an arm's attention reads a window (long_context.h): all of it, or through a cache.
enum class Reading { kFull, kSelfExtend, kDualChunk, kSinksCache, kSinksText };

// A row of the results table: a run read with a stretch (zero-shot variants reuse base runs).
struct Arm {
  std::string label;  // e.g. "RoPE + YaRN (zero-shot)"
  std::string key;    // e.g. "rope-yarn"; file names and chart keys
  PositionMethod method;
  Stretch stretch;
  std::string run_prefix;  // run name without "-s<seed>"
  bool base = false;       // a base arm (trained from scratch)
  Reading reading = Reading::kFull;
};

std::vector<Run> Runs(const Settings& settings);
std::vector<Arm> Arms();

// The Rope a RoPE model uses with `stretch` when its window holds `length` positions.
Rope RopeFor(const Settings& settings, Stretch stretch, int64_t length);
YarnScaling YarnScalingFor(const Settings& settings);

// Self-Extend for a window of `length` characters: W = self_extend_window and the smallest G whose
// extended window, (L0 - W) G + W, holds `length` (the rule of the authors' README, L0 the
// training length); G = 1 (plain RoPE) up to L0.
SelfExtend SelfExtendFor(const Settings& settings, int64_t length);
// Dual chunk attention for the study's training length L0, by the authors' own rule (ChunkLlama's
// replace_with_chunkllama, as Self-Extend's W and G follow its authors' README): chunk_size =
// 3 L0 / 4 and local_size = L0 / 16, so chunks hold chunk_size - local_size positions and the
// largest distance any query scores, chunk_size, stays inside what the model trained on (below
// L0). No length scaling (original_max_position_embeddings 0), as in the paper; Qwen2.5-1M's
// config (chunk_size = M, local_size = M / 32) adds vLLM's and scores up to M itself. The same
// at every evaluation length: unlike Self-Extend's G, nothing in it depends on the input length.
DualChunk DualChunkFor(const Settings& settings);
// The attention an arm reads a window of `length` characters with.
LongContext LongContextFor(const Settings& settings, Reading reading, int64_t length);

}  // namespace posenc::study
