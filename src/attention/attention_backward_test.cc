// Attention's backward pass: AttentionBackwardReference against central finite differences of
// the loss sum(d_out * out), written here from the definition in double; the kernel
// (AttentionBackward) against the reference on every compiled SIMD target, for every mask, bias,
// grouping and rotation; the same bits for every thread count; AttentionForward's log-sum-exp;
// and the argument checks.
#include "posenc/attention_backward.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_reference_row.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/relative_bias.h"
#include "posenc/rope.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;

// One attention call: shapes, options, positions, and inputs uniform in [-range, range].
struct Case {
  std::string name;
  int64_t q_tokens = 0, kv_tokens = 0, heads = 1, kv_heads = 1, dim = 8, value_dim = 8;
  AttentionOptions options;
  std::vector<int64_t> query_pos, key_pos;  // default 0 .. tokens - 1
  std::vector<float> table;                 // T5's table, when options.relative_bias is given
  float range = 1.5f;
};

std::vector<float> Uniform(size_t n, uint32_t seed, float range) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-range, range);
  std::vector<float> x(n);
  for (float& e : x) e = uniform(rng);
  return x;
}

std::vector<int64_t> Iota(int64_t n, int64_t first = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The inputs of a case, dense float32 (bfloat16-representable when `bf16`), and d_out.
struct Inputs {
  std::vector<float> q, k, v, d_out;
  Inputs(const Case& c, bool bf16) {
    q = Uniform(static_cast<size_t>(c.q_tokens * c.heads * c.dim), 1, c.range);
    k = Uniform(static_cast<size_t>(c.kv_tokens * c.kv_heads * c.dim), 2, c.range);
    v = Uniform(static_cast<size_t>(c.kv_tokens * c.kv_heads * c.value_dim), 3, 1.0f);
    d_out = Uniform(static_cast<size_t>(c.q_tokens * c.heads * c.value_dim), 4, 1.0f);
    if (bf16) {
      for (auto* x : {&q, &k, &v}) {
        for (float& e : *x) e = ToFloat(FromFloat<BFloat16>(e));
      }
    }
  }
};

// Gradients as dense arrays.
struct Grads {
  std::vector<float> dq, dk, dv, table;
  Grads(const Case& c)
      : dq(static_cast<size_t>(c.q_tokens * c.heads * c.dim), std::nanf("")),
        dk(static_cast<size_t>(c.kv_tokens * c.kv_heads * c.dim), std::nanf("")),
        dv(static_cast<size_t>(c.kv_tokens * c.kv_heads * c.value_dim), std::nanf("")),
        table(c.table.size(), std::nanf("")) {}
  AttentionGradients View(const Case& c) {
    return {Heads<float>::Dense(dq.data(), c.q_tokens, c.heads, c.dim),
            Heads<float>::Dense(dk.data(), c.kv_tokens, c.kv_heads, c.dim),
            Heads<float>::Dense(dv.data(), c.kv_tokens, c.kv_heads, c.value_dim), table};
  }
};

// The case's options with its table and positions in place (the options read the table).
struct Prepared {
  Case c;
  Prepared(Case in) : c(std::move(in)) {
    if (c.query_pos.empty()) c.query_pos = Iota(c.q_tokens);
    if (c.key_pos.empty()) c.key_pos = Iota(c.kv_tokens);
    if (c.options.relative_bias) c.options.relative_bias->table = c.table;
  }
};

Grads Reference(const Case& c, const Inputs& in) {
  Grads g(c);
  AttentionBackwardReference(
      c.options, Heads<const float>::Dense(in.q.data(), c.q_tokens, c.heads, c.dim),
      Heads<const float>::Dense(in.k.data(), c.kv_tokens, c.kv_heads, c.dim),
      Heads<const float>::Dense(in.v.data(), c.kv_tokens, c.kv_heads, c.value_dim), c.query_pos,
      c.key_pos, Heads<const float>::Dense(in.d_out.data(), c.q_tokens, c.heads, c.value_dim),
      g.View(c));
  return g;
}

// The kernel: AttentionForward, then AttentionBackward, on T storage.
template <typename T>
Grads Kernel(const Case& c, const Inputs& in) {
  const auto store = [](const std::vector<float>& x) {
    std::vector<T> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = FromFloat<T>(x[i]);
    return out;
  };
  const std::vector<T> q = store(in.q), k = store(in.k), v = store(in.v);
  const auto qv = Heads<const T>::Dense(q.data(), c.q_tokens, c.heads, c.dim);
  const auto kv = Heads<const T>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim);
  const auto vv = Heads<const T>::Dense(v.data(), c.kv_tokens, c.kv_heads, c.value_dim);
  std::vector<float> out(in.d_out.size()), lse(static_cast<size_t>(c.q_tokens * c.heads));
  const auto outv = Heads<float>::Dense(out.data(), c.q_tokens, c.heads, c.value_dim);
  AttentionForward(c.options, qv, kv, vv, c.query_pos, c.key_pos, outv, lse);
  Grads g(c);
  AttentionBackward(c.options, qv, kv, vv, c.query_pos, c.key_pos, outv, lse,
                    Heads<const float>::Dense(in.d_out.data(), c.q_tokens, c.heads, c.value_dim),
                    g.View(c));
  return g;
}

// Expects got within tolerance * max|want| (+ a tiny floor) of want, element by element.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-3;
  for (const float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * scale) << what << " element " << i;
  }
}

// The cases the kernel is held to: every mask, bias, grouping and rotation, shapes that are not
// multiples of the tiles (32 query rows, 64 keys) or of any vector length.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  const auto add = [&](Case c) { cases.push_back(std::move(c)); };
  add({.name = "plain",
       .q_tokens = 37,
       .kv_tokens = 37,
       .heads = 2,
       .kv_heads = 2,
       .dim = 16,
       .value_dim = 16});
  {
    Case c{.name = "causal GQA",
           .q_tokens = 70,
           .kv_tokens = 70,
           .heads = 4,
           .kv_heads = 2,
           .dim = 40,
           .value_dim = 24};
    c.options.causal = true;
    add(c);
  }
  {
    Case c{.name = "window",
           .q_tokens = 150,
           .kv_tokens = 150,
           .heads = 2,
           .kv_heads = 1,
           .dim = 32,
           .value_dim = 32};
    c.options.causal = true;
    c.options.window = 20;
    add(c);
  }
  {
    Case c{.name = "chunks",
           .q_tokens = 130,
           .kv_tokens = 130,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 8};
    c.options.causal = true;
    c.options.chunk_size = 48;
    add(c);
  }
  {
    Case c{.name = "ALiBi causal",
           .q_tokens = 90,
           .kv_tokens = 90,
           .heads = 4,
           .kv_heads = 4,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.alibi = Alibi{.num_heads = 4};
    add(c);
  }
  {
    // Queries far beyond every key: the forward kernel's ALiBi anchor is not the query.
    Case c{.name = "ALiBi queries after the keys",
           .q_tokens = 5,
           .kv_tokens = 100,
           .heads = 2,
           .kv_heads = 1,
           .dim = 16,
           .value_dim = 8};
    c.options.alibi = Alibi{.num_heads = 2, .max_bias = 2.0};
    c.query_pos = Iota(5, 1000);
    add(c);
  }
  {
    Case c{.name = "T5 bidirectional",
           .q_tokens = 140,
           .kv_tokens = 140,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.relative_bias = RelativeBias{.buckets = {32, 128, true}, .num_heads = 2};
    c.table = Uniform(64, 5, 1.0f);
    add(c);
  }
  {
    Case c{.name = "T5 causal",
           .q_tokens = 100,
           .kv_tokens = 100,
           .heads = 2,
           .kv_heads = 1,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.relative_bias = RelativeBias{.buckets = {32, 128, false}, .num_heads = 2};
    c.table = Uniform(64, 6, 1.0f);
    add(c);
  }
  {
    // Positions 1000 apart and a max_distance past the kernel's dense table: buckets looked up.
    Case c{.name = "T5 far buckets",
           .q_tokens = 40,
           .kv_tokens = 40,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.relative_bias = RelativeBias{.buckets = {32, 1 << 20, true}, .num_heads = 2};
    c.table = Uniform(64, 7, 1.0f);
    for (int64_t i = 0; i < 40; ++i) {
      c.query_pos.push_back(1000 * i);
      c.key_pos.push_back(1000 * i + 3);
    }
    add(c);
  }
  {
    Case c{.name = "partial RoPE",
           .q_tokens = 66,
           .kv_tokens = 66,
           .heads = 2,
           .kv_heads = 1,
           .dim = 32,
           .value_dim = 32};
    c.options.causal = true;
    c.options.rope = Rope::Default(32, 10000.0, RopeLayout::kHalfSplit, 16, 4);
    add(c);
  }
  {
    Case c{.name = "query scale",
           .q_tokens = 50,
           .kv_tokens = 50,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.query_scale = LogFloorQueryScale{"llama4_attn_temperature", 0.5, 4.0, 1};
    c.options.scale = 0.5;
    add(c);
  }
  {
    // Keys in shuffled order, at positions with gaps: nothing may assume contiguity.
    Case c{.name = "shuffled keys",
           .q_tokens = 80,
           .kv_tokens = 80,
           .heads = 2,
           .kv_heads = 2,
           .dim = 16,
           .value_dim = 16};
    c.options.causal = true;
    c.options.alibi = Alibi{.num_heads = 2};
    c.query_pos = Iota(80);
    for (int64_t& p : c.query_pos) p *= 3;
    c.key_pos = c.query_pos;
    std::shuffle(c.key_pos.begin(), c.key_pos.end(), std::mt19937(8));
    add(c);
  }
  {
    // Queries 0 .. 9 against keys 5 .. 24 under causal: rows 0 .. 4 see nothing.
    Case c{.name = "rows that see nothing",
           .q_tokens = 10,
           .kv_tokens = 20,
           .heads = 2,
           .kv_heads = 1,
           .dim = 8,
           .value_dim = 8};
    c.options.causal = true;
    c.key_pos = Iota(20, 5);
    add(c);
  }
  return cases;
}

TEST(AttentionBackward, KernelMatchesReferenceOnEveryTarget) {
  for (const Case& raw : Cases()) {
    const Prepared p(raw);
    SCOPED_TRACE(p.c.name);
    const Inputs in(p.c, false);
    const Grads want = Reference(p.c, in);
    ForEachSimdTarget([&](int64_t) {
      const Grads got = Kernel<float>(p.c, in);
      ExpectClose(got.dq, want.dq, 2e-5, "dq");
      ExpectClose(got.dk, want.dk, 2e-5, "dk");
      ExpectClose(got.dv, want.dv, 2e-5, "dv");
      ExpectClose(got.table, want.table, 2e-5, "relative bias table");
    });
  }
}

TEST(AttentionBackward, BFloat16KernelMatchesReferenceOnWidenedInputs) {
  for (const Case& raw : Cases()) {
    const Prepared p(raw);
    SCOPED_TRACE(p.c.name);
    const Inputs in(p.c, true);
    const Grads want = Reference(p.c, in);
    ForEachSimdTarget([&](int64_t) {
      // The forward pass may round weights to bfloat16 (posenc/attention.h), and RoPE rounds
      // the rotated q and k to bfloat16: percent-level differences from the float64 gradients.
      const Grads got = Kernel<BFloat16>(p.c, in);
      ExpectClose(got.dq, want.dq, 3e-2, "dq");
      ExpectClose(got.dk, want.dk, 3e-2, "dk");
      ExpectClose(got.dv, want.dv, 3e-2, "dv");
      ExpectClose(got.table, want.table, 3e-2, "relative bias table");
    });
  }
}

// The loss sum(d_out * out) from the definition, in double, for finite differences: q, k, v and
// T5's table as double; RoPE by the double reference on float64 storage.
double Loss(const Case& c, std::vector<double> q, std::vector<double> k,
            const std::vector<double>& v, const std::vector<double>& table,
            const std::vector<float>& d_out) {
  if (c.options.rope) {
    ApplyRopeReference(*c.options.rope, c.query_pos,
                       Heads<const double>::Dense(q.data(), c.q_tokens, c.heads, c.dim),
                       Heads<double>::Dense(q.data(), c.q_tokens, c.heads, c.dim),
                       RopeDirection::kForward);
    ApplyRopeReference(*c.options.rope, c.key_pos,
                       Heads<const double>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim),
                       Heads<double>::Dense(k.data(), c.kv_tokens, c.kv_heads, c.dim),
                       RopeDirection::kForward);
  }
  const double scale = c.options.scale > 0 ? c.options.scale : 1.0 / std::sqrt(c.dim);
  const std::vector<double> slopes =
      c.options.alibi ? AlibiSlopes(*c.options.alibi) : std::vector<double>();
  const int64_t group = c.heads / c.kv_heads;
  double loss = 0.0;
  for (int64_t i = 0; i < c.q_tokens; ++i) {
    const double qs = c.options.query_scale ? c.options.query_scale->At(c.query_pos[i]) : 1.0;
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> s;
      std::vector<int64_t> seen;
      for (int64_t j = 0; j < c.kv_tokens; ++j) {
        if (!internal::VisibleByMask(c.options, c.query_pos[i], c.key_pos[j])) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < c.dim; ++d) {
          dot += q[(i * c.heads + h) * c.dim + d] * k[(j * c.kv_heads + g) * c.dim + d];
        }
        double score = scale * qs * dot;
        if (c.options.alibi) score += AlibiBias(slopes[h], c.query_pos[i], c.key_pos[j]);
        if (c.options.relative_bias) {
          const int64_t b = RelativePositionBucket(c.options.relative_bias->buckets,
                                                   c.key_pos[j] - c.query_pos[i]);
          score += table[b * c.heads + h];
        }
        s.push_back(score);
        seen.push_back(j);
      }
      if (s.empty()) continue;
      const double max = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - max));
      for (size_t n = 0; n < seen.size(); ++n) {
        for (int64_t e = 0; e < c.value_dim; ++e) {
          loss += s[n] / sum * v[(seen[n] * c.kv_heads + g) * c.value_dim + e] *
                  d_out[(i * c.heads + h) * c.value_dim + e];
        }
      }
    }
  }
  return loss;
}

// Every gradient of the reference against central differences of Loss, in double.
void ExpectFiniteDifferences(const Case& raw) {
  const Prepared p(raw);
  const Case& c = p.c;
  SCOPED_TRACE(c.name);
  const Inputs in(c, false);
  const Grads g = Reference(c, in);
  const auto widen = [](const std::vector<float>& x) {
    return std::vector<double>(x.begin(), x.end());
  };
  std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v), table = widen(c.table);
  constexpr double kStep = 1e-4;
  const auto check = [&](std::vector<double>& x, const std::vector<float>& grad,
                         const std::string& what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + kStep;
      const double up = Loss(c, q, k, v, table, in.d_out);
      x[i] = saved - kStep;
      const double down = Loss(c, q, k, v, table, in.d_out);
      x[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * kStep), 2e-6) << what << " element " << i;
    }
  };
  check(q, g.dq, "dq");
  check(k, g.dk, "dk");
  check(v, g.dv, "dv");
  check(table, g.table, "relative bias table");
}

TEST(AttentionBackward, ReferenceMatchesFiniteDifferences) {
  Case base{.q_tokens = 6, .kv_tokens = 7, .heads = 2, .kv_heads = 1, .dim = 8, .value_dim = 4};
  base.key_pos = Iota(7);
  base.query_pos = {1, 2, 3, 4, 5, 6};
  {
    Case c = base;
    c.name = "causal ALiBi GQA";
    c.options.causal = true;
    c.options.alibi = Alibi{.num_heads = 2};
    ExpectFiniteDifferences(c);
  }
  {
    Case c = base;
    c.name = "T5 window";
    c.options.causal = true;
    c.options.window = 3;
    c.options.relative_bias = RelativeBias{.buckets = {8, 16, false}, .num_heads = 2};
    c.table = Uniform(16, 9, 1.0f);
    ExpectFiniteDifferences(c);
  }
  {
    Case c = base;
    c.name = "RoPE interleaved, query scale, chunks";
    c.options.rope = Rope::Default(8, 100.0, RopeLayout::kInterleaved);
    c.options.query_scale = LogFloorQueryScale{"llama4_attn_temperature", 0.5, 2.0, 1};
    c.options.chunk_size = 4;
    ExpectFiniteDifferences(c);
  }
}

TEST(AttentionBackward, SameBitsForEveryThreadCount) {
  // 2 KV heads: one thread per KV head at 1 and 2 threads, the two-phase schedule at 3 and 4;
  // 1 KV head: per head at 1 thread, two phases at 2. T5 checks its table gradient's order too.
  for (const int64_t kv_heads : {int64_t{2}, int64_t{1}}) {
    Case c{.name = "threads",
           .q_tokens = 150,
           .kv_tokens = 150,
           .heads = 4,
           .kv_heads = kv_heads,
           .dim = 64,
           .value_dim = 64};
    c.options.causal = true;
    c.options.relative_bias = RelativeBias{.buckets = {32, 128, false}, .num_heads = 4};
    c.table = Uniform(128, 10, 1.0f);
    const Prepared p(c);
    const Inputs in(p.c, false);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const Grads one = Kernel<float>(p.c, in);
    for (const int threads : {2, 3, 4}) {
      omp_set_num_threads(threads);
      const Grads many = Kernel<float>(p.c, in);
      EXPECT_EQ(many.dq, one.dq) << threads << " threads, " << kv_heads << " KV heads";
      EXPECT_EQ(many.dk, one.dk) << threads << " threads";
      EXPECT_EQ(many.dv, one.dv) << threads << " threads";
      EXPECT_EQ(many.table, one.table) << threads << " threads";
    }
    omp_set_num_threads(saved);
  }
}

TEST(AttentionBackward, ForwardWritesTheTrueLogSumExp) {
  // lse_i = log sum_j exp(s_ij) over visible keys, from the definition in double; queries after
  // every key (ALiBi's anchor is then the last key, not the query) and a row that sees nothing.
  Case c{.q_tokens = 3, .kv_tokens = 40, .heads = 2, .kv_heads = 1, .dim = 8, .value_dim = 8};
  c.options.alibi = Alibi{.num_heads = 2};
  c.options.causal = true;
  c.query_pos = {500, 20, 2};
  c.key_pos = Iota(40, 10);
  const Inputs in(c, false);
  std::vector<float> out(static_cast<size_t>(3 * 2 * 8)), lse(6);
  const auto qv = Heads<const float>::Dense(in.q.data(), 3, 2, 8);
  const auto kv = Heads<const float>::Dense(in.k.data(), 40, 1, 8);
  AttentionForward(c.options, qv, kv, Heads<const float>::Dense(in.v.data(), 40, 1, 8), c.query_pos,
                   c.key_pos, Heads<float>::Dense(out.data(), 3, 2, 8), lse);
  const std::vector<double> slopes = AlibiSlopes(*c.options.alibi);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      double sum = 0.0;
      for (int64_t j = 0; j < 40; ++j) {
        if (c.key_pos[j] > c.query_pos[i]) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < 8; ++d) dot += in.q[(i * 2 + h) * 8 + d] * in.k[j * 8 + d];
        sum += std::exp(dot / std::sqrt(8.0) + AlibiBias(slopes[h], c.query_pos[i], c.key_pos[j]));
      }
      const float got = lse[static_cast<size_t>(i * 2 + h)];
      if (sum == 0.0) {
        EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << "row " << i;
      } else {
        EXPECT_NEAR(got, std::log(sum), 1e-4 * std::max(1.0, std::abs(std::log(sum))))
            << "row " << i << " head " << h;
      }
    }
  }
}

TEST(AttentionBackward, EmptyCallsWriteZeroGradients) {
  // No queries: dk and dv are 0 (no query reads them); no keys: dq is 0.
  for (const auto& [q_tokens, kv_tokens] : {std::pair{0, 5}, std::pair{4, 0}}) {
    Case c{.q_tokens = q_tokens,
           .kv_tokens = kv_tokens,
           .heads = 2,
           .kv_heads = 1,
           .dim = 8,
           .value_dim = 8};
    const Prepared p(c);
    const Inputs in(p.c, false);
    const Grads g = Kernel<float>(p.c, in);
    for (const auto* x : {&g.dq, &g.dk, &g.dv}) {
      for (const float e : *x) EXPECT_EQ(e, 0.0f);
    }
  }
}

TEST(AttentionBackward, ANaNQueryMakesNaNTheGradientsItReaches) {
  // Causal, 5 tokens, a NaN in query 2: in the math its row's scores, weights and dS are NaN, so
  // are dq of row 2 and dk, dv of the keys it sees (0 to 2); no other row reads query 2, so the
  // other rows of dq stay finite, and so does dv of keys 3 and 4, which row 2 does not see. (dK's
  // product multiplies query 2 by those keys' zero dS, which makes their dk NaN as in PyTorch's
  // composed attention; the math leaves them finite, and the test does not ask.)
  Case c{.q_tokens = 5, .kv_tokens = 5, .dim = 8, .value_dim = 8};
  c.options.causal = true;
  const Prepared p(c);
  Inputs in(p.c, false);
  in.q[2 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  // Tokens [nan_begin, nan_end) of x must be NaN in every element, the others below finite_end
  // finite.
  const auto expect_rows = [](const std::vector<float>& x, int64_t nan_begin, int64_t nan_end,
                              int64_t finite_end, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const auto token = static_cast<int64_t>(i / 8);
      if (token >= nan_begin && token < nan_end) {
        EXPECT_TRUE(std::isnan(x[i])) << what << " token " << token << ": " << x[i];
      } else if (token < finite_end) {
        EXPECT_TRUE(std::isfinite(x[i])) << what << " token " << token << ": " << x[i];
      }
    }
  };
  ForEachSimdTarget([&](int64_t) {
    const Grads g = Kernel<float>(p.c, in);
    expect_rows(g.dq, 2, 3, 5, "dq");
    expect_rows(g.dk, 0, 3, 0, "dk");
    expect_rows(g.dv, 0, 3, 5, "dv");
  });
}

TEST(AttentionBackward, RejectsBadArgumentsBeforeWriting) {
  Case c{.q_tokens = 4, .kv_tokens = 4, .heads = 2, .kv_heads = 1, .dim = 8, .value_dim = 8};
  const Prepared p(c);
  const Inputs in(p.c, false);
  const auto q = Heads<const float>::Dense(in.q.data(), 4, 2, 8);
  const auto k = Heads<const float>::Dense(in.k.data(), 4, 1, 8);
  const auto v = Heads<const float>::Dense(in.v.data(), 4, 1, 8);
  std::vector<float> out(64), lse(8);
  const auto outv = Heads<const float>::Dense(out.data(), 4, 2, 8);
  const auto d_out = Heads<const float>::Dense(in.d_out.data(), 4, 2, 8);
  Grads g(p.c);
  const auto run = [&](AttentionGradients grads, std::span<const float> l) {
    AttentionBackward(p.c.options, q, k, v, p.c.query_pos, p.c.key_pos, outv, l, d_out, grads);
  };
  ExpectError([&] { run(g.View(p.c), std::span<const float>(lse).first(7)); },
              "[attention_backward] lse.size() must equal q.tokens * q.num_heads (8), got 7");
  AttentionGradients wrong = g.View(p.c);
  wrong.dk = Heads<float>::Dense(g.dk.data(), 4, 1, 4);
  ExpectError([&] { run(wrong, lse); },
              "[attention_backward] grads.dk.head_dim must equal k.head_dim (8), got 4");
  AttentionGradients aliased = g.View(p.c);
  aliased.dv = Heads<float>::Dense(g.dk.data(), 4, 1, 8);
  ExpectError([&] { run(aliased, lse); },
              "[attention_backward] grads.dv must not share memory with another gradient, got a "
              "view overlapping dk");
  std::vector<float> table(4);
  AttentionGradients extra = g.View(p.c);
  extra.relative_bias_table = table;
  ExpectError([&] { run(extra, lse); },
              "[attention_backward] grads.relative_bias_table must be empty without "
              "relative_bias, got 4");
  for (const float e : g.dq) EXPECT_TRUE(std::isnan(e)) << "nothing written";
  // The forward's lse too.
  std::vector<float> small(7), out2(64);
  ExpectError(
      [&] {
        AttentionForward(p.c.options, q, k, v, p.c.query_pos, p.c.key_pos,
                         Heads<float>::Dense(out2.data(), 4, 2, 8), small);
      },
      "[attention] lse.size() must equal q.tokens * q.num_heads (8), got 7");
}

}  // namespace
}  // namespace posenc
