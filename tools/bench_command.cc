// posenc bench: memory bandwidth and the kernels, measured in one process so that every kernel
// is reported as a fraction of the bandwidth this machine shows right now: round by round, each
// kernel over the baseline of the same round (bench_stats.h), with the CPU named (posenc/cpu.h)
// and a warning where the machine was not quiet.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "commands.h"
#include "fma_peak.h"
#include "numbers.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/attention_backward.h"
#include "posenc/cpu.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/kv_cache.h"
#include "posenc/mrope.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/runtime.h"
#include "posenc/self_extend.h"
#include "posenc/sinusoidal.h"
#include "posenc/storage.h"
#include "printable.h"
#include "stream.h"

namespace posenc::cli {
namespace {

struct Shapes {
  int64_t tokens, heads, kv_heads, head_dim, table_positions, table_dim;
  // Attention: causal prefill of prefill_tokens, and one decode query against decode_keys cached
  // keys (decode_heads query heads over decode_kv_heads key/value heads).
  int64_t prefill_tokens, prefill_heads, decode_keys, decode_heads, decode_kv_heads;
  int64_t fma_iterations;  // per thread, for the FMA peak
};
constexpr Shapes kFull = {4096, 32, 8, 128, 131072, 1024, 2048, 8, 8192, 32, 8, 4'000'000};
constexpr Shapes kQuick = {64, 4, 2, 128, 256, 64, 64, 8, 256, 4, 2, 10'000};

// The in-place bandwidth baseline: the case every memory-bound ratio is measured against.
constexpr const char* kBandwidthCase = "stream_read_modify_write";

// The case that reads the decode step's KV cache once: the floor the step is measured against.
constexpr const char* kKvReadCase = "stream_read_kv_cache";

struct Timing {
  double best_s = 0, median_s = 0;
};

struct Entry {
  std::string operation, layout, dtype;
  bool in_place;
  std::string shape;
  int threads;
  double bytes;
  Timing timing;
  double flops = 0;             // useful floating-point work, for the compute-bound cases
  double stream_bytes = 0;      // bytes a decode step must read at least once (the KV cache)
  std::vector<double> round_s;  // the time of each round, in round order (round r at index r)
};

// An entry's name in the table and in --only: "rope_forward half_split", or the operation alone.
std::string Label(const Entry& e) {
  return e.layout == "-" ? e.operation : e.operation + " " + e.layout;
}

// One measurement: what it reports, what it runs, and how often (the scalar references take
// seconds and run fewer times).
struct Case {
  Entry entry;
  std::function<void()> run;
  int max_repeats = 1 << 30;
  int calls_per_run = 1;  // the decode step is timed over a batch of calls
  std::vector<double> seconds;
  bool fma_peak = false;  // the compute ceiling, reported apart from the entries
};

// What a run measured: the entries, and the two ceilings they are compared with.
struct Results {
  std::vector<Entry> entries;
  double fma_peak_flops_per_s = 0;
  double fma_flops = 0;             // the work of one FMA-peak run
  std::vector<double> fma_round_s;  // its time in each round
};

std::string ShapeString(const std::vector<std::vector<int64_t>>& tensors,
                        const std::vector<std::string>& names) {
  std::string s;
  for (size_t n = 0; n < tensors.size(); ++n) {
    if (n) s += '+';
    s += names[n] + "[";
    for (size_t d = 0; d < tensors[n].size(); ++d) {
      if (d) s += ',';
      s += std::to_string(tensors[n][d]);
    }
    s += ']';
  }
  return s;
}

// q and k of one storage type, in and out.
template <typename T>
struct QK {
  std::vector<T> q, k, q_out, k_out;
  Heads<T> qv, kv, qo, ko;
  explicit QK(const Shapes& s)
      : q(s.tokens * s.heads * s.head_dim, FromFloat<T>(0.5f)),
        k(s.tokens * s.kv_heads * s.head_dim, FromFloat<T>(0.25f)),
        q_out(q.size()),
        k_out(k.size()),
        qv(Heads<T>::Dense(q.data(), s.tokens, s.heads, s.head_dim)),
        kv(Heads<T>::Dense(k.data(), s.tokens, s.kv_heads, s.head_dim)),
        qo(Heads<T>::Dense(q_out.data(), s.tokens, s.heads, s.head_dim)),
        ko(Heads<T>::Dense(k_out.data(), s.tokens, s.kv_heads, s.head_dim)) {}
};

// A group of buffers that some cases share, made and filled when one of them first runs (the
// warm-up, before any timing), so that a run of a few entries (--only) holds only theirs: a full
// run's buffers come to about 1.5 GB.
template <typename B>
class OnFirstUse {
 public:
  explicit OnFirstUse(std::function<std::unique_ptr<B>()> make) : make_(std::move(make)) {}
  explicit OnFirstUse(const Shapes& s) : make_([&s] { return std::make_unique<B>(s); }) {}
  B& operator*() {
    if (!made_) made_ = make_();
    return *made_;
  }
  B* operator->() { return &**this; }

 private:
  std::function<std::unique_ptr<B>()> make_;
  std::unique_ptr<B> made_;
};

// The buffers of the baselines and of the small cases, made up front; the others on first use.
struct Buffers {
  explicit Buffers(const Shapes& s)
      : stream_a(s.tokens * (s.heads + s.kv_heads) * s.head_dim, 1.0f),
        stream_b(stream_a.size(), 0.0f),
        f32(s),
        bf16(s),
        single(s),
        decode_q(s.heads * s.head_dim, 0.5f),
        decode_k(s.kv_heads * s.head_dim, 0.25f),
        positions(PositionRange(0, s.tokens)),
        table_positions(PositionRange(0, s.table_positions)),
        table(s) {}
  std::vector<float> stream_a, stream_b;
  OnFirstUse<QK<float>> f32;
  OnFirstUse<QK<BFloat16>> bf16;
  OnFirstUse<QK<float>> single;
  std::vector<float> decode_q, decode_k;
  std::vector<int64_t> positions, table_positions;
  struct Table {
    explicit Table(const Shapes& s) : values(s.table_positions * s.table_dim) {}
    std::vector<float> values;
  };
  OnFirstUse<Table> table;
};

// The bytes of q and k of one storage type, read or written once.
template <typename T>
double QKBytes(const Shapes& s) {
  return static_cast<double>(s.tokens * (s.heads + s.kv_heads) * s.head_dim) * sizeof(T);
}

// The RoPE cases for one storage type: SIMD in place and out of place, both layouts, and the
// scalar reference twin in place.
template <typename T>
void AddRopeCases(const Shapes& s, int threads, const std::vector<int64_t>& positions,
                  OnFirstUse<QK<T>>& b, std::vector<Case>& cases) {
  const std::string dtype = StorageTypeName(StorageTypeOf<T>());
  const std::string shape = ShapeString(
      {{s.tokens, s.heads, s.head_dim}, {s.tokens, s.kv_heads, s.head_dim}}, {"q", "k"});
  const double bytes = 2.0 * QKBytes<T>(s);
  for (const RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
    const std::string name = layout == RopeLayout::kHalfSplit ? "half_split" : "interleaved";
    const Rope rope = Rope::Default(s.head_dim, 10000.0, layout);
    cases.push_back({{"rope_forward", name, dtype, true, shape, threads, bytes, {}},
                     [&b, rope, &positions] { ApplyRope(rope, positions, b->qv, b->kv); }});
    cases.push_back(
        {{"rope_forward", name, dtype, false, shape, threads, bytes, {}}, [&b, rope, &positions] {
           ApplyRope(rope, positions, Heads<const T>(b->qv), b->qo, Heads<const T>(b->kv), b->ko);
         }});
    cases.push_back({{"rope_reference_scalar", name, dtype, true, shape, 1, bytes, {}},
                     [&b, rope, &positions] {
                       ApplyRopeReference(rope, positions, b->qv, b->qv, RopeDirection::kForward);
                       ApplyRopeReference(rope, positions, b->kv, b->kv, RopeDirection::kForward);
                     },
                     2});
  }
}

// Qwen2-VL's three position streams for `tokens` tokens: 16 text tokens, then images of 32 x 32
// merged patches (each token a new (row, column), the time fixed), text again after each: the
// image-heavy prefill of a vision-language model, where most tokens are not one step after the
// previous one in every stream. [3, tokens], row-major.
std::vector<int64_t> VisionLanguageStreams(int64_t tokens) {
  std::vector<int64_t> streams(3 * tokens);
  int64_t next = 0;  // the next text position
  for (int64_t t = 0; t < tokens;) {
    for (int64_t i = 0; i < 16 && t < tokens; ++i, ++t, ++next) {
      for (int64_t k = 0; k < 3; ++k) streams[k * tokens + t] = next;
    }
    for (int64_t i = 0; i < 32 * 32 && t < tokens; ++i, ++t) {
      streams[t] = next;
      streams[tokens + t] = next + i / 32;
      streams[2 * tokens + t] = next + i % 32;
    }
    next += 32;
  }
  return streams;
}

// M-RoPE in place on q and k, sections of Qwen2-VL (blocks) and Qwen3-VL (interleaved) scaled to
// head_dim, at VisionLanguageStreams: the same bytes as 1-D RoPE, so the same bandwidth ratio.
template <typename T>
void AddMRopeCases(const Shapes& s, int threads, const std::vector<int64_t>& streams,
                   OnFirstUse<QK<T>>& b, std::vector<Case>& cases) {
  const std::string dtype = StorageTypeName(StorageTypeOf<T>());
  const std::string shape = ShapeString(
      {{s.tokens, s.heads, s.head_dim}, {s.tokens, s.kv_heads, s.head_dim}}, {"q", "k"});
  const double bytes = 2.0 * QKBytes<T>(s);
  const int64_t pairs = s.head_dim / 2;
  const PositionStreams view = PositionStreams::Dense(streams.data(), 3, s.tokens);
  // [16, 24, 24] and [24, 20, 20] of 64 pairs.
  const std::vector<int64_t> blocks{pairs / 4, pairs * 3 / 8, pairs - pairs / 4 - pairs * 3 / 8};
  const std::vector<int64_t> interleaved{pairs - 2 * (pairs * 5 / 16), pairs * 5 / 16,
                                         pairs * 5 / 16};
  for (const MropeSections layout : {MropeSections::kBlocks, MropeSections::kInterleaved}) {
    const bool in_blocks = layout == MropeSections::kBlocks;
    const MRope mrope =
        MRope::Sections(Rope::Default(s.head_dim, 1e6), in_blocks ? blocks : interleaved, layout);
    cases.push_back({{"mrope_forward",
                      in_blocks ? "sections" : "interleaved",
                      dtype,
                      true,
                      shape,
                      threads,
                      bytes,
                      {}},
                     [&b, mrope, view] { ApplyMRope(mrope, view, b->qv, b->kv); }});
  }
}

// Attention inputs of one storage type: prefill q, k, v of prefill_tokens, and one decode query
// against a cache of decode_keys keys and values. Constant inputs: the timing does not depend on
// the values, and the bytes are what they are.
template <typename T>
struct AttentionBuffers {
  explicit AttentionBuffers(const Shapes& s)
      : prefill(s.prefill_tokens * s.prefill_heads * s.head_dim, FromFloat<T>(0.125f)),
        prefill_out(prefill.size()),
        prefill_pos(PositionRange(0, s.prefill_tokens)) {}
  std::vector<T> prefill;  // q, k and v share one buffer: the kernel only reads them
  std::vector<float> prefill_out;
  std::vector<int64_t> prefill_pos;
};

template <typename T>
struct DecodeBuffers {
  explicit DecodeBuffers(const Shapes& s)
      : q(s.decode_heads * s.head_dim, FromFloat<T>(0.125f)),
        k(s.decode_keys * s.decode_kv_heads * s.head_dim, FromFloat<T>(0.25f)),
        v(k.size(), FromFloat<T>(0.5f)),
        out(q.size()),
        query_pos{s.decode_keys - 1},
        key_pos(PositionRange(0, s.decode_keys)) {}
  std::vector<T> q, k, v;  // a KV cache: keys and values in buffers of their own
  std::vector<float> out;
  std::vector<int64_t> query_pos, key_pos;
};

// The bytes of the decode cases' KV cache, and of one step (the cache, the query and the output).
template <typename T>
double KvBytes(const Shapes& s) {
  return 2.0 * static_cast<double>(s.decode_keys * s.decode_kv_heads * s.head_dim) * sizeof(T);
}
template <typename T>
double DecodeStepBytes(const Shapes& s) {
  const auto q = static_cast<double>(s.decode_heads * s.head_dim);
  return KvBytes<T>(s) + q * sizeof(T) + 4.0 * q;
}

// Attention decode: one query token, grouped heads, against the whole cache of one storage type.
// It must read every cached key and value once, so its floor is the time to read them, at the
// bandwidth of kKvReadCase (the float32 cache read once, measured in the same run), reported
// beside the step as ratio_to_stream_time.
template <typename T>
void AddDecodeCase(const Shapes& s, int threads, OnFirstUse<DecodeBuffers<T>>& decode,
                   std::vector<Case>& cases) {
  const double kv_bytes = KvBytes<T>(s);
  const std::string name = std::string("attention decode gqa ") +
                           (StorageTypeOf<T>() == StorageType::kFloat32 ? "f32" : "bf16");
  cases.push_back(
      {{name,
        "-",
        StorageTypeName(StorageTypeOf<T>()),
        false,
        ShapeString({{1, s.decode_heads, s.head_dim},
                     {s.decode_keys, s.decode_kv_heads, s.head_dim},
                     {s.decode_keys, s.decode_kv_heads, s.head_dim}},
                    {"q", "k", "v"}),
        threads,
        DecodeStepBytes<T>(s),
        {},
        4.0 * s.decode_keys * s.head_dim * s.decode_heads,
        kv_bytes},
       [&decode, &s] {
         const auto view = [&s](const std::vector<T>& x) {
           return Heads<const T>::Dense(x.data(), s.decode_keys, s.decode_kv_heads, s.head_dim);
         };
         Attention({.causal = true},
                   Heads<const T>::Dense(decode->q.data(), 1, s.decode_heads, s.head_dim),
                   view(decode->k), view(decode->v), decode->query_pos, decode->key_pos,
                   Heads<float>::Dense(decode->out.data(), 1, s.decode_heads, s.head_dim));
       }});
}

// Decode through a KvCache (posenc/kv_cache.h) of decode_keys tokens, without RoPE and with it:
// the cache holds its keys rotated, so the RoPE step rotates only the query and must cost about
// what the plain step costs. Beside them, Attention with options.rope on the same unrotated
// cache, which rotates every key on every call: what a cache saves.
template <typename T>
void AddCachedDecodeCases(const Shapes& s, int threads, OnFirstUse<DecodeBuffers<T>>& decode,
                          std::vector<Case>& cases) {
  const std::string dtype = StorageTypeName(StorageTypeOf<T>());
  const std::string suffix = StorageTypeOf<T>() == StorageType::kFloat32 ? "f32" : "bf16";
  const double kv_bytes = KvBytes<T>(s);
  const double bytes = DecodeStepBytes<T>(s);
  const double flops = 4.0 * s.decode_keys * s.head_dim * s.decode_heads;
  const std::string shape = ShapeString({{1, s.decode_heads, s.head_dim},
                                         {s.decode_keys, s.decode_kv_heads, s.head_dim},
                                         {s.decode_keys, s.decode_kv_heads, s.head_dim}},
                                        {"q", "k", "v"});
  const auto kv = [&s](const std::vector<T>& x) {
    return Heads<const T>::Dense(x.data(), s.decode_keys, s.decode_kv_heads, s.head_dim);
  };
  const auto query = [&s](const std::vector<T>& x) {
    return Heads<const T>::Dense(x.data(), 1, s.decode_heads, s.head_dim);
  };
  const auto out = [&decode, &s] {
    return Heads<float>::Dense(decode->out.data(), 1, s.decode_heads, s.head_dim);
  };
  // One cache holds the keys rotated at 0 .. decode_keys - 1. The RoPE step attends through it
  // (the query rotated on the way); the plain step attends to the same cached keys and values
  // with the query rotated beforehand. Same memory, same numbers: they differ only in the query's
  // rotation (two caches would differ in how their pages were mapped, which showed here as 1.6x).
  const Rope rope = Rope::Default(s.head_dim, 500000.0);
  struct Cached {
    explicit Cached(const KvCacheOptions& options) : cache(options) {}
    KvCache<T> cache;
    std::vector<T> rotated_q;
  };
  auto cached = std::make_shared<OnFirstUse<Cached>>([&decode, &s, rope, kv, query] {
    auto made = std::make_unique<Cached>(KvCacheOptions{.capacity = s.decode_keys,
                                                        .kv_heads = s.decode_kv_heads,
                                                        .head_dim = s.head_dim,
                                                        .rope = rope});
    made->rotated_q.resize(decode->q.size());
    made->cache.Append(decode->key_pos, kv(decode->k), kv(decode->v));
    ApplyRope(rope, decode->query_pos, query(decode->q),
              Heads<T>::Dense(made->rotated_q.data(), 1, s.decode_heads, s.head_dim));
    return made;
  });
  // The three steps read the same cache: one entry shape, their names apart.
  const auto entry = [&](const std::string& name) {
    return Entry{name, "-", dtype, false, shape, threads, bytes, {}, flops, kv_bytes};
  };
  cases.push_back({entry("attention decode cache " + suffix), [&decode, cached, query, out] {
                     KvCache<T>& cache = (*cached)->cache;
                     Attention({.causal = true}, query((*cached)->rotated_q), cache.Keys(),
                               cache.Values(), decode->query_pos, cache.Positions(), out());
                   }});
  cases.push_back({entry("attention decode cache rope " + suffix), [&decode, cached, query, out] {
                     (*cached)->cache.Attend({.causal = true}, query(decode->q), decode->query_pos,
                                             out());
                   }});
  AttentionOptions rotate_all{.causal = true};
  rotate_all.rope = rope;
  cases.push_back(
      {entry("attention decode rope every key " + suffix), [&decode, kv, query, out, rotate_all] {
         Attention(rotate_all, query(decode->q), kv(decode->k), kv(decode->v), decode->query_pos,
                   decode->key_pos, out());
       }});
}

// Causal prefill, plain, with ALiBi and with T5's relative bias, on q, k and v of one storage type. Useful work is the
// lower triangle only: T (T + 1) / 2 (query, key) pairs per head, 2 head_dim flops each for the
// score and 2 head_dim for the weighted value.
template <typename T>
void AddPrefillCases(const Shapes& s, int threads, OnFirstUse<AttentionBuffers<T>>& b,
                     std::vector<Case>& cases) {
  const int64_t t = s.prefill_tokens, h = s.prefill_heads, d = s.head_dim;
  const std::string dtype = StorageTypeName(StorageTypeOf<T>());
  const std::string shape = ShapeString({{t, h, d}}, {"q=k=v"});
  const auto elements = static_cast<double>(t * h * d);
  const double bytes = 3.0 * elements * sizeof(T) + 4.0 * elements;
  const double flops = 4.0 * (t * (t + 1) / 2) * d * h;
  // T5's decoder bias (32 buckets, max distance 128), fused like ALiBi: its table outlives the
  // case, which holds a view of it.
  auto t5_table = std::make_shared<std::vector<float>>(32 * h);
  for (size_t i = 0; i < t5_table->size(); ++i)
    (*t5_table)[i] = -0.01f * static_cast<float>(i % 97);
  for (const std::string bias : {"", "alibi ", "t5 "}) {
    AttentionOptions options{.causal = true};
    if (bias == "alibi ") options.alibi = Alibi{.num_heads = h};
    if (bias == "t5 ") {
      options.relative_bias =
          RelativeBias{.buckets = {.num_buckets = 32, .max_distance = 128, .bidirectional = false},
                       .num_heads = h,
                       .table = *t5_table};
    }
    const std::string name = "attention prefill causal " + bias +
                             (StorageTypeOf<T>() == StorageType::kFloat32 ? "f32" : "bf16");
    Case c{{name, "-", dtype, false, shape, threads, bytes, {}, flops},
           [&b, options, t, h, d, t5_table] {
             const auto view = Heads<const T>::Dense(b->prefill.data(), t, h, d);
             Attention(options, view, view, view, b->prefill_pos, b->prefill_pos,
                       Heads<float>::Dense(b->prefill_out.data(), t, h, d));
           },
           5};  // a second or less each; five rounds are enough for a best time
    cases.push_back(std::move(c));
  }
  // RoPE inside attention (q and k rotated on the way), and Self-Extend on the same inputs: its
  // keys closer than a quarter of the prefill at their own positions, the others grouped by 4.
  // Self-Extend rotates q and k twice and runs the kernel over two disjoint key sets, so its
  // ratio to the RoPE case is what grouping costs.
  AttentionOptions with_rope{.causal = true};
  with_rope.rope = Rope::Default(d, 500000.0);
  const SelfExtend self_extend{.group_size = 4, .neighbor_window = std::max<int64_t>(1, t / 4)};
  const std::string suffix = StorageTypeOf<T>() == StorageType::kFloat32 ? "f32" : "bf16";
  for (const bool grouped : {false, true}) {
    Case c{
        {std::string("attention prefill causal ") + (grouped ? "self-extend " : "rope ") + suffix,
         "-",
         dtype,
         false,
         shape,
         threads,
         bytes,
         {},
         flops},
        [&b, with_rope, self_extend, grouped, t, h, d] {
          const auto view = Heads<const T>::Dense(b->prefill.data(), t, h, d);
          const auto out = Heads<float>::Dense(b->prefill_out.data(), t, h, d);
          if (grouped) {
            SelfExtendAttention(with_rope, self_extend, view, view, view, b->prefill_pos,
                                b->prefill_pos, out);
          } else {
            Attention(with_rope, view, view, view, b->prefill_pos, b->prefill_pos, out);
          }
        },
        5};
    cases.push_back(std::move(c));
  }
}

// The backward pass of causal prefill, plain and with ALiBi (AttentionBackward, from a saved
// forward's out and lse). Useful work: five products per visible (query, key) pair (S, dP, dV,
// dK, dQ), 2 head_dim flops each, 2.5 times the forward's, FlashAttention-2's count.
template <typename T>
void AddBackwardCases(const Shapes& s, int threads, OnFirstUse<AttentionBuffers<T>>& b,
                      std::vector<Case>& cases) {
  const int64_t t = s.prefill_tokens, h = s.prefill_heads, d = s.head_dim;
  const std::string suffix = StorageTypeOf<T>() == StorageType::kFloat32 ? "f32" : "bf16";
  const std::string shape = ShapeString({{t, h, d}}, {"q=k=v"});
  const double flops = 10.0 * (t * (t + 1) / 2) * d * h;
  const auto elements = static_cast<size_t>(t * h * d);
  // Read: q, k, v, out, d_out; written: dq, dk, dv.
  const double bytes = 3.0 * elements * sizeof(T) + 5.0 * elements * sizeof(float);
  for (const bool alibi : {false, true}) {
    AttentionOptions options{.causal = true};
    if (alibi) options.alibi = Alibi{.num_heads = h};
    // The saved forward pass the backward pass starts from, and its gradients.
    struct State {
      std::vector<float> out, lse, d_out, dq, dk, dv;
    };
    auto state = std::make_shared<OnFirstUse<State>>([&b, options, elements, t, h, d] {
      auto made = std::make_unique<State>();
      made->out.resize(elements);
      made->lse.resize(static_cast<size_t>(t * h));
      made->d_out.assign(elements, 0.0625f);
      made->dq.resize(elements);
      made->dk.resize(elements);
      made->dv.resize(elements);
      const auto view = Heads<const T>::Dense(b->prefill.data(), t, h, d);
      AttentionForward(options, view, view, view, b->prefill_pos, b->prefill_pos,
                       Heads<float>::Dense(made->out.data(), t, h, d), made->lse);
      return made;
    });
    const std::string name =
        std::string("attention backward causal ") + (alibi ? "alibi " : "") + suffix;
    Case c{
        {name, "-", StorageTypeName(StorageTypeOf<T>()), false, shape, threads, bytes, {}, flops},
        [&b, options, state, t, h, d] {
          State& st = **state;
          const auto view = Heads<const T>::Dense(b->prefill.data(), t, h, d);
          const auto dense = [&](std::vector<float>& x) {
            return Heads<float>::Dense(x.data(), t, h, d);
          };
          AttentionBackward(options, view, view, view, b->prefill_pos, b->prefill_pos,
                            dense(st.out), st.lse, dense(st.d_out),
                            {dense(st.dq), dense(st.dk), dense(st.dv), {}});
        },
        5};
    cases.push_back(std::move(c));
  }
}

// Whether a case runs under --only: always the baselines every ratio needs, else when its
// operation and layout ("rope_forward half_split") contain one of the words.
bool Selected(const Case& c, const std::vector<std::string>& only) {
  const Entry& e = c.entry;
  if (only.empty() || c.fma_peak || e.operation == kBandwidthCase || e.operation == kKvReadCase) {
    return true;
  }
  const std::string label = Label(e);
  return std::any_of(only.begin(), only.end(), [&](const std::string& word) {
    return label.find(word) != std::string::npos;
  });
}

// Builds every case (those of `only`, when given), warms each up once, then times them
// round-robin, `repeats` rounds: noise from other processes then hits every case alike, and the
// ratios stay meaningful.
Results RunBenchmarks(const Shapes& s, int repeats, const std::vector<std::string>& only) {
  const int threads = ThreadCount();
  Buffers b(s);
  OnFirstUse<AttentionBuffers<float>> attention_f32(s);
  OnFirstUse<AttentionBuffers<BFloat16>> attention_bf16(s);
  OnFirstUse<DecodeBuffers<float>> decode(s);
  OnFirstUse<DecodeBuffers<BFloat16>> decode_bf16(s);
  std::vector<Case> cases;
  // The compute ceiling: bytes_moved 0, reported as fma_peak_gflop_per_s, not as an entry.
  double fma_flops = 0;  // per run; it depends on the vector width of the dispatched target
  Case peak{{"fma_peak", "-", "float32", false, "-", threads, 0, {}},
            [&fma_flops, &s] { fma_flops = bench::FmaPeakRun(s.fma_iterations); }};
  peak.fma_peak = true;
  cases.push_back(std::move(peak));
  const size_t n = b.stream_a.size();
  const std::string stream_shape = "[" + std::to_string(n) + "] (q+k)";
  cases.push_back({{"stream_copy", "-", "float32", false, stream_shape, threads, 8.0 * n, {}},
                   [&b, n] { bench::StreamCopy(b.stream_a.data(), b.stream_b.data(), n); }});
  cases.push_back(
      {{"stream_read_modify_write", "-", "float32", true, stream_shape, threads, 8.0 * n, {}},
       [&b, n] { bench::StreamScaleInPlace(b.stream_a.data(), n, 0.999f); }});
  cases.push_back({{"stream_fill", "-", "float32", false, stream_shape, threads, 4.0 * n, {}},
                   [&b, n] { bench::StreamFill(b.stream_b.data(), n, 1.0f); }});
  AddRopeCases(s, threads, b.positions, b.f32, cases);
  AddRopeCases(s, threads, b.positions, b.bf16, cases);
  const std::vector<int64_t> streams = VisionLanguageStreams(s.tokens);
  AddMRopeCases(s, threads, streams, b.f32, cases);
  AddMRopeCases(s, threads, streams, b.bf16, cases);

  // Thread scaling: the float32 half-split in-place case on one thread.
  const Rope plain = Rope::Default(s.head_dim);
  const std::string qk_shape = ShapeString(
      {{s.tokens, s.heads, s.head_dim}, {s.tokens, s.kv_heads, s.head_dim}}, {"q", "k"});
  cases.push_back(
      {{"rope_forward", "half_split", "float32", true, qk_shape, 1, 2.0 * QKBytes<float>(s), {}},
       [&b, &plain, threads] {
         SetThreadCount(1);
         ApplyRope(plain, b.positions, b.single->qv, b.single->kv);
         SetThreadCount(threads);
       }});

  // Decode: one token, all heads of q and k in one call, at the last position.
  constexpr int kDecodeCalls = 2000;
  const std::vector<int64_t> last = {s.tokens - 1};
  cases.push_back(
      {{"rope_decode_step",
        "half_split",
        "float32",
        true,
        ShapeString({{1, s.heads, s.head_dim}, {1, s.kv_heads, s.head_dim}}, {"q", "k"}),
        threads,
        2.0 * (b.decode_q.size() + b.decode_k.size()) * 4,
        {}},
       [&b, &plain, &last, &s] {
         for (int c = 0; c < kDecodeCalls; ++c) {
           ApplyRope(plain, last, Heads<float>::Dense(b.decode_q.data(), 1, s.heads, s.head_dim),
                     Heads<float>::Dense(b.decode_k.data(), 1, s.kv_heads, s.head_dim));
         }
       },
       1 << 30,
       kDecodeCalls});

  // The sinusoidal table: written once, never read.
  const Sinusoidal spec{.dim = s.table_dim};
  const std::string table_shape =
      "[" + std::to_string(s.table_positions) + "," + std::to_string(s.table_dim) + "]";
  const double table_bytes = 4.0 * static_cast<double>(s.table_positions * s.table_dim);
  cases.push_back(
      {{"sinusoidal_table", "-", "float32", false, table_shape, threads, table_bytes, {}},
       [&b, &spec, &s] { FillSinusoidalTable(spec, s.table_positions, b.table->values); }});
  cases.push_back(
      {{"sinusoidal_reference_scalar", "-", "float32", false, table_shape, 1, table_bytes, {}},
       [&b, &spec] { FillSinusoidalReference(spec, b.table_positions, b.table->values); },
       1});

  AddPrefillCases(s, threads, attention_f32, cases);
  AddPrefillCases(s, threads, attention_bf16, cases);
  AddBackwardCases(s, threads, attention_f32, cases);
  AddBackwardCases(s, threads, attention_bf16, cases);

  // The floor of the decode steps: the float32 cache read once.
  const double kv_bytes = KvBytes<float>(s);
  const std::string kv_shape = ShapeString({{s.decode_keys, s.decode_kv_heads, s.head_dim},
                                            {s.decode_keys, s.decode_kv_heads, s.head_dim}},
                                           {"k", "v"});
  cases.push_back(
      {{kKvReadCase, "-", "float32", false, kv_shape, threads, kv_bytes, {}}, [&decode] {
         volatile float sink = bench::StreamRead(decode->k.data(), decode->k.size()) +
                               bench::StreamRead(decode->v.data(), decode->v.size());
         (void)sink;
       }});
  AddDecodeCase(s, threads, decode, cases);
  AddDecodeCase(s, threads, decode_bf16, cases);
  AddCachedDecodeCases(s, threads, decode, cases);
  AddCachedDecodeCases(s, threads, decode_bf16, cases);

  for (const std::string& word : only) {
    const bool matches = std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
      return Label(c.entry).find(word) != std::string::npos;
    });
    if (!matches) {
      throw Error("[bench] --only: '" + Printable(word) +
                  "' is in no entry's operation and layout (e.g. 'rope_forward half_split', "
                  "'attention prefill causal alibi f32', 'rope_decode_step')");
    }
  }
  std::erase_if(cases, [&](const Case& c) { return !Selected(c, only); });

  // A progress line on a terminal (a full run takes minutes); nothing in a pipe or a file.
  const bool progress = isatty(STDERR_FILENO);
  const auto report = [&](const std::string& stage) {
    if (progress) std::fprintf(stderr, "\r\033[Kposenc bench: %s", stage.c_str());
  };
  report("warming up (" + std::to_string(cases.size()) + " entries)");
  for (Case& c : cases) c.run();  // warm-up: make and page in buffers, resolve the dispatch
  for (int r = 0; r < repeats; ++r) {
    report("round " + std::to_string(r + 1) + " of " + std::to_string(repeats));
    for (Case& c : cases) {
      if (static_cast<int>(c.seconds.size()) >= c.max_repeats) continue;
      // Every thread busy with vector FMAs first, untimed, for about a quarter of the FMA-peak
      // run: after a memory-bound or single-threaded case the cores are not at full speed at
      // once. On an AMD EPYC Zen 5 VM, without this, round 1's FMA peak read 239 GFLOP/s
      // against 434-468 in the later rounds, and float32 prefill right after the 1.6 s
      // single-threaded sinusoidal reference took 1.5x its time in the other rounds.
      bench::FmaPeakRun(s.fma_iterations / 4);
      const auto start = std::chrono::steady_clock::now();
      c.run();
      c.seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          c.calls_per_run);
    }
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
  Results results;
  for (Case& c : cases) {
    c.entry.round_s = c.seconds;
    std::sort(c.seconds.begin(), c.seconds.end());
    c.entry.timing = {c.seconds.front(), c.seconds[c.seconds.size() / 2]};
    if (c.fma_peak) {
      results.fma_peak_flops_per_s = fma_flops / c.entry.timing.best_s;
      results.fma_flops = fma_flops;
      results.fma_round_s = c.entry.round_s;
    } else {
      results.entries.push_back(c.entry);
    }
  }
  return results;
}

const Entry* FindEntry(const std::vector<Entry>& entries, const std::string& operation) {
  for (const Entry& e : entries) {
    if (e.operation == operation) return &e;
  }
  return nullptr;
}

double InPlaceBandwidth(const std::vector<Entry>& entries) {
  const Entry* e = FindEntry(entries, kBandwidthCase);
  return e ? e->bytes / e->timing.best_s : 0;
}

// The read-only bandwidth of the decode case's KV cache (kKvReadCase), bytes per second.
double KvReadBandwidth(const std::vector<Entry>& entries) {
  const Entry* e = FindEntry(entries, kKvReadCase);
  return e ? e->bytes / e->timing.best_s : 0;
}

// Each entry's ratios round by round, against the baselines of the same round, and their
// medians and spreads. Empty where an entry has no such ratio (no flops, no KV cache).
struct RoundRatios {
  std::vector<double> bandwidth, peak, stream;
  bench_stats::Spread bandwidth_spread, peak_spread, stream_spread;
};

std::vector<RoundRatios> PerRoundRatios(const Results& results) {
  using bench_stats::RateRatios, bench_stats::Summarize, bench_stats::TimeRatios;
  const Entry* bw = FindEntry(results.entries, kBandwidthCase);
  const Entry* kv = FindEntry(results.entries, kKvReadCase);
  std::vector<RoundRatios> all;
  for (const Entry& e : results.entries) {
    RoundRatios r;
    if (bw) r.bandwidth = RateRatios(e.round_s, e.bytes, bw->round_s, bw->bytes);
    if (e.flops > 0)
      r.peak = RateRatios(e.round_s, e.flops, results.fma_round_s, results.fma_flops);
    if (e.stream_bytes > 0 && kv) {
      r.stream = TimeRatios(e.round_s, e.stream_bytes, kv->round_s, kv->bytes);
    }
    r.bandwidth_spread = Summarize(r.bandwidth);
    r.peak_spread = Summarize(r.peak);
    r.stream_spread = Summarize(r.stream);
    all.push_back(std::move(r));
  }
  return all;
}

// The three baselines' per-round times, for the drift warning.
std::vector<bench_stats::Baseline> Baselines(const Results& results) {
  std::vector<bench_stats::Baseline> baselines;
  if (const Entry* e = FindEntry(results.entries, kBandwidthCase)) {
    baselines.push_back({"in-place bandwidth", e->round_s});
  }
  baselines.push_back({"FMA peak", results.fma_round_s});
  if (const Entry* e = FindEntry(results.entries, kKvReadCase)) {
    baselines.push_back({"KV-cache read", e->round_s});
  }
  return baselines;
}

// A time with the unit that keeps it readable: "29.4 us", "1.73 ms".
std::string FormatSeconds(double seconds) {
  const char* unit = "s";
  double value = seconds;
  if (seconds < 1e-6) {
    unit = "ns", value = seconds * 1e9;
  } else if (seconds < 1e-3) {
    unit = "us", value = seconds * 1e6;
  } else if (seconds < 1) {
    unit = "ms", value = seconds * 1e3;
  }
  char text[32];
  std::snprintf(text, sizeof text, value < 100 ? "%.2f %s" : "%.1f %s", value, unit);
  return text;
}

// A ratio in a few characters: three decimals below 10, fewer above ("0.412", "12.3", "1320").
std::string FormatRatio(double ratio, int decimals = 3) {
  char text[32];
  const int places = ratio < 10 ? decimals : ratio < 100 ? 1 : 0;
  std::snprintf(text, sizeof text, "%.*f", places, ratio);
  return text;
}

// A spread as "min-max" with two decimals below 10: "0.41-0.44"; "-" without rounds.
std::string FormatSpread(const bench_stats::Spread& s) {
  if (s.rounds == 0) return "-";
  return FormatRatio(s.min, 2) + "-" + FormatRatio(s.max, 2);
}

std::string ShortDtype(const std::string& dtype) {
  return dtype == "float32" ? "f32" : dtype == "bfloat16" ? "bf16" : dtype;
}

// The machine around the run and why its figures may mislead, measured by the callback.
struct RunContext {
  bench_stats::MachineLoad load;
  std::vector<bench_stats::Baseline> baselines;
  std::vector<std::string> warnings;
};

void PrintWarnings(const std::vector<std::string>& warnings) {
  if (warnings.empty()) return;
  for (const std::string& w : warnings) std::printf("WARNING: %s\n", w.c_str());
  std::printf("WARNING: the machine was not quiet; rerun before trusting a ratio\n");
}

// The report as text within 100 columns: entries grouped under their shape (the longest column),
// each named by operation and layout; the attention entries once more against the FMA peak.
// Rates are of the best round; ratios are medians of per-round ratios, with their min-max.
void PrintTable(const Results& results, const std::vector<RoundRatios>& ratios, double bandwidth,
                int repeats, const RunContext& context) {
  using bench_stats::Drift;
  const std::vector<Entry>& entries = results.entries;
  const double peak = results.fma_peak_flops_per_s;
  const CpuInfo& cpu = ThisCpu();
  PrintWarnings(context.warnings);
  std::printf("posenc bench: SIMD target %s, %d threads, %d rounds\n", SimdTargetName().c_str(),
              ThreadCount(), repeats);
  std::printf("cpu: %.90s\n     %.90s\n     %.90s\n", cpu.model_name.c_str(),
              CpuIdentity(cpu).c_str(), CpuExtensions(cpu).c_str());
  std::printf(
      "baselines of this run: float32 FMA peak %.1f GFLOP/s, in-place bandwidth %.1f GB/s\n",
      peak / 1e9, bandwidth / 1e9);
  std::string drift;
  for (const bench_stats::Baseline& b : context.baselines) {
    char part[64];
    std::snprintf(part, sizeof part, "%s%s %.2fx", drift.empty() ? "" : ", ", b.name.c_str(),
                  Drift(b.seconds));
    drift += part;
  }
  std::printf("baseline drift, slowest round over fastest (warning above %.2fx):\n  %.96s\n",
              bench_stats::kMaxBaselineDrift, drift.c_str());
  const bench_stats::MachineLoad& load = context.load;
  if (load.before.valid && load.after.valid) {
    std::printf(
        "load: %.2f before the run, %.2f after (1-minute average, %d cores); other "
        "runnable tasks %d, %d\n",
        load.before.load_1m, load.after.load_1m, load.cores, load.before.runnable_others,
        load.after.runnable_others);
  }
  if (load.others_share >= 0) {
    std::printf(
        "during the run: other processes took %.0f%% of the CPU time, the hypervisor "
        "%.0f%%\n",
        100 * load.others_share, 100 * std::max(0.0, load.steal_share));
  }
  int width = 9;
  for (const Entry& e : entries) width = std::max(width, static_cast<int>(Label(e).size()));
  std::string shape;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.shape != shape) {
      shape = e.shape;
      std::printf("\n%s\n  %-*s %-4s %-5s %3s %10s %7s %6s %11s\n", shape.c_str(), width,
                  "operation", "type", "place", "thr", "best", "GB/s", "ratio", "min-max");
    }
    const double rate = e.bytes / e.timing.best_s;
    std::printf("  %-*s %-4s %-5s %3d %10s %7.2f %6s %11s\n", width, Label(e).c_str(),
                ShortDtype(e.dtype).c_str(), e.in_place ? "in" : "out", e.threads,
                FormatSeconds(e.timing.best_s).c_str(), rate / 1e9,
                FormatRatio(ratios[i].bandwidth_spread.median).c_str(),
                FormatSpread(ratios[i].bandwidth_spread).c_str());
  }
  std::printf("\n  %-*s %8s %7s %11s %8s %11s\n", width, "attention (useful causal work)",
              "GFLOP/s", "of peak", "min-max", "x stream", "min-max");
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.flops == 0) continue;
    const double gflops = e.flops / e.timing.best_s / 1e9;
    std::printf("  %-*s %8.1f %7s %11s", width, e.operation.c_str(), gflops,
                FormatRatio(ratios[i].peak_spread.median).c_str(),
                FormatSpread(ratios[i].peak_spread).c_str());
    if (e.stream_bytes > 0) {
      std::printf(" %8s %11s", FormatRatio(ratios[i].stream_spread.median, 2).c_str(),
                  FormatSpread(ratios[i].stream_spread).c_str());
    }
    std::printf("\n");
  }
  std::printf(
      "\nbest, GB/s, GFLOP/s: the best round. ratio, of peak, x stream: the median over the "
      "rounds\nof each round's ratio to the same round's baseline (min-max: their range)\n"
      "ratio: GB/s over the in-place bandwidth; of peak: over the float32 FMA peak\n"
      "x stream time: a decode step's time over one read of its KV cache\n");
  PrintWarnings(context.warnings);
}

nlohmann::json Numbers(const std::vector<double>& values, double scale = 1) {
  nlohmann::json out = nlohmann::json::array();
  for (const double v : values) out.push_back(v * scale);
  return out;
}

// The per-round ratios of one kind as JSON keys: <key>_median, _min, _max and _per_round.
void AddRatios(nlohmann::json& entry, const std::string& key, const std::vector<double>& values,
               const bench_stats::Spread& spread) {
  if (spread.rounds == 0) return;
  entry[key + "_median"] = spread.median;
  entry[key + "_min"] = spread.min;
  entry[key + "_max"] = spread.max;
  entry[key + "_per_round"] = Numbers(values);
}

nlohmann::json CpuJson(const CpuInfo& cpu) {
  return {{"model_name", cpu.model_name},   {"vendor", cpu.vendor},
          {"family", cpu.family},           {"model", cpu.model},
          {"stepping", cpu.stepping},       {"microarchitecture", cpu.microarchitecture},
          {"hypervisor", cpu.hypervisor},   {"avx2", cpu.avx2},
          {"avx512f", cpu.avx512f},         {"avx512_bf16", cpu.avx512_bf16},
          {"avx512_fp16", cpu.avx512_fp16}, {"amx_tile", cpu.amx_tile},
          {"amx_bf16", cpu.amx_bf16},       {"amx_permitted", cpu.amx_permitted}};
}

nlohmann::json LoadJson(const bench_stats::MachineLoad& load) {
  const auto sample = [](const bench_stats::LoadSample& s) -> nlohmann::json {
    if (!s.valid) return nullptr;
    return {{"load_average_1m", s.load_1m}, {"runnable_others", s.runnable_others}};
  };
  nlohmann::json out = {
      {"cores", load.cores}, {"before", sample(load.before)}, {"after", sample(load.after)}};
  out["others_cpu_share"] = load.others_share >= 0 ? nlohmann::json(load.others_share) : nullptr;
  out["steal_share"] = load.steal_share >= 0 ? nlohmann::json(load.steal_share) : nullptr;
  return out;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  struct Options {
    bool json = false;
    bool quick = false;
    int repeats = 10;
    std::vector<std::string> only;
  };
  auto options = std::make_shared<Options>();
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Measure memory bandwidth, the FMA peak and the kernels (RoPE, decode step, sinusoidal "
      "table, attention) in one run");
  bench->add_flag("--json", options->json, "Print the results as JSON");
  bench->add_flag("--quick", options->quick, "Tiny shapes: a smoke test, not a measurement");
  bench
      ->add_option("--repeats", options->repeats,
                   "Rounds: every entry is timed once per round, round-robin (best time; ratios "
                   "are medians of per-round ratios)")
      ->transform(DecimalInteger(1, 1000000))
      ->capture_default_str();
  bench->add_option("--only", options->only,
                    "Run only the entries whose operation and layout contain one of these words "
                    "(e.g. --only rope_forward decode), with the baselines their ratios need");
  bench->callback([options] {
    const Shapes& shapes = options->quick ? kQuick : kFull;
    const CpuInfo& cpu = ThisCpu();  // before the run: it may ask the kernel for AMX
    RunContext context;
    context.load.cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    context.load.before = bench_stats::SampleLoad();
    const bench_stats::CpuTimes cpu_before = bench_stats::SampleCpuTimes();
    const auto own_cpu_s = [] {
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
             1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    };
    const double own_before = own_cpu_s();
    const auto start = std::chrono::steady_clock::now();
    const Results results = RunBenchmarks(shapes, options->repeats, options->only);
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double own_s = own_cpu_s() - own_before;
    const bench_stats::CpuTimes cpu_after = bench_stats::SampleCpuTimes();
    context.load.after = bench_stats::SampleLoad();
    bench_stats::SetShares(cpu_before, cpu_after, own_s, wall_s,
                           static_cast<double>(sysconf(_SC_CLK_TCK)), context.load);
    context.baselines = Baselines(results);
    context.warnings = bench_stats::Warnings(context.baselines, context.load);

    const std::vector<Entry>& entries = results.entries;
    const std::vector<RoundRatios> ratios = PerRoundRatios(results);
    const double bandwidth = InPlaceBandwidth(entries);
    const double kv_read = KvReadBandwidth(entries);
    const double peak = results.fma_peak_flops_per_s;
    if (options->json) {
      nlohmann::json out = {{"machine", cpu.model_name},
                            {"cpu", CpuJson(cpu)},
                            {"simd_target", SimdTargetName()},
                            {"threads", ThreadCount()},
                            {"repeats", options->repeats},
                            {"in_place_bandwidth_gb_per_s", bandwidth / 1e9},
                            {"fma_peak_gflop_per_s", peak / 1e9},
                            {"load", LoadJson(context.load)},
                            {"max_baseline_drift", bench_stats::kMaxBaselineDrift},
                            {"warnings", context.warnings},
                            {"quiet", context.warnings.empty()},
                            {"entries", nlohmann::json::array()}};
      // Each baseline round by round (rates), and how far it moved: slowest round / fastest.
      nlohmann::json rounds = nlohmann::json::object(), drift = nlohmann::json::object();
      const auto rates = [](const std::vector<double>& seconds, double work) {
        nlohmann::json out = nlohmann::json::array();
        for (const double s : seconds) out.push_back(work / s / 1e9);
        return out;
      };
      rounds["fma_peak_gflop_per_s"] = rates(results.fma_round_s, results.fma_flops);
      drift["fma_peak"] = bench_stats::Drift(results.fma_round_s);
      if (const Entry* e = FindEntry(entries, kBandwidthCase)) {
        rounds["in_place_bandwidth_gb_per_s"] = rates(e->round_s, e->bytes);
        drift["in_place_bandwidth"] = bench_stats::Drift(e->round_s);
      }
      if (const Entry* e = FindEntry(entries, kKvReadCase)) {
        rounds["kv_read_gb_per_s"] = rates(e->round_s, e->bytes);
        drift["kv_read"] = bench_stats::Drift(e->round_s);
      }
      out["baseline_rounds"] = rounds;
      out["baseline_drift"] = drift;
      for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& e = entries[i];
        const double rate = e.bytes / e.timing.best_s;
        out["entries"].push_back({{"operation", e.operation},
                                  {"layout", e.layout},
                                  {"dtype", e.dtype},
                                  {"in_place", e.in_place},
                                  {"shape", e.shape},
                                  {"threads", e.threads},
                                  {"bytes_moved", e.bytes},
                                  {"best_ns", e.timing.best_s * 1e9},
                                  {"median_ns", e.timing.median_s * 1e9},
                                  {"gb_per_s", rate / 1e9},
                                  {"ratio_to_bandwidth", rate / bandwidth},
                                  {"rounds", e.round_s.size()},
                                  {"round_ns", Numbers(e.round_s, 1e9)}});
        nlohmann::json& entry = out["entries"].back();
        AddRatios(entry, "ratio_to_bandwidth", ratios[i].bandwidth, ratios[i].bandwidth_spread);
        if (e.flops > 0) {
          entry["gflop_per_s"] = e.flops / e.timing.best_s / 1e9;
          entry["ratio_to_peak"] = e.flops / e.timing.best_s / peak;
          AddRatios(entry, "ratio_to_peak", ratios[i].peak, ratios[i].peak_spread);
        }
        if (e.stream_bytes > 0) {
          // The floor of a memory-bound step: reading its bytes once, measured in this run.
          const double stream_s = e.stream_bytes / kv_read;
          entry["stream_ns"] = stream_s * 1e9;
          entry["ratio_to_stream_time"] = e.timing.best_s / stream_s;
          AddRatios(entry, "ratio_to_stream_time", ratios[i].stream, ratios[i].stream_spread);
        }
      }
      std::cout << out.dump(2) << "\n";
      return;
    }
    PrintTable(results, ratios, bandwidth, options->repeats, context);
  });
}

}  // namespace posenc::cli
