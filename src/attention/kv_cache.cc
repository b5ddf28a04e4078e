#include "posenc/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/error.h"
#include "posenc/positions.h"

namespace posenc {
namespace {

constexpr std::string_view kFn = "kv_cache";

// The largest cache one object may hold, in elements of keys or values: 2^34 (64 GiB of float32),
// so that sizes are checked before anything is allocated.
constexpr int64_t kMaxElements = int64_t{1} << 34;

std::string Equal(std::string_view what, int64_t value) {
  return "equal " + std::string(what) + " (" + std::to_string(value) + ")";
}

// The rotation that moves a cached key by `delta` positions: R(delta * inv_freq) without the
// attention factor, which the key already carries. Forward for delta > 0, the transpose (the
// inverse rotation) at |delta| for delta < 0: the angle is |delta| * inv_freq formed exactly, as
// for any position.
Rope DeltaRotation(const KvCacheOptions& options) {
  Rope rope = options.rope ? *options.rope : options.mrope->rope;
  rope.attention_factor = 1.0;
  return rope;
}

bool Rotates(const KvCacheOptions& options) { return options.rope || options.mrope; }

// SplitMix64 (Steele, Lea and Flood 2014): a well-mixed 64-bit hash of (shift, element).
uint64_t Mix(uint64_t shift, uint64_t element) {
  uint64_t z = shift * 0x9E3779B97F4A7C15ull + element + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The neighbour of the finite nonzero-or-zero value n in T's grid on the side of v.
float NeighbourToward(float n, double v) {
  return std::nextafter(
      n, v > n ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
}
BFloat16 NeighbourToward(BFloat16 n, double v) {
  const double nv = n.ToFloat();
  if (nv == 0) return BFloat16{static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | 1)};
  // Same sign (n is v rounded): one more or one less in magnitude.
  return BFloat16{static_cast<uint16_t>(std::abs(v) > std::abs(nv) ? n.bits + 1 : n.bits - 1)};
}

// v rounded to T up or down with the probability of its distance to each (stochastic rounding):
// the expected result is v, so errors of repeated roundings do not add up.
template <typename T>
T RoundUnbiased(double v, uint64_t shift, uint64_t element) {
  const T nearest = FromFloat<T>(static_cast<float>(v));
  const double nv = ToFloat(nearest);
  if (nv == v || !std::isfinite(nv)) return nearest;
  const T other = NeighbourToward(nearest, v);
  const double ov = ToFloat(other);
  const double p = std::abs(v - nv) / std::abs(ov - nv);  // < 1/2 when rounded to nearest
  const double u = static_cast<double>(Mix(shift, element) >> 11) * 0x1.0p-53;
  return u < p ? other : nearest;
}

}  // namespace

template <typename T>
KvCache<T>::KvCache(KvCacheOptions options) : options_(std::move(options)) {
  KvCacheOptions& o = options_;
  if (o.value_dim == 0) o.value_dim = o.head_dim;
  Require(o.capacity >= 1, kFn, "capacity", "be >= 1", o.capacity);
  Require(o.kv_heads >= 1, kFn, "kv_heads", "be >= 1", o.kv_heads);
  Require(o.head_dim >= 1, kFn, "head_dim", "be >= 1", o.head_dim);
  Require(o.value_dim >= 1, kFn, "value_dim", "be >= 1 (0 means head_dim)", o.value_dim);
  const int64_t row = std::max(o.head_dim, o.value_dim) * o.kv_heads;
  Require(row <= kMaxElements && o.capacity <= kMaxElements / row, kFn, "capacity",
          "keep capacity * kv_heads * max(head_dim, value_dim) <= 2^34 elements", o.capacity);
  Require(!(o.rope && o.mrope), kFn, "mrope", "not be given with rope (each is a rotation)",
          "both");
  if (o.rope) {
    o.rope->Validate();
    Require(o.rope->head_dim == o.head_dim, kFn, "rope.head_dim", Equal("head_dim", o.head_dim),
            o.rope->head_dim);
  }
  if (o.mrope) {
    o.mrope->Validate();
    Require(o.mrope->rope.head_dim == o.head_dim, kFn, "mrope.rope.head_dim",
            Equal("head_dim", o.head_dim), o.mrope->rope.head_dim);
    streams_.resize(static_cast<size_t>(o.mrope->num_streams * o.capacity));
  }
  Require(
      o.crossing == LongRopeCrossing::kRecompute || o.crossing == LongRopeCrossing::kKeepRotation,
      kFn, "crossing", "be kRecompute or kKeepRotation", static_cast<int>(o.crossing));
  if (o.long_rope) {
    Require(o.rope.has_value(), kFn, "long_rope",
            "come with rope (LongRoPE's short factors; not with mrope)", "no rope");
    o.long_rope->Validate();
    const Rope& r = *o.rope;
    const Rope& l = *o.long_rope;
    Require(l.head_dim == r.head_dim && l.rotary_dim == r.rotary_dim && l.layout == r.layout &&
                l.rotary_offset == r.rotary_offset,
            kFn, "long_rope",
            "rotate the same features as rope (head_dim, rotary_dim, layout, "
            "rotary_offset)",
            "different");
    Require(o.long_rope_threshold >= 1, kFn, "long_rope_threshold",
            "be >= 1 (original_max_position_embeddings)", o.long_rope_threshold);
  }
  keys_.resize(static_cast<size_t>(o.capacity * o.kv_heads * o.head_dim));
  values_.resize(static_cast<size_t>(o.capacity * o.kv_heads * o.value_dim));
  positions_.resize(static_cast<size_t>(o.capacity));
}

template <typename T>
const Rope& KvCache<T>::RotationAt(std::span<const int64_t> positions) const {
  if (options_.long_rope && !positions.empty() &&
      *std::max_element(positions.begin(), positions.end()) >= options_.long_rope_threshold) {
    return *options_.long_rope;
  }
  return *options_.rope;
}

template <typename T>
void KvCache<T>::RefuseLongRopeShift() const {
  Require(!options_.long_rope, kFn, "long_rope",
          "be unset to move positions (LongRoPE keys turn with the short or the long factors, "
          "and the model's code never moves them)",
          "set");
}

template <typename T>
void KvCache<T>::Clear() {
  size_ = 0;
}

template <typename T>
Heads<const T> KvCache<T>::Keys() const {
  return Heads<const T>::Dense(keys_.data(), size_, options_.kv_heads, options_.head_dim);
}

template <typename T>
Heads<const T> KvCache<T>::Values() const {
  return Heads<const T>::Dense(values_.data(), size_, options_.kv_heads, options_.value_dim);
}

template <typename T>
std::span<const int64_t> KvCache<T>::Positions() const {
  return {positions_.data(), static_cast<size_t>(size_)};
}

template <typename T>
void KvCache<T>::Append(std::span<const int64_t> positions, Heads<const T> k, Heads<const T> v) {
  Require(!options_.mrope, kFn, "streams",
          "be given for a cache with mrope (Append(positions, streams, k, v))", "none");
  Append(positions, PositionStreams{}, k, v);
}

template <typename T>
void KvCache<T>::ValidateAppend(std::span<const int64_t> positions, const PositionStreams& streams,
                                Heads<const T> k, Heads<const T> v) const {
  const KvCacheOptions& o = options_;
  k.Validate(kFn, "k");
  v.Validate(kFn, "v");
  Require(k.num_heads == o.kv_heads, kFn, "k.num_heads", Equal("kv_heads", o.kv_heads),
          k.num_heads);
  Require(k.head_dim == o.head_dim, kFn, "k.head_dim", Equal("head_dim", o.head_dim), k.head_dim);
  Require(v.tokens == k.tokens, kFn, "v.tokens", Equal("k.tokens", k.tokens), v.tokens);
  Require(v.num_heads == o.kv_heads, kFn, "v.num_heads", Equal("kv_heads", o.kv_heads),
          v.num_heads);
  Require(v.head_dim == o.value_dim, kFn, "v.head_dim", Equal("value_dim", o.value_dim),
          v.head_dim);
  const int64_t n = k.tokens;
  if (n > o.capacity - size_) {
    Require(false, kFn, "k.tokens",
            "fit the free slots (capacity " + std::to_string(o.capacity) + " - size " +
                std::to_string(size_) + " = " + std::to_string(o.capacity - size_) + ")",
            n);
  }
  ValidatePositions(kFn, positions, n);
  if (o.long_rope && o.crossing == LongRopeCrossing::kRecompute && size_ > 0 &&
      size_ <= o.long_rope_threshold && n > o.long_rope_threshold - size_) {
    const std::string l0 = std::to_string(o.long_rope_threshold);
    Require(false, kFn, "k.tokens",
            "keep a LongRoPE cache of size " + std::to_string(size_) +
                " within "
                "original_max_position_embeddings (" +
                l0 +
                "): there Phi-3's generate() drops its "
                "cache and recomputes the whole sequence with the long factors; Clear() and append "
                "every token's recomputed k and v (crossing kKeepRotation keeps the cached keys as "
                "a plain forward does)",
            n);
  }
  if (o.mrope) streams.Validate(kFn, "streams", o.mrope->num_streams, n);
}

template <typename T>
void KvCache<T>::Append(std::span<const int64_t> positions, const PositionStreams& streams,
                        Heads<const T> k, Heads<const T> v) {
  const KvCacheOptions& o = options_;
  // Everything is checked before the cache changes.
  ValidateAppend(positions, streams, k, v);
  const int64_t n = k.tokens;
  if (n == 0) return;
  const Heads<T> key_slots =
      Heads<T>::Dense(keys_.data() + size_ * o.kv_heads * o.head_dim, n, o.kv_heads, o.head_dim);
  if (o.rope) {
    ApplyRope(RotationAt(positions), positions, k, key_slots, RopeDirection::kForward);
  } else if (o.mrope) {
    ApplyMRope<T>(*o.mrope, streams, k, key_slots, RopeDirection::kForward);
    for (int64_t s = 0; s < o.mrope->num_streams; ++s) {
      for (int64_t t = 0; t < n; ++t) streams_[s * o.capacity + size_ + t] = streams.At(s, t);
    }
  } else {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < o.kv_heads; ++h) {
        std::memcpy(key_slots.Row(t, h), k.Row(t, h), sizeof(T) * o.head_dim);
      }
    }
  }
  T* value_slots = values_.data() + size_ * o.kv_heads * o.value_dim;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < o.kv_heads; ++h) {
      std::memcpy(value_slots + (t * o.kv_heads + h) * o.value_dim, v.Row(t, h),
                  sizeof(T) * o.value_dim);
    }
  }
  std::copy(positions.begin(), positions.end(), positions_.begin() + size_);
  size_ += n;
}

template <typename T>
void KvCache<T>::Attend(const AttentionOptions& options, Heads<const T> q,
                        std::span<const int64_t> query_pos, Heads<float> out) const {
  Require(!options_.mrope, kFn, "query_streams",
          "be given for a cache with mrope (Attend(options, q, query_pos, query_streams, out))",
          "none");
  Attend(options, q, query_pos, PositionStreams{}, out);
}

template <typename T>
void KvCache<T>::Attend(const AttentionOptions& options, Heads<const T> q,
                        std::span<const int64_t> query_pos, const PositionStreams& query_streams,
                        Heads<float> out) const {
  Require(!options.rope && !options.mrope, kFn, "options.rope",
          "be unset: the cache rotates with its own scheme, and its keys are rotated already",
          "set");
  q.Validate(kFn, "q");
  Require(q.head_dim == options_.head_dim, kFn, "q.head_dim", Equal("head_dim", options_.head_dim),
          q.head_dim);
  if (options_.mrope) {
    query_streams.Validate(kFn, "query_streams", options_.mrope->num_streams, q.tokens);
  }
  // The query rotated into a dense copy (validated by the op itself, before anything is written).
  std::vector<T> rotated;
  Heads<const T> q_rotated = q;
  if (Rotates(options_)) {
    ValidatePositions(kFn, query_pos, q.tokens, "query_pos");
    rotated.resize(static_cast<size_t>(q.tokens * q.num_heads * q.head_dim));
    const Heads<T> dense = Heads<T>::Dense(rotated.data(), q.tokens, q.num_heads, q.head_dim);
    if (options_.rope) {
      ApplyRope(RotationAt(query_pos), query_pos, q, dense, RopeDirection::kForward);
    } else {
      ApplyMRope<T>(*options_.mrope, query_streams, q, dense, RopeDirection::kForward);
    }
    q_rotated = dense;
  }
  Attention(options, q_rotated, Keys(), Values(), query_pos, Positions(), out);
}

template <typename T>
void KvCache<T>::ShiftPositions(int64_t begin, int64_t end, int64_t delta) {
  RefuseLongRopeShift();
  Require(begin >= 0 && begin <= size_, kFn, "begin",
          "be in [0, size = " + std::to_string(size_) + "]", begin);
  Require(end >= begin && end <= size_, kFn, "end",
          "be in [begin = " + std::to_string(begin) + ", size = " + std::to_string(size_) + "]",
          end);
  Require(delta >= -kMaxPosition && delta <= kMaxPosition, kFn, "delta", "be in [-2^32, 2^32]",
          delta);
  const int64_t streams = options_.mrope ? options_.mrope->num_streams : 0;
  // Messages are built only on failure.
  const auto in_range = [](int64_t p) { return p >= 0 && p <= kMaxPosition; };
  for (int64_t i = begin; i < end; ++i) {
    if (!in_range(positions_[i] + delta)) {
      ValidatePosition(kFn, "positions[" + std::to_string(i) + "] + delta", positions_[i] + delta);
    }
    for (int64_t s = 0; s < streams; ++s) {
      const int64_t p = streams_[s * options_.capacity + i] + delta;
      if (!in_range(p)) {
        ValidatePosition(
            kFn, "streams[" + std::to_string(s) + "][" + std::to_string(i) + "] + delta", p);
      }
    }
  }
  if (begin == end || delta == 0) return;
  for (int64_t i = begin; i < end; ++i) {
    positions_[i] += delta;
    for (int64_t s = 0; s < streams; ++s) streams_[s * options_.capacity + i] += delta;
  }
  if (!Rotates(options_)) return;
  // In double, then rounded to T without bias. The SIMD kernel's float32 cos and sin would turn
  // every key by the same slightly wrong angle on every shift, and even a double rotation rounded
  // to nearest is biased for the slow pairs, which move by a nearly constant fraction of an ulp
  // per shift, so that their rounding errors add up linearly. Rounding up or down with the
  // probability of the distance (from a hash of the shift count and the element: deterministic)
  // is unbiased, so the error grows as a random walk (docs/KV_CACHE.md). A shift is rare next to
  // the decode steps between shifts.
  const Rope rotation = DeltaRotation(options_);
  const RopeDirection direction = delta > 0 ? RopeDirection::kForward : RopeDirection::kInverse;
  const int64_t row = options_.kv_heads * options_.head_dim;
  constexpr int64_t kChunk = 256;  // slots per pass: a bounded double work buffer
  std::vector<double> work(static_cast<size_t>(std::min(end - begin, kChunk) * row));
  for (int64_t first = begin; first < end; first += kChunk) {
    const int64_t n = std::min(kChunk, end - first);
    T* keys = keys_.data() + first * row;
    for (int64_t j = 0; j < n * row; ++j) work[j] = ToFloat(keys[j]);
    const std::vector<int64_t> step(static_cast<size_t>(n), delta > 0 ? delta : -delta);
    ApplyRope(rotation, step,
              Heads<double>::Dense(work.data(), n, options_.kv_heads, options_.head_dim),
              direction);
    for (int64_t j = 0; j < n * row; ++j) {
      keys[j] = RoundUnbiased<T>(work[j], shifts_, static_cast<uint64_t>(first * row + j));
    }
  }
  ++shifts_;
}

template <typename T>
void KvCache<T>::Remove(int64_t begin, int64_t end) {
  Require(begin >= 0 && begin <= size_, kFn, "begin",
          "be in [0, size = " + std::to_string(size_) + "]", begin);
  Require(end >= begin && end <= size_, kFn, "end",
          "be in [begin = " + std::to_string(begin) + ", size = " + std::to_string(size_) + "]",
          end);
  const int64_t removed = end - begin, moved = size_ - end;
  const int64_t key_row = options_.kv_heads * options_.head_dim;
  const int64_t value_row = options_.kv_heads * options_.value_dim;
  std::memmove(keys_.data() + begin * key_row, keys_.data() + end * key_row,
               sizeof(T) * moved * key_row);
  std::memmove(values_.data() + begin * value_row, values_.data() + end * value_row,
               sizeof(T) * moved * value_row);
  std::copy(positions_.begin() + end, positions_.begin() + size_, positions_.begin() + begin);
  const int64_t streams = options_.mrope ? options_.mrope->num_streams : 0;
  for (int64_t s = 0; s < streams; ++s) {
    int64_t* stream = streams_.data() + s * options_.capacity;
    std::copy(stream + end, stream + size_, stream + begin);
  }
  size_ -= removed;
}

template <typename T>
void KvCache<T>::ContextShift(int64_t n_keep, int64_t n_discard) {
  RefuseLongRopeShift();  // before Remove, so that nothing moves
  Require(n_keep >= 0, kFn, "n_keep", "be >= 0", n_keep);
  Require(n_discard >= 1, kFn, "n_discard", "be >= 1", n_discard);
  if (n_discard > size_ - n_keep) {
    Require(false, kFn, "n_keep + n_discard", "be <= size (" + std::to_string(size_) + ")",
            n_keep + n_discard);
  }
  // The moved tokens' positions must stay >= 0: checked before anything moves.
  const int64_t streams = options_.mrope ? options_.mrope->num_streams : 0;
  for (int64_t i = n_keep + n_discard; i < size_; ++i) {
    if (positions_[i] < n_discard) {
      ValidatePosition(kFn, "positions[" + std::to_string(i) + "] - n_discard",
                       positions_[i] - n_discard);
    }
    for (int64_t s = 0; s < streams; ++s) {
      if (streams_[s * options_.capacity + i] < n_discard) {
        ValidatePosition(
            kFn, "streams[" + std::to_string(s) + "][" + std::to_string(i) + "] - n_discard",
            streams_[s * options_.capacity + i] - n_discard);
      }
    }
  }
  Remove(n_keep, n_keep + n_discard);
  ShiftPositions(n_keep, size_, -n_discard);
}

template <typename T>
int64_t RollSinkWindow(KvCache<T>& cache, int64_t sinks, int64_t window, int64_t incoming,
                       SinkPositions mode) {
  constexpr std::string_view kRoll = "sink_window";
  Require(sinks >= 0, kRoll, "sinks", "be >= 0", sinks);
  Require(window >= 1, kRoll, "window", "be >= 1", window);
  Require(sinks <= cache.capacity() - window, kRoll, "sinks + window",
          "be <= capacity (" + std::to_string(cache.capacity()) + ")", sinks + window);
  Require(incoming >= 1 && incoming <= window, kRoll, "incoming",
          "be in [1, window = " + std::to_string(window) + "]", incoming);
  Require(mode == SinkPositions::kText || mode == SinkPositions::kCache, kRoll, "mode",
          "be kText or kCache", static_cast<int>(mode));
  const int64_t excess = cache.size() + incoming - (sinks + window);
  if (excess <= 0) return 0;
  // With incoming <= window the excess never reaches into the sinks.
  if (mode == SinkPositions::kText) {
    cache.Remove(sinks, sinks + excess);
  } else {
    cache.ContextShift(sinks, excess);
  }
  return excess;
}

namespace {

constexpr std::string_view kBatchFn = "kv_cache_batch";
constexpr int64_t kMaxBatch = int64_t{1} << 20;

// The run of real tokens of each row: [first, first + count) of its n tokens.
struct Run {
  int64_t first = 0;
  int64_t count = 0;
};

// Checks the step's shapes against the batch and finds each row's run of ones in the mask.
std::vector<Run> RowRuns(int64_t batch, int64_t tokens, std::span<const int64_t> positions,
                         std::span<const uint8_t> mask, std::string_view tokens_name) {
  Require(tokens % batch == 0, kBatchFn, tokens_name,
          "be a multiple of batch (" + std::to_string(batch) + "): batch * n", tokens);
  const int64_t n = tokens / batch;
  Require(static_cast<int64_t>(mask.size()) == tokens, kBatchFn, "mask.size()",
          Equal(tokens_name, tokens), mask.size());
  Require(static_cast<int64_t>(positions.size()) == tokens, kBatchFn, "positions.size()",
          Equal(tokens_name, tokens), positions.size());
  std::vector<Run> runs(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const uint8_t* row = mask.data() + b * n;
    int64_t first = 0;
    while (first < n && row[first] == 0) ++first;
    int64_t end = first;
    while (end < n && row[end] != 0) ++end;
    for (int64_t t = end; t < n; ++t) {
      if (row[t] != 0) {
        Require(false, kBatchFn, "mask[" + std::to_string(b) + "]",
                "hold one run of real tokens (left or right padding, no holes)",
                "a real token at " + std::to_string(t) + " after a pad at " + std::to_string(end));
      }
    }
    runs[b] = {first, end - first};
  }
  return runs;
}

template <typename T>
Heads<T> RowTokens(Heads<T> x, int64_t n, int64_t b, const Run& run) {
  x.data = x.data + (b * n + run.first) * x.token_stride;
  x.tokens = run.count;
  return x;
}

std::span<const int64_t> RowPositions(std::span<const int64_t> positions, int64_t n, int64_t b,
                                      const Run& run) {
  return positions.subspan(static_cast<size_t>(b * n + run.first), static_cast<size_t>(run.count));
}

// Runs f for row b, naming the row in the error it throws.
template <typename F>
void ForRow(int64_t b, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (row " + std::to_string(b) + ")");
  }
}

}  // namespace

template <typename T>
KvCacheBatch<T>::KvCacheBatch(int64_t batch, const KvCacheOptions& options) {
  Require(batch >= 1 && batch <= kMaxBatch, kBatchFn, "batch", "be in [1, 2^20]", batch);
  Require(!options.mrope, kBatchFn, "options.mrope",
          "be unset (M-RoPE rows: one KvCache per sequence)", "set");
  rows_.reserve(static_cast<size_t>(batch));
  rows_.emplace_back(options);  // validates the options once, before the other rows allocate
  for (int64_t b = 1; b < batch; ++b) rows_.emplace_back(options);
}

template <typename T>
const KvCache<T>& KvCacheBatch<T>::Row(int64_t b) const {
  Require(b >= 0 && b < batch(), kBatchFn, "row", "be in [0, batch)", b);
  return rows_[b];
}

template <typename T>
KvCache<T>& KvCacheBatch<T>::Row(int64_t b) {
  Require(b >= 0 && b < batch(), kBatchFn, "row", "be in [0, batch)", b);
  return rows_[b];
}

template <typename T>
void KvCacheBatch<T>::Append(std::span<const int64_t> positions, std::span<const uint8_t> mask,
                             Heads<const T> k, Heads<const T> v) {
  k.Validate(kBatchFn, "k");
  v.Validate(kBatchFn, "v");
  Require(v.tokens == k.tokens, kBatchFn, "v.tokens", Equal("k.tokens", k.tokens), v.tokens);
  const std::vector<Run> runs = RowRuns(batch(), k.tokens, positions, mask, "k.tokens");
  const int64_t n = k.tokens / batch();
  for (int64_t b = 0; b < batch(); ++b) {
    ForRow(b, [&] {
      rows_[b].ValidateAppend(RowPositions(positions, n, b, runs[b]), PositionStreams{},
                              RowTokens(k, n, b, runs[b]), RowTokens(v, n, b, runs[b]));
    });
  }
  for (int64_t b = 0; b < batch(); ++b) {
    rows_[b].Append(RowPositions(positions, n, b, runs[b]), RowTokens(k, n, b, runs[b]),
                    RowTokens(v, n, b, runs[b]));
  }
}

template <typename T>
void KvCacheBatch<T>::Attend(const AttentionOptions& options, Heads<const T> q,
                             std::span<const int64_t> query_pos, std::span<const uint8_t> mask,
                             Heads<float> out) const {
  q.Validate(kBatchFn, "q");
  out.Validate(kBatchFn, "out");
  Require(out.tokens == q.tokens, kBatchFn, "out.tokens", Equal("q.tokens", q.tokens), out.tokens);
  const std::vector<Run> runs = RowRuns(batch(), q.tokens, query_pos, mask, "q.tokens");
  const int64_t n = q.tokens / batch();
  // Every row-specific check before the first row writes out: the rows share q's shape and the
  // options (an error there comes at the first row with queries, before it writes); the query
  // positions are each row's own.
  for (int64_t b = 0; b < batch(); ++b) {
    ForRow(b, [&] {
      ValidatePositions(kFn, RowPositions(query_pos, n, b, runs[b]), runs[b].count, "query_pos");
    });
  }
  for (int64_t b = 0; b < batch(); ++b) {
    ForRow(b, [&] {
      rows_[b].Attend(options, RowTokens(q, n, b, runs[b]), RowPositions(query_pos, n, b, runs[b]),
                      RowTokens(out, n, b, runs[b]));
    });
  }
  // Pads get zeros.
  for (int64_t b = 0; b < batch(); ++b) {
    for (int64_t t = 0; t < n; ++t) {
      if (t >= runs[b].first && t < runs[b].first + runs[b].count) continue;
      for (int64_t h = 0; h < out.num_heads; ++h) {
        std::fill_n(out.Row(b * n + t, h), out.head_dim, 0.0f);
      }
    }
  }
}

template class KvCache<float>;
template class KvCache<BFloat16>;
template class KvCacheBatch<float>;
template class KvCacheBatch<BFloat16>;
template int64_t RollSinkWindow(KvCache<float>&, int64_t, int64_t, int64_t, SinkPositions);
template int64_t RollSinkWindow(KvCache<BFloat16>&, int64_t, int64_t, int64_t, SinkPositions);

}  // namespace posenc
