// A KV cache that keeps keys already rotated: rotate once, on append; attend without rotating
// again; move positions exactly when tokens are dropped.
//
// An inference engine keeps each layer's keys and values in a cache and attends each new query
// to all of them. With RoPE, a key's rotation depends only on its own position, so the cache
// stores keys rotated once, when they are appended, and a decode step rotates only its query:
// O(1) rotation work per step instead of O(cache). (posenc::Attention with options.rope rotates
// the keys it is given on every call; it is the right call for a prefill, not for a cache.)
//
// One KvCache is one layer of one sequence: keys [capacity, kv_heads, head_dim] and values
// [capacity, kv_heads, value_dim], in float32 or bfloat16 (T), filled from slot 0, with the
// position of each slot. The layer's scheme decides the rotation: 1-D RoPE of any rope type
// (`rope`), multi-stream RoPE (`mrope`: M-RoPE, positions then come as streams) or none (NoPE,
// ALiBi, ...).
//
// Moving positions (llama.cpp's context shift, StreamingLLM's attention sinks) re-rotates the
// cached keys by the position delta: a rotation by delta * inv_freq with its angle formed exactly,
// in double, then rounded to the storage type up or down with the probability of the distance
// (unbiased, deterministic): each shift adds at most one unit of the storage type's rounding to a
// key, and the errors of many shifts grow as a random walk, not linearly (docs/KV_CACHE.md
// measures the drift after 1, 100 and 10,000 shifts).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"
#include "posenc/storage.h"

namespace posenc {

// What a LongRoPE cache does when its sequence crosses original_max_position_embeddings (L0).
enum class LongRopeCrossing {
  // Phi-3's generate() (Phi3ForCausalLM.prepare_inputs_for_generation, transformers 4.x and 5):
  // when the tokens appended to a cache of at most L0 tokens bring it past L0, the model drops
  // its cache and recomputes the whole sequence, so that every key turns with the long factors.
  // A layer's cache cannot recompute the model, so Append refuses such tokens (posenc::Error
  // saying what to do): Clear(), then append every token's recomputed k and v.
  kRecompute,
  // The model's forward without generate() (a hand-written loop over its cache): the new keys
  // turn with the long factors, the cached ones keep the short factors they were appended with.
  kKeepRotation,
};

struct KvCacheOptions {
  int64_t capacity = 0;        // slots, >= 1
  int64_t kv_heads = 0;        // >= 1
  int64_t head_dim = 0;        // >= 1
  int64_t value_dim = 0;       // 0 means head_dim
  std::optional<Rope> rope;    // keys rotated on append by 1-D RoPE at their positions
  std::optional<MRope> mrope;  // or by multi-stream RoPE (not with rope)
  // LongRoPE (Phi-3): `rope` holds the short factors, long_rope the long ones (the same
  // head_dim, rotary_dim, layout and rotary_offset). As Hugging Face's rotary module does for
  // each forward, an Append (its keys) or an Attend (its queries) whose positions give
  // max + 1 > long_rope_threshold turns with long_rope, else with rope (rope_scaling.h).
  std::optional<Rope> long_rope;
  int64_t long_rope_threshold = 0;  // L0 (original_max_position_embeddings), >= 1 with long_rope
  LongRopeCrossing crossing = LongRopeCrossing::kRecompute;
};

// T is float or BFloat16: the storage of keys and values (bfloat16 keys are rotated in float32
// and rounded once, as ApplyRope does).
template <typename T>
class KvCacheBatch;

template <typename T>
class KvCache {
 public:
  // Throws posenc::Error naming the field, value and rule; allocates capacity slots up front.
  explicit KvCache(KvCacheOptions options);

  const KvCacheOptions& options() const { return options_; }
  int64_t size() const { return size_; }
  int64_t capacity() const { return options_.capacity; }

  // Appends n tokens: k [n, kv_heads, head_dim] is rotated at `positions` (n entries, each in
  // [0, kMaxPosition]) into the next n slots, v [n, kv_heads, value_dim] is copied. For an mrope
  // cache the rotation reads `streams` (mrope->num_streams x n) and `positions` is the token
  // order the mask follows. Everything is validated before the cache changes: past capacity,
  // shapes, positions, a LongRoPE crossing that kRecompute refuses; the cache is then untouched.
  void Append(std::span<const int64_t> positions, Heads<const T> k, Heads<const T> v);
  void Append(std::span<const int64_t> positions, const PositionStreams& streams, Heads<const T> k,
              Heads<const T> v);

  // The cached keys (rotated), values and positions of slots [0, size()).
  Heads<const T> Keys() const;
  Heads<const T> Values() const;
  std::span<const int64_t> Positions() const;

  // Attention of q [n, heads, head_dim] at query_pos (and, for mrope, query streams) against every
  // cached token: q is rotated (a copy), the keys are not; causal, window, chunk, ALiBi and the
  // other options apply to query_pos against Positions(). options.rope and options.mrope must be
  // unset (the cache's own rotation applies). out [n, heads, value_dim] in float32.
  void Attend(const AttentionOptions& options, Heads<const T> q, std::span<const int64_t> query_pos,
              Heads<float> out) const;
  void Attend(const AttentionOptions& options, Heads<const T> q, std::span<const int64_t> query_pos,
              const PositionStreams& query_streams, Heads<float> out) const;

  // Empties the cache (capacity and options kept): before appending a recomputed sequence.
  void Clear();

  // llama.cpp's context shift (llama_kv_cache_seq_rm + seq_add): keeps the first n_keep tokens,
  // drops the next n_discard, moves the rest down to slot n_keep and their positions by
  // -n_discard, re-rotating their keys by the delta (1-D RoPE; for mrope every stream moves).
  // n_keep >= 0, n_discard >= 1, n_keep + n_discard <= size(); the moved positions stay >= 0.
  // Moving positions is refused for a LongRoPE cache (long_rope set): its keys may turn with
  // either factor set, and the model's code never moves them.
  void ContextShift(int64_t n_keep, int64_t n_discard);

  // Drops slots [begin, end) and moves the slots after them down, keeping their positions and
  // keys as they are (StreamingLLM's rolling window with positions as in the text).
  void Remove(int64_t begin, int64_t end);

  // Moves the positions of slots [begin, end) by delta, re-rotating their keys by it (exactly as
  // ContextShift does); the new positions must stay in [0, kMaxPosition].
  void ShiftPositions(int64_t begin, int64_t end, int64_t delta);

 private:
  // Append's checks alone, the same errors, nothing written: KvCacheBatch checks every row before
  // the first is written.
  template <typename>
  friend class KvCacheBatch;
  void ValidateAppend(std::span<const int64_t> positions, const PositionStreams& streams,
                      Heads<const T> k, Heads<const T> v) const;

  // The rotation of a call at these positions: long_rope past the threshold, else rope/mrope.
  const Rope& RotationAt(std::span<const int64_t> positions) const;
  void RefuseLongRopeShift() const;

  KvCacheOptions options_;
  int64_t size_ = 0;
  std::vector<T> keys_, values_;
  std::vector<int64_t> positions_;
  std::vector<int64_t> streams_;  // mrope: [num_streams, capacity]
  uint64_t shifts_ = 0;           // ShiftPositions calls so far: seeds the unbiased rounding
};

extern template class KvCache<float>;
extern template class KvCache<BFloat16>;

// A batch of sequences of different lengths, for batched generation: row b is a KvCache of its
// own (its size, positions and LongRoPE regime), built from the same options. A step's inputs
// are [batch * n, heads, dim] with token t of row b at b * n + t, positions [batch * n], and a
// mask [batch * n] (nonzero: a real token) whose ones in each row form one run: left padding as
// Hugging Face's batched generate() pads a prompt, right padding, or none at all (the row takes
// no part in the step). Pads never enter a cache; their positions are not read.
template <typename T>
class KvCacheBatch {
 public:
  // batch in [1, 2^20]; options as KvCache's (not mrope); capacity is per row.
  KvCacheBatch(int64_t batch, const KvCacheOptions& options);

  int64_t batch() const { return static_cast<int64_t>(rows_.size()); }
  const KvCache<T>& Row(int64_t b) const;
  KvCache<T>& Row(int64_t b);  // per-row Clear(), Remove(), context shifts

  // Appends each row's run of real tokens to that row's cache. Every row is validated (shapes,
  // mask, capacity, positions, LongRoPE crossings; errors name the row) before any row changes.
  void Append(std::span<const int64_t> positions, std::span<const uint8_t> mask, Heads<const T> k,
              Heads<const T> v);

  // Each row's real queries against that row's cache (KvCache::Attend: the existing attention
  // over the row's keys and positions); out [batch * n, heads, value_dim], zero at pads.
  void Attend(const AttentionOptions& options, Heads<const T> q, std::span<const int64_t> query_pos,
              std::span<const uint8_t> mask, Heads<float> out) const;

 private:
  std::vector<KvCache<T>> rows_;
};

extern template class KvCacheBatch<float>;
extern template class KvCacheBatch<BFloat16>;

// Attention sinks (StreamingLLM, Xiao et al. 2023): keep the first `sinks` tokens and a rolling
// window of the last `window` tokens.
enum class SinkPositions {
  kText,   // keys keep the positions they had in the text
  kCache,  // positions are slots in the cache (StreamingLLM's choice): a roll re-rotates the
           // window's keys down by the number of tokens dropped
};

// Makes room for `incoming` tokens in a cache managed as sinks + window: when size() + incoming
// would exceed sinks + window, drops the oldest non-sink tokens (as few as needed) and, in kCache
// mode, moves the rest down (ContextShift(sinks, dropped)). Returns the number dropped.
// sinks >= 0, window >= 1, incoming in [1, window], sinks + window <= capacity.
template <typename T>
int64_t RollSinkWindow(KvCache<T>& cache, int64_t sinks, int64_t window, int64_t incoming,
                       SinkPositions mode);

}  // namespace posenc
