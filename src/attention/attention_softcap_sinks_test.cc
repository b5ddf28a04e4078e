// Logit soft-capping (AttentionOptions::softcap, Gemma 2) and attention sinks
// (AttentionOptions::sinks, gpt-oss), forward and backward:
// - the double references (AttentionReference, AttentionBackwardReference) against the
//   definition written out here: s = scale c q.k, s = C tanh(s / C), + ALiBi or T5 bias, masks,
//   softmax with exp(sink_h) in the denominator, and central finite differences of its loss for
//   every gradient, the sinks' included;
// - the kernels (Attention, AttentionForward, AttentionBackward) against the references on every
//   compiled SIMD target, float32 and bfloat16, prefill, decode and split-K decode, with
//   causal, ALiBi, T5, windows and GQA; the log-sum-exp including the sink;
// - the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention_bf16.h"
#include "attention_reference_row.h"
#include "bf16_arithmetics_for_test.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/attention_backward.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/relative_bias.h"
#include "posenc/rope.h"
#include "posenc/self_extend.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachBf16Arithmetic;
using testing_support::ForEachSimdTarget;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> Uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> x(n);
  for (float& e : x) e = uniform(rng);
  return x;
}

std::vector<int64_t> Iota(int64_t n, int64_t first = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// One call: shapes, options (softcap set directly; sinks and T5's table held here and pointed
// at by Options()), positions, inputs.
struct Case {
  std::string name;
  int64_t q_tokens = 0, kv_tokens = 0, heads = 1, kv_heads = 1, dim = 8, value_dim = 8;
  AttentionOptions options;
  std::vector<float> sinks;  // empty: none
  std::vector<float> table;  // T5's, when options.relative_bias is given
  std::vector<int64_t> query_pos, key_pos;
  float range = 2.0f;  // q and k uniform in [-range, range]; v and d_out in [-1, 1]
  bool bf16 = false;   // inputs rounded to bfloat16

  std::vector<float> q, k, v, d_out;

  // Fills the defaults and the inputs; call once the fields are set.
  void Prepare() {
    if (query_pos.empty()) query_pos = Iota(q_tokens, kv_tokens - q_tokens);
    if (key_pos.empty()) key_pos = Iota(kv_tokens);
    q = Uniform(static_cast<size_t>(q_tokens * heads * dim), 1, -range, range);
    k = Uniform(static_cast<size_t>(kv_tokens * kv_heads * dim), 2, -range, range);
    v = Uniform(static_cast<size_t>(kv_tokens * kv_heads * value_dim), 3, -1.0f, 1.0f);
    d_out = Uniform(static_cast<size_t>(q_tokens * heads * value_dim), 4, -1.0f, 1.0f);
    if (bf16) {
      for (auto* x : {&q, &k, &v}) {
        for (float& e : *x) e = ToFloat(FromFloat<BFloat16>(e));
      }
    }
  }
  AttentionOptions Options() const {
    AttentionOptions o = options;
    o.sinks = sinks;
    if (o.relative_bias) o.relative_bias->table = table;
    return o;
  }
  Heads<const float> Q() const { return Heads<const float>::Dense(q.data(), q_tokens, heads, dim); }
  Heads<const float> K() const {
    return Heads<const float>::Dense(k.data(), kv_tokens, kv_heads, dim);
  }
  Heads<const float> V() const {
    return Heads<const float>::Dense(v.data(), kv_tokens, kv_heads, value_dim);
  }
  Heads<const float> DOut() const {
    return Heads<const float>::Dense(d_out.data(), q_tokens, heads, value_dim);
  }
  size_t OutSize() const { return static_cast<size_t>(q_tokens * heads * value_dim); }
};

// The definition, in double, from scratch: the output, each row's log-sum-exp (with the sink),
// and the loss sum(d_out * out). q, k, v, sinks and T5's table are given as double so that
// finite differences can move them. RoPE is not used here (it is the same rotation with or
// without these options, and tested elsewhere).
struct Definition {
  std::vector<double> out, lse;
  double loss = 0.0;
};

Definition Define(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& sinks,
                  const std::vector<double>& table) {
  const AttentionOptions& o = c.options;
  const double scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(c.dim));
  const std::vector<double> slopes = o.alibi ? AlibiSlopes(*o.alibi) : std::vector<double>();
  const int64_t group = c.heads / c.kv_heads;
  Definition def;
  def.out.assign(c.OutSize(), 0.0);
  def.lse.assign(static_cast<size_t>(c.q_tokens * c.heads), -kInf);
  for (int64_t i = 0; i < c.q_tokens; ++i) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t g = h / group;
      // The scores of the visible keys, then the sink as one more column.
      std::vector<double> s;
      std::vector<int64_t> seen;
      for (int64_t j = 0; j < c.kv_tokens; ++j) {
        const int64_t qp = c.query_pos[i], kp = c.key_pos[j];
        if (o.causal && kp > qp) continue;
        if (o.window > 0 && qp - kp >= o.window) continue;
        if (o.chunk_size > 0 && qp / o.chunk_size != kp / o.chunk_size) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < c.dim; ++d) {
          dot += q[(i * c.heads + h) * c.dim + d] * k[(j * c.kv_heads + g) * c.dim + d];
        }
        const double query_scale = o.query_scale ? o.query_scale->At(qp) : 1.0;
        double score = scale * query_scale * dot;
        if (o.softcap > 0) score = o.softcap * std::tanh(score / o.softcap);
        if (o.alibi) score += -slopes[h] * static_cast<double>(qp - kp);
        if (o.relative_bias) {
          const int64_t b = RelativePositionBucket(o.relative_bias->buckets, kp - qp);
          score += table[b * c.heads + h];
        }
        s.push_back(score);
        seen.push_back(j);
      }
      const bool sink = !sinks.empty();
      if (sink) s.push_back(sinks[h]);
      if (s.empty()) continue;
      const double max = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - max));
      def.lse[i * c.heads + h] = max + std::log(sum);
      for (size_t n = 0; n < seen.size(); ++n) {
        for (int64_t e = 0; e < c.value_dim; ++e) {
          const double term = s[n] / sum * v[(seen[n] * c.kv_heads + g) * c.value_dim + e];
          def.out[(i * c.heads + h) * c.value_dim + e] += term;
          def.loss += term * c.d_out[(i * c.heads + h) * c.value_dim + e];
        }
      }
    }
  }
  return def;
}

std::vector<double> Widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

Definition Define(const Case& c) {
  return Define(c, Widen(c.q), Widen(c.k), Widen(c.v), Widen(c.sinks), Widen(c.table));
}

std::vector<float> ReferenceOut(const Case& c) {
  std::vector<float> out(c.OutSize());
  AttentionReference(c.Options(), c.Q(), c.K(), c.V(), c.query_pos, c.key_pos,
                     Heads<float>::Dense(out.data(), c.q_tokens, c.heads, c.value_dim));
  return out;
}

template <typename T>
std::vector<T> Store(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = FromFloat<T>(x[i]);
  return out;
}

// The kernel's forward pass on T storage: out and lse.
template <typename T>
std::pair<std::vector<float>, std::vector<float>> KernelForward(const Case& c) {
  const std::vector<T> q = Store<T>(c.q), k = Store<T>(c.k), v = Store<T>(c.v);
  std::vector<float> out(c.OutSize(), std::nanf("")),
      lse(static_cast<size_t>(c.q_tokens * c.heads));
  AttentionForward(c.Options(), Heads<const T>::Dense(q.data(), c.q_tokens, c.heads, c.dim),
                   Heads<const T>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim),
                   Heads<const T>::Dense(v.data(), c.kv_tokens, c.kv_heads, c.value_dim),
                   c.query_pos, c.key_pos,
                   Heads<float>::Dense(out.data(), c.q_tokens, c.heads, c.value_dim), lse);
  return {out, lse};
}

// Attention (no lse) on T storage.
template <typename T>
std::vector<float> KernelAttention(const Case& c) {
  const std::vector<T> q = Store<T>(c.q), k = Store<T>(c.k), v = Store<T>(c.v);
  std::vector<float> out(c.OutSize(), std::nanf(""));
  Attention(c.Options(), Heads<const T>::Dense(q.data(), c.q_tokens, c.heads, c.dim),
            Heads<const T>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim),
            Heads<const T>::Dense(v.data(), c.kv_tokens, c.kv_heads, c.value_dim), c.query_pos,
            c.key_pos, Heads<float>::Dense(out.data(), c.q_tokens, c.heads, c.value_dim));
  return out;
}

struct Grads {
  std::vector<float> dq, dk, dv, table, sinks;
  explicit Grads(const Case& c)
      : dq(c.q.size(), std::nanf("")),
        dk(c.k.size(), std::nanf("")),
        dv(c.v.size(), std::nanf("")),
        table(c.table.size(), std::nanf("")),
        sinks(c.sinks.size(), std::nanf("")) {}
  AttentionGradients View(const Case& c) {
    return {Heads<float>::Dense(dq.data(), c.q_tokens, c.heads, c.dim),
            Heads<float>::Dense(dk.data(), c.kv_tokens, c.kv_heads, c.dim),
            Heads<float>::Dense(dv.data(), c.kv_tokens, c.kv_heads, c.value_dim), table, sinks};
  }
};

Grads ReferenceGrads(const Case& c) {
  Grads g(c);
  AttentionBackwardReference(c.Options(), c.Q(), c.K(), c.V(), c.query_pos, c.key_pos, c.DOut(),
                             g.View(c));
  return g;
}

template <typename T>
Grads KernelGrads(const Case& c) {
  const std::vector<T> q = Store<T>(c.q), k = Store<T>(c.k), v = Store<T>(c.v);
  const auto qv = Heads<const T>::Dense(q.data(), c.q_tokens, c.heads, c.dim);
  const auto kv = Heads<const T>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim);
  const auto vv = Heads<const T>::Dense(v.data(), c.kv_tokens, c.kv_heads, c.value_dim);
  std::vector<float> out(c.OutSize()), lse(static_cast<size_t>(c.q_tokens * c.heads));
  const auto outv = Heads<float>::Dense(out.data(), c.q_tokens, c.heads, c.value_dim);
  const AttentionOptions options = c.Options();
  AttentionForward(options, qv, kv, vv, c.query_pos, c.key_pos, outv, lse);
  Grads g(c);
  AttentionBackward(options, qv, kv, vv, c.query_pos, c.key_pos, outv, lse, c.DOut(), g.View(c));
  return g;
}

// got within tolerance * max(|want|, floor) of want, element by element.
template <typename W>
void ExpectClose(const std::vector<float>& got, const std::vector<W>& want, double tolerance,
                 const std::string& what, double floor = 1e-3) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor;
  for (const W w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], static_cast<double>(want[i]), tolerance * scale)
        << what << " element " << i;
  }
}

// The cases: soft-capping with causal, ALiBi, T5, a window and a query scale; sinks with GQA,
// causal, ALiBi with queries after the keys, rows that see nothing; both together; decode and
// split-K decode. Shapes are no multiple of the tiles (32 query rows, 64 keys) or of any vector.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  const auto add = [&](Case c) { cases.push_back(std::move(c)); };
  {
    // Scores up to about +-16 (scale 1): capping at 3 flattens most of them.
    Case c{.name = "softcap 3 causal ALiBi",
           .q_tokens = 70,
           .kv_tokens = 70,
           .heads = 4,
           .kv_heads = 2,
           .dim = 40,
           .value_dim = 24};
    c.options.causal = true;
    c.options.scale = 1.0;
    c.options.softcap = 3.0;
    c.options.alibi = Alibi{.num_heads = 4};
    add(c);
  }
  {
    Case c{.name = "softcap 50 window (Gemma 2)",
           .q_tokens = 150,
           .kv_tokens = 150,
           .heads = 2,
           .kv_heads = 1,
           .dim = 72,
           .value_dim = 72,
           .range = 6.0f};
    c.options.causal = true;
    c.options.window = 40;
    c.options.softcap = 50.0;
    add(c);
  }
  {
    Case c{.name = "softcap 2 T5 bidirectional",
           .q_tokens = 67,
           .kv_tokens = 67,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.softcap = 2.0;
    c.options.relative_bias = RelativeBias{.buckets = {32, 128, true}, .num_heads = 2};
    c.table = Uniform(64, 5, -1.0f, 1.0f);
    add(c);
  }
  {
    Case c{.name = "softcap 4 query scale chunks",
           .q_tokens = 50,
           .kv_tokens = 50,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.chunk_size = 24;
    c.options.scale = 0.8;
    c.options.softcap = 4.0;
    c.options.query_scale = LogFloorQueryScale{"llama4_attn_temperature", 0.5, 4.0, 1};
    add(c);
  }
  {
    Case c{.name = "sinks GQA causal",
           .q_tokens = 70,
           .kv_tokens = 70,
           .heads = 8,
           .kv_heads = 2,
           .dim = 33,
           .value_dim = 24};
    c.options.causal = true;
    c.sinks = Uniform(8, 6, -1.0f, 3.0f);
    add(c);
  }
  {
    Case c{.name = "sinks window (gpt-oss sliding layer)",
           .q_tokens = 140,
           .kv_tokens = 140,
           .heads = 4,
           .kv_heads = 1,
           .dim = 64,
           .value_dim = 64};
    c.options.causal = true;
    c.options.window = 32;
    c.sinks = Uniform(4, 7, -2.0f, 4.0f);
    add(c);
  }
  {
    // The forward kernel measures ALiBi from an anchor (the last key here): the sink moves with
    // it, and the true lse is restored.
    Case c{.name = "sinks ALiBi queries after the keys",
           .q_tokens = 5,
           .kv_tokens = 100,
           .heads = 2,
           .kv_heads = 1,
           .dim = 16,
           .value_dim = 8};
    c.options.alibi = Alibi{.num_heads = 2, .max_bias = 2.0};
    c.query_pos = Iota(5, 103);
    c.sinks = {0.5f, -1.0f};
    add(c);
  }
  {
    // Queries 0 .. 9 against keys 5 .. 24 under causal: rows 0 .. 4 see only the sink.
    Case c{.name = "sinks rows that see nothing",
           .q_tokens = 10,
           .kv_tokens = 20,
           .heads = 2,
           .kv_heads = 1,
           .dim = 8,
           .value_dim = 8};
    c.options.causal = true;
    c.query_pos = Iota(10);
    c.key_pos = Iota(20, 5);
    c.sinks = {1.0f, -0.5f};
    add(c);
  }
  {
    Case c{.name = "softcap and sinks, T5 causal",
           .q_tokens = 90,
           .kv_tokens = 90,
           .heads = 2,
           .kv_heads = 1,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.softcap = 2.5;
    c.options.relative_bias = RelativeBias{.buckets = {32, 128, false}, .num_heads = 2};
    c.table = Uniform(64, 8, -1.0f, 1.0f);
    c.sinks = {2.0f, 0.0f};
    add(c);
  }
  {
    Case c{.name = "decode softcap sinks GQA",
           .q_tokens = 1,
           .kv_tokens = 200,
           .heads = 8,
           .kv_heads = 2,
           .dim = 64,
           .value_dim = 64};
    c.options.causal = true;
    c.options.softcap = 5.0;
    c.sinks = Uniform(8, 9, 0.0f, 4.0f);
    add(c);
  }
  {
    // Split-K: the keys in chunks merged per row; the sink must count once.
    Case c{.name = "split-K decode sinks softcap ALiBi",
           .q_tokens = 2,
           .kv_tokens = 3000,
           .heads = 4,
           .kv_heads = 1,
           .dim = 40,
           .value_dim = 40};
    c.options.causal = true;
    c.options.softcap = 6.0;
    c.options.alibi = Alibi{.num_heads = 4, .max_bias = 0.5};
    c.sinks = Uniform(4, 10, 1.0f, 5.0f);
    add(c);
  }
  return cases;
}

TEST(AttentionSoftcapSinks, ReferenceMatchesTheDefinition) {
  for (Case c : Cases()) {
    c.Prepare();
    SCOPED_TRACE(c.name);
    const Definition def = Define(c);
    ExpectClose(ReferenceOut(c), def.out, 1e-6, "out");
  }
}

// The options matter: each case's output moves when softcap or sinks are taken away (so a kernel
// that ignored them would fail the comparisons below).
TEST(AttentionSoftcapSinks, TheOptionsChangeTheOutput) {
  for (Case c : Cases()) {
    c.Prepare();
    SCOPED_TRACE(c.name);
    const std::vector<float> with = ReferenceOut(c);
    Case without = c;
    without.options.softcap = 0.0;
    without.sinks.clear();
    const std::vector<float> plain = ReferenceOut(without);
    double largest = 0.0;
    for (size_t i = 0; i < with.size(); ++i) {
      largest = std::max(largest, std::abs(static_cast<double>(with[i]) - plain[i]));
    }
    EXPECT_GT(largest, 1e-2);
  }
}

TEST(AttentionSoftcapSinks, KernelMatchesReferenceOnEveryTargetFloat32) {
  for (Case c : Cases()) {
    c.Prepare();
    SCOPED_TRACE(c.name);
    const std::vector<float> want = ReferenceOut(c);
    const Definition def = Define(c);
    ForEachSimdTarget([&](int64_t) {
      ExpectClose(KernelAttention<float>(c), want, 2e-5, "Attention out", 1.0);
      const auto [out, lse] = KernelForward<float>(c);
      ExpectClose(out, want, 2e-5, "AttentionForward out", 1.0);
      // The log-sum-exp includes the sink (and is the sink for a row that sees nothing).
      for (size_t i = 0; i < lse.size(); ++i) {
        ASSERT_NEAR(lse[i], def.lse[i], 1e-5 * std::max(1.0, std::abs(def.lse[i]))) << "lse " << i;
      }
    });
  }
}

TEST(AttentionSoftcapSinks, KernelMatchesReferenceOnEveryTargetBFloat16) {
  ForEachBf16Arithmetic([] {
    for (Case c : Cases()) {
      c.bf16 = true;
      c.Prepare();
      SCOPED_TRACE(c.name);
      const std::vector<float> want = ReferenceOut(c);
      ForEachSimdTarget([&](int64_t) {
        // Weights rounded to bfloat16 at most (posenc/attention.h).
        ExpectClose(KernelAttention<BFloat16>(c), want, 0x1p-9 + 2e-5, "out", 1.0);
        ExpectClose(KernelForward<BFloat16>(c).first, want, 0x1p-9 + 2e-5, "forward out", 1.0);
      });
    }
  });
}

// Decode: query t alone against keys 0 .. t is row t of the causal prefill, with both options.
TEST(AttentionSoftcapSinks, DecodeStepEqualsLastRowOfPrefill) {
  Case c{.name = "decode",
         .q_tokens = 77,
         .kv_tokens = 77,
         .heads = 8,
         .kv_heads = 2,
         .dim = 72,
         .value_dim = 72};
  c.options.causal = true;
  c.options.softcap = 4.0;
  c.options.alibi = Alibi{.num_heads = 8};
  c.options.rope = Rope::Default(72);
  c.sinks = Uniform(8, 11, -1.0f, 3.0f);
  c.Prepare();
  ForEachSimdTarget([&](int64_t) {
    const std::vector<float> prefill = KernelAttention<float>(c);
    for (int64_t t = 74; t < 77; ++t) {
      std::vector<float> out(static_cast<size_t>(8 * 72));
      const AttentionOptions options = c.Options();
      Attention(options, Heads<const float>::Dense(c.q.data() + t * 8 * 72, 1, 8, 72),
                Heads<const float>::Dense(c.k.data(), t + 1, 2, 72),
                Heads<const float>::Dense(c.v.data(), t + 1, 2, 72), std::vector<int64_t>{t},
                Iota(t + 1), Heads<float>::Dense(out.data(), 1, 8, 72));
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], prefill[static_cast<size_t>(t * 8 * 72) + i], 1e-6) << t << " " << i;
      }
    }
  });
}

TEST(AttentionSoftcapSinks, BackwardKernelMatchesReferenceOnEveryTarget) {
  for (Case c : Cases()) {
    c.Prepare();
    SCOPED_TRACE(c.name);
    const Grads want = ReferenceGrads(c);
    ForEachSimdTarget([&](int64_t) {
      const Grads got = KernelGrads<float>(c);
      ExpectClose(got.dq, want.dq, 2e-5, "dq");
      ExpectClose(got.dk, want.dk, 2e-5, "dk");
      ExpectClose(got.dv, want.dv, 2e-5, "dv");
      ExpectClose(got.table, want.table, 2e-5, "relative bias table");
      ExpectClose(got.sinks, want.sinks, 2e-5, "sinks");
    });
  }
}

TEST(AttentionSoftcapSinks, BFloat16BackwardKernelMatchesReference) {
  for (Case c : Cases()) {
    c.bf16 = true;
    c.Prepare();
    SCOPED_TRACE(c.name);
    const Grads want = ReferenceGrads(c);
    ForEachSimdTarget([&](int64_t) {
      const Grads got = KernelGrads<BFloat16>(c);
      ExpectClose(got.dq, want.dq, 3e-2, "dq");
      ExpectClose(got.dk, want.dk, 3e-2, "dk");
      ExpectClose(got.dv, want.dv, 3e-2, "dv");
      ExpectClose(got.table, want.table, 3e-2, "relative bias table");
      ExpectClose(got.sinks, want.sinks, 3e-2, "sinks");
    });
  }
}

// Every gradient of the reference, and the sinks' of the kernel, against central differences
// of the definition's loss in double.
void ExpectFiniteDifferences(Case c) {
  c.Prepare();
  SCOPED_TRACE(c.name);
  const Grads g = ReferenceGrads(c);
  Grads kernel(c);
  ForEachSimdTarget([&](int64_t) { kernel = KernelGrads<float>(c); });
  std::vector<double> q = Widen(c.q), k = Widen(c.k), v = Widen(c.v), sinks = Widen(c.sinks),
                      table = Widen(c.table);
  constexpr double kStep = 1e-4;
  const auto check = [&](std::vector<double>& x, const std::vector<float>& grad,
                         const std::string& what, double tolerance) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + kStep;
      const double up = Define(c, q, k, v, sinks, table).loss;
      x[i] = saved - kStep;
      const double down = Define(c, q, k, v, sinks, table).loss;
      x[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * kStep), tolerance) << what << " element " << i;
    }
  };
  check(q, g.dq, "dq", 2e-6);
  check(k, g.dk, "dk", 2e-6);
  check(v, g.dv, "dv", 2e-6);
  check(table, g.table, "relative bias table", 2e-6);
  check(sinks, g.sinks, "sinks", 2e-6);
  check(sinks, kernel.sinks, "kernel's sinks", 1e-5);
}

TEST(AttentionSoftcapSinks, GradientsMatchFiniteDifferences) {
  Case base{.q_tokens = 6, .kv_tokens = 7, .heads = 2, .kv_heads = 1, .dim = 8, .value_dim = 4};
  base.key_pos = Iota(7);
  base.query_pos = {1, 2, 3, 4, 5, 6};
  {
    Case c = base;
    c.name = "softcap causal ALiBi GQA";
    c.options.causal = true;
    c.options.scale = 1.0;
    c.options.softcap = 1.5;
    c.options.alibi = Alibi{.num_heads = 2};
    ExpectFiniteDifferences(c);
  }
  {
    Case c = base;
    c.name = "softcap T5 window";
    c.options.causal = true;
    c.options.window = 3;
    c.options.softcap = 2.0;
    c.options.relative_bias = RelativeBias{.buckets = {8, 16, false}, .num_heads = 2};
    c.table = Uniform(16, 9, -1.0f, 1.0f);
    ExpectFiniteDifferences(c);
  }
  {
    Case c = base;
    c.name = "sinks GQA causal";
    c.options.causal = true;
    c.sinks = {0.7f, 1.9f};
    ExpectFiniteDifferences(c);
  }
  {
    Case c = base;
    c.name = "sinks and softcap, rows that see nothing";
    c.options.causal = true;
    c.options.softcap = 3.0;
    c.query_pos = {0, 1, 2, 3, 4, 5};
    c.key_pos = Iota(7, 3);
    c.sinks = {-0.3f, 1.2f};
    ExpectFiniteDifferences(c);
  }
}

// Bound to the values of the loss: dsink_h = -sum_i p_sink(i, h) (do_i . o_i), written out.
TEST(AttentionSoftcapSinks, SinkGradientIsMinusSinkWeightTimesDelta) {
  Case c{.name = "sink gradient",
         .q_tokens = 9,
         .kv_tokens = 9,
         .heads = 4,
         .kv_heads = 2,
         .dim = 16,
         .value_dim = 8};
  c.options.causal = true;
  c.sinks = {0.0f, 1.0f, 2.0f, -1.0f};
  c.Prepare();
  const Definition def = Define(c);
  std::vector<double> want(4, 0.0);
  for (int64_t i = 0; i < 9; ++i) {
    for (int64_t h = 0; h < 4; ++h) {
      double delta = 0.0;
      for (int64_t e = 0; e < 8; ++e)
        delta += c.d_out[(i * 4 + h) * 8 + e] * def.out[(i * 4 + h) * 8 + e];
      want[h] -= std::exp(c.sinks[h] - def.lse[i * 4 + h]) * delta;
    }
  }
  ForEachSimdTarget(
      [&](int64_t) { ExpectClose(KernelGrads<float>(c).sinks, want, 1e-5, "sinks"); });
}

TEST(AttentionSoftcapSinks, RejectsBadArguments) {
  Case c{.name = "checks",
         .q_tokens = 4,
         .kv_tokens = 4,
         .heads = 2,
         .kv_heads = 1,
         .dim = 8,
         .value_dim = 8};
  c.Prepare();
  std::vector<float> out(c.OutSize(), std::nanf(""));
  const auto run = [&](const AttentionOptions& o) {
    Attention(o, c.Q(), c.K(), c.V(), c.query_pos, c.key_pos,
              Heads<float>::Dense(out.data(), 4, 2, 8));
  };
  const std::string range =
      "a positive normal float32, in [1.1754943508222875e-38, 3.4028234663852886e+38]";
  for (const auto& [value, shown] : {std::pair{-1.0, "-1"}, std::pair{std::nan(""), "nan"},
                                     std::pair{kInf, "inf"}, std::pair{1e-300, "1e-300"}}) {
    AttentionOptions o;
    o.softcap = value;
    ExpectError([&] { run(o); },
                std::string("[attention] softcap must be finite and > 0 (0: off), ") + range +
                    ", got " + shown);
  }
  const std::vector<float> three(3, 0.0f), nan_sink{0.0f, std::nanf("")};
  AttentionOptions o;
  o.sinks = three;
  ExpectError([&] { run(o); },
              "[attention] sinks.size() must equal q.num_heads (2) (one logit per query head), "
              "got 3");
  o.sinks = nan_sink;
  ExpectError([&] { run(o); }, "[attention] sinks[1] must be finite, got nan");
  for (const float x : out) EXPECT_TRUE(std::isnan(x)) << "nothing written";

  // Backward: grads.sinks has a slot per sink, and none without sinks.
  c.sinks = {0.5f, 1.0f};
  std::vector<float> fwd(c.OutSize()), lse(8);
  AttentionForward(c.Options(), c.Q(), c.K(), c.V(), c.query_pos, c.key_pos,
                   Heads<float>::Dense(fwd.data(), 4, 2, 8), lse);
  Grads g(c);
  const auto backward = [&](const AttentionOptions& opts, AttentionGradients grads) {
    AttentionBackward(opts, c.Q(), c.K(), c.V(), c.query_pos, c.key_pos,
                      Heads<const float>::Dense(fwd.data(), 4, 2, 8), lse, c.DOut(), grads);
  };
  AttentionGradients missing = g.View(c);
  missing.sinks = {};
  ExpectError([&] { backward(c.Options(), missing); },
              "[attention_backward] grads.sinks.size() must equal sinks.size() (2), got 0");
  AttentionOptions no_sinks = c.Options();
  no_sinks.sinks = {};
  ExpectError([&] { backward(no_sinks, g.View(c)); },
              "[attention_backward] grads.sinks must be empty without sinks, got 2");
  AttentionGradients aliased = g.View(c);
  aliased.sinks = std::span<float>(g.dq).first(2);
  ExpectError([&] { backward(c.Options(), aliased); },
              "[attention_backward] grads.sinks must not share memory with an input or another "
              "gradient, got a span overlapping dq");
  for (const float x : g.sinks) EXPECT_TRUE(std::isnan(x)) << "nothing written";

  // Self-Extend does not take them.
  AttentionOptions se_options;
  se_options.rope = Rope::Default(8);
  se_options.causal = true;
  se_options.softcap = 30.0;
  const SelfExtend se{.group_size = 2, .neighbor_window = 2};
  ExpectError(
      [&] {
        SelfExtendAttention(se_options, se, c.Q(), c.K(), c.V(), c.query_pos, c.key_pos,
                            Heads<float>::Dense(out.data(), 4, 2, 8));
      },
      "[self_extend] options.softcap must not be given (not supported with "
      "Self-Extend), got 30");
}

}  // namespace
}  // namespace posenc
