#include "posenc/attention_backward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "attention_backward_kernels.h"
#include "attention_call.h"
#include "attention_kernels.h"
#include "attention_reference_row.h"
#include "posenc/alibi.h"
#include "posenc/error.h"
#include "relative_bias_internal.h"
#include "rows.h"

namespace posenc {
namespace {

constexpr std::string_view kForward = "attention";
constexpr std::string_view kBackward = "attention_backward";

using internal::Equal;

// Whether the bytes of a span and of a view's rows meet (a conservative test on byte ranges).
template <typename A, typename B>
bool SpanOverlaps(std::span<A> span, const Heads<B>& view) {
  if (span.empty() || view.Empty()) return false;
  const char* lo = reinterpret_cast<const char*>(span.data());
  const char* hi = lo + span.size_bytes();
  return lo < static_cast<const char*>(view.End()) && static_cast<const char*>(view.Begin()) < hi;
}

template <typename A, typename B>
bool SpansOverlap(std::span<A> a, std::span<B> b) {
  if (a.empty() || b.empty()) return false;
  const char* a_lo = reinterpret_cast<const char*>(a.data());
  const char* b_lo = reinterpret_cast<const char*>(b.data());
  return a_lo < b_lo + b.size_bytes() && b_lo < a_lo + a.size_bytes();
}

// lse holds one entry per (query token, head) and meets no other argument.
template <typename T, typename Out, typename L>
void CheckLse(std::string_view function, Heads<const T> q, Heads<const T> k, Heads<const T> v,
              Heads<Out> out, std::span<L> lse) {
  const int64_t rows = q.tokens * q.num_heads;
  Require(static_cast<int64_t>(lse.size()) == rows, function, "lse.size()",
          Equal("q.tokens * q.num_heads", rows), static_cast<int64_t>(lse.size()));
  const std::string_view rule = "not share memory with q, k, v or out";
  Require(!SpanOverlaps(lse, q), function, "lse", rule, "a span overlapping q");
  Require(!SpanOverlaps(lse, k), function, "lse", rule, "a span overlapping k");
  Require(!SpanOverlaps(lse, v), function, "lse", rule, "a span overlapping v");
  Require(!SpanOverlaps(lse, out), function, "lse", rule, "a span overlapping out");
}

// A gradient view: well formed, shaped like `like`, meeting no input.
template <typename T>
void CheckGradient(Heads<float> grad, std::string_view name, Heads<const T> like,
                   std::string_view like_name, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                   Heads<const float> out, Heads<const float> d_out) {
  grad.Validate(kBackward, name);
  const std::string n(name), l(like_name);
  Require(grad.tokens == like.tokens, kBackward, n + ".tokens", Equal(l + ".tokens", like.tokens),
          grad.tokens);
  Require(grad.num_heads == like.num_heads, kBackward, n + ".num_heads",
          Equal(l + ".num_heads", like.num_heads), grad.num_heads);
  Require(grad.head_dim == like.head_dim, kBackward, n + ".head_dim",
          Equal(l + ".head_dim", like.head_dim), grad.head_dim);
  const std::string_view rule = "not share memory with q, k, v, out or d_out";
  Require(!internal::RowsOverlap(grad, q), kBackward, name, rule, "a view overlapping q");
  Require(!internal::RowsOverlap(grad, k), kBackward, name, rule, "a view overlapping k");
  Require(!internal::RowsOverlap(grad, v), kBackward, name, rule, "a view overlapping v");
  Require(!internal::RowsOverlap(grad, out), kBackward, name, rule, "a view overlapping out");
  Require(!internal::RowsOverlap(grad, d_out), kBackward, name, rule, "a view overlapping d_out");
}

template <typename T>
void CheckBackward(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                   Heads<const T> v, std::span<const int64_t> query_pos,
                   std::span<const int64_t> key_pos, Heads<const float> out,
                   std::span<const float> lse, Heads<const float> d_out,
                   const AttentionGradients& grads) {
  internal::CheckAttention(options, q, k, v, query_pos, key_pos, out);
  CheckLse(kBackward, q, k, v, out, lse);
  d_out.Validate(kBackward, "d_out");
  Require(d_out.tokens == out.tokens, kBackward, "d_out.tokens", Equal("out.tokens", out.tokens),
          d_out.tokens);
  Require(d_out.num_heads == out.num_heads, kBackward, "d_out.num_heads",
          Equal("out.num_heads", out.num_heads), d_out.num_heads);
  Require(d_out.head_dim == out.head_dim, kBackward, "d_out.head_dim",
          Equal("out.head_dim", out.head_dim), d_out.head_dim);
  CheckGradient(grads.dq, "grads.dq", q, "q", q, k, v, out, d_out);
  CheckGradient(grads.dk, "grads.dk", k, "k", q, k, v, out, d_out);
  CheckGradient(grads.dv, "grads.dv", v, "v", q, k, v, out, d_out);
  const std::string_view apart = "not share memory with another gradient";
  Require(!internal::RowsOverlap(grads.dq, grads.dk), kBackward, "grads.dk", apart,
          "a view overlapping dq");
  Require(!internal::RowsOverlap(grads.dq, grads.dv), kBackward, "grads.dv", apart,
          "a view overlapping dq");
  Require(!internal::RowsOverlap(grads.dk, grads.dv), kBackward, "grads.dv", apart,
          "a view overlapping dk");
  const std::span<float> table = grads.relative_bias_table;
  if (options.relative_bias) {
    const int64_t size = static_cast<int64_t>(options.relative_bias->table.size());
    Require(static_cast<int64_t>(table.size()) == size, kBackward,
            "grads.relative_bias_table.size()", Equal("relative_bias.table.size()", size),
            static_cast<int64_t>(table.size()));
  } else {
    Require(table.empty(), kBackward, "grads.relative_bias_table", "be empty without relative_bias",
            static_cast<int64_t>(table.size()));
  }
  const std::string_view table_rule = "not share memory with an input or another gradient";
  for (const auto& [view, name] : {std::pair{Heads<const float>(grads.dq), "dq"},
                                   std::pair{Heads<const float>(grads.dk), "dk"},
                                   std::pair{Heads<const float>(grads.dv), "dv"},
                                   std::pair{out, "out"}, std::pair{d_out, "d_out"}}) {
    Require(!SpanOverlaps(table, view), kBackward, "grads.relative_bias_table", table_rule,
            std::string("a span overlapping ") + name);
  }
  Require(!SpanOverlaps(table, q) && !SpanOverlaps(table, k) && !SpanOverlaps(table, v) &&
              !SpansOverlap(table, lse),
          kBackward, "grads.relative_bias_table", table_rule, "a span overlapping q, k, v or lse");
  if (options.relative_bias) {
    Require(!SpansOverlap(table, options.relative_bias->table), kBackward,
            "grads.relative_bias_table", table_rule, "a span overlapping relative_bias.table");
  }
  for (const auto& [view, name] : {std::pair{grads.dq, "grads.dq"}, std::pair{grads.dk, "grads.dk"},
                                   std::pair{grads.dv, "grads.dv"}}) {
    Require(!SpanOverlaps(lse, view), kBackward, name, "not share memory with lse",
            "a view overlapping lse");
  }
  const std::span<float> sinks = grads.sinks;
  if (!options.sinks.empty()) {
    Require(sinks.size() == options.sinks.size(), kBackward, "grads.sinks.size()",
            Equal("sinks.size()", static_cast<int64_t>(options.sinks.size())),
            static_cast<int64_t>(sinks.size()));
  } else {
    Require(sinks.empty(), kBackward, "grads.sinks", "be empty without sinks",
            static_cast<int64_t>(sinks.size()));
  }
  const std::string_view sinks_rule = "not share memory with an input or another gradient";
  for (const auto& [view, name] : {std::pair{Heads<const float>(grads.dq), "dq"},
                                   std::pair{Heads<const float>(grads.dk), "dk"},
                                   std::pair{Heads<const float>(grads.dv), "dv"},
                                   std::pair{out, "out"}, std::pair{d_out, "d_out"}}) {
    Require(!SpanOverlaps(sinks, view), kBackward, "grads.sinks", sinks_rule,
            std::string("a span overlapping ") + name);
  }
  Require(!SpanOverlaps(sinks, q) && !SpanOverlaps(sinks, k) && !SpanOverlaps(sinks, v) &&
              !SpansOverlap(sinks, lse) && !SpansOverlap(sinks, table) &&
              !SpansOverlap(sinks, options.sinks),
          kBackward, "grads.sinks", sinks_rule,
          "a span overlapping q, k, v, lse, sinks or grads.relative_bias_table");
}

// The sinks' gradient from the saved state, in double: dsink_h = -sum_i exp(sink_h - lse_i)
// (do_i . o_i) over the rows of head h (posenc/attention_backward.h). A row that sees no key
// has o_i = 0 and adds nothing.
void SinkGradients(const AttentionOptions& options, Heads<const float> out,
                   std::span<const float> lse, Heads<const float> d_out, std::span<float> grad) {
  for (int64_t h = 0; h < out.num_heads; ++h) {
    const double sink = options.sinks[static_cast<size_t>(h)];
    double sum = 0.0;
    for (int64_t t = 0; t < out.tokens; ++t) {
      const float* o = out.Row(t, h);
      const float* d_o = d_out.Row(t, h);
      double delta = 0.0;
      for (int64_t e = 0; e < out.head_dim; ++e) {
        delta += static_cast<double>(d_o[e]) * static_cast<double>(o[e]);
      }
      const double row_lse = lse[static_cast<size_t>(t * out.num_heads + h)];
      sum += std::exp(sink - row_lse) * delta;
    }
    grad[static_cast<size_t>(h)] = static_cast<float>(-sum);
  }
}

// The forward pass with the true log-sum-exp: the kernel measures ALiBi's distances from an
// anchor (attention_kernels-inl.h), so its lse is the true one plus slope (query_pos - anchor),
// taken off here in double.
template <typename T>
void ForwardWithLse(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out, std::span<float> lse) {
  internal::CheckAttention(options, q, k, v, query_pos, key_pos, out);
  CheckLse(kForward, q, k, v, out, lse);
  if (q.Empty()) return;
  internal::PreparedAttention<T> call(options, q, k, v, query_pos, key_pos, out);
  call.args.lse = lse.data();
  internal::AttentionKernel(call.args);
  if (!options.alibi || k.tokens == 0) return;
  const auto [min_it, max_it] = std::minmax_element(key_pos.begin(), key_pos.end());
  const std::vector<double> slopes = AlibiSlopes(*options.alibi);
  for (int64_t t = 0; t < q.tokens; ++t) {
    const int64_t anchor = internal::AlibiAnchor(query_pos[t], *min_it, *max_it);
    for (int64_t h = 0; h < q.num_heads; ++h) {
      float& entry = lse[static_cast<size_t>(t * q.num_heads + h)];
      if (!std::isfinite(entry)) continue;
      const double true_lse =
          static_cast<double>(entry) - slopes[h] * static_cast<double>(query_pos[t] - anchor);
      entry = static_cast<float>(true_lse);
    }
  }
}

// Zeros every row of a view.
void Zero(Heads<float> view) {
  for (int64_t t = 0; t < view.tokens; ++t) {
    for (int64_t h = 0; h < view.num_heads; ++h) {
      std::fill(view.Row(t, h), view.Row(t, h) + view.head_dim, 0.0f);
    }
  }
}

template <typename T>
void Backward(const AttentionOptions& options, Heads<const T> q, Heads<const T> k, Heads<const T> v,
              std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
              Heads<const float> out, std::span<const float> lse, Heads<const float> d_out,
              const AttentionGradients& grads) {
  CheckBackward(options, q, k, v, query_pos, key_pos, out, lse, d_out, grads);
  if (q.Empty() || k.Empty()) {  // nothing seen: every gradient is 0
    Zero(grads.dq);
    Zero(grads.dk);
    Zero(grads.dv);
    std::fill(grads.relative_bias_table.begin(), grads.relative_bias_table.end(), 0.0f);
    std::fill(grads.sinks.begin(), grads.sinks.end(), 0.0f);
    return;
  }
  if (!options.sinks.empty()) SinkGradients(options, out, lse, d_out, grads.sinks);
  internal::PreparedAttention<T> call(options, q, k, v, query_pos, key_pos, Heads<float>());
  internal::AttentionBackwardKernelArgs args;
  args.forward = call.args;
  args.out = {out.data, out.token_stride, out.head_stride};
  args.d_out = {d_out.data, d_out.token_stride, d_out.head_stride};
  args.lse = lse.data();
  args.dq = {grads.dq.data, grads.dq.token_stride, grads.dq.head_stride};
  args.dk = {grads.dk.data, grads.dk.token_stride, grads.dk.head_stride};
  args.dv = {grads.dv.data, grads.dv.token_stride, grads.dv.head_stride};
  std::vector<int32_t> buckets;
  if (options.relative_bias) {
    const int64_t extent = call.relative.extent;
    for (int64_t d = -extent; d <= extent; ++d) {
      buckets.push_back(static_cast<int32_t>(
          internal::RelativePositionBucketUnchecked(options.relative_bias->buckets, d)));
    }
    args.relative_table_grad = grads.relative_bias_table.data();
    args.relative_bucket = buckets.data();
    args.num_buckets = options.relative_bias->buckets.num_buckets;
  }
  internal::AttentionBackwardKernel(args);
  if (internal::Rotates(options)) {
    internal::UnrotateGradient(options, true, query_pos, grads.dq, false);
    internal::UnrotateGradient(options, false, key_pos, grads.dk, false);
  }
}

}  // namespace

void AttentionForward(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                      Heads<const float> v, std::span<const int64_t> query_pos,
                      std::span<const int64_t> key_pos, Heads<float> out, std::span<float> lse) {
  ForwardWithLse(options, q, k, v, query_pos, key_pos, out, lse);
}

void AttentionForward(const AttentionOptions& options, Heads<const BFloat16> q,
                      Heads<const BFloat16> k, Heads<const BFloat16> v,
                      std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                      Heads<float> out, std::span<float> lse) {
  ForwardWithLse(options, q, k, v, query_pos, key_pos, out, lse);
}

void AttentionBackward(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
                       Heads<const float> v, std::span<const int64_t> query_pos,
                       std::span<const int64_t> key_pos, Heads<const float> out,
                       std::span<const float> lse, Heads<const float> d_out,
                       const AttentionGradients& grads) {
  Backward(options, q, k, v, query_pos, key_pos, out, lse, d_out, grads);
}

void AttentionBackward(const AttentionOptions& options, Heads<const BFloat16> q,
                       Heads<const BFloat16> k, Heads<const BFloat16> v,
                       std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                       Heads<const float> out, std::span<const float> lse, Heads<const float> d_out,
                       const AttentionGradients& grads) {
  Backward(options, q, k, v, query_pos, key_pos, out, lse, d_out, grads);
}

namespace {

// Throws posenc::Error unless lse holds rows entries for each of count batch elements.
void CheckBatchedLse(std::string_view function, size_t lse_size, int64_t count, int64_t rows) {
  const int64_t want = count * rows;
  if (static_cast<int64_t>(lse_size) == want) return;
  Require(false, function, "lse.size()", Equal("batch count * q.tokens * q.num_heads", want),
          static_cast<int64_t>(lse_size));
}

template <typename L>
std::span<L> LseOf(std::span<L> lse, int64_t b, int64_t rows) {
  return lse.subspan(static_cast<size_t>(b * rows), static_cast<size_t>(rows));
}

template <typename T>
void BatchedForward(const AttentionOptions& options, const Batched<Heads<const T>>& q,
                    const Batched<Heads<const T>>& k, const Batched<Heads<const T>>& v,
                    const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                    const Batched<Heads<float>>& out, std::span<float> lse) {
  const int64_t rows = q.first.tokens * q.first.num_heads;
  CheckBatchedLse(kForward, lse.size(), q.BatchCount(), rows);
  internal::RunAttentionBatch(
      kForward, q, k, v, query_pos, key_pos, out,
      [&](int64_t b, auto qb, auto kb, auto vb, auto qp, auto kp, auto ob) {
        internal::CheckAttention(options, qb, kb, vb, qp, kp, ob);
        CheckLse(kForward, qb, kb, vb, ob, LseOf(lse, b, rows));
      },
      [&](int64_t b, auto... views) { ForwardWithLse(options, views..., LseOf(lse, b, rows)); });
}

template <typename T>
void BatchedBackward(const AttentionOptions& options, const Batched<Heads<const T>>& q,
                     const Batched<Heads<const T>>& k, const Batched<Heads<const T>>& v,
                     const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                     const Batched<Heads<const float>>& out, std::span<const float> lse,
                     const Batched<Heads<const float>>& d_out,
                     const BatchedAttentionGradients& grads) {
  using internal::RequireSameBatch;
  RequireSameBatch(kBackward, q, k, "q", "k");
  RequireSameBatch(kBackward, q, v, "q", "v");
  RequireSameBatch(kBackward, q, out, "q", "out");
  RequireSameBatch(kBackward, q, d_out, "q", "d_out");
  RequireSameBatch(kBackward, q, grads.dq, "q", "grads.dq");
  RequireSameBatch(kBackward, q, grads.dk, "q", "grads.dk");
  RequireSameBatch(kBackward, q, grads.dv, "q", "grads.dv");
  internal::RequirePositionsBatch(kBackward, query_pos, q, "q");
  internal::RequirePositionsBatch(kBackward, key_pos, q, "q");
  const int64_t count = q.BatchCount(), rows = q.first.tokens * q.first.num_heads;
  CheckBatchedLse(kBackward, lse.size(), count, rows);
  const auto element_grads = [&](int64_t b) {
    return AttentionGradients{grads.dq.At(b), grads.dk.At(b), grads.dv.At(b),
                              grads.relative_bias_table, grads.sinks};
  };
  if (count == 0) {
    using internal::NoTokens;
    CheckBackward(options, NoTokens(q.first), NoTokens(k.first), NoTokens(v.first), {}, {},
                  NoTokens(out.first), lse, NoTokens(d_out.first),
                  {NoTokens(grads.dq.first), NoTokens(grads.dk.first), NoTokens(grads.dv.first),
                   grads.relative_bias_table, grads.sinks});
    std::fill(grads.relative_bias_table.begin(), grads.relative_bias_table.end(), 0.0f);
    std::fill(grads.sinks.begin(), grads.sinks.end(), 0.0f);
    return;
  }
  const std::array<internal::BatchRows, 8> views{internal::RowsOf(q, "q"),
                                                 internal::RowsOf(k, "k"),
                                                 internal::RowsOf(v, "v"),
                                                 internal::RowsOf(out, "out"),
                                                 internal::RowsOf(d_out, "d_out"),
                                                 internal::RowsOf(grads.dq, "grads.dq"),
                                                 internal::RowsOf(grads.dk, "grads.dk"),
                                                 internal::RowsOf(grads.dv, "grads.dv")};
  // The shared parameters' gradients: each element's into its own buffer, summed in double.
  std::vector<float> table(grads.relative_bias_table.size()), sinks(grads.sinks.size());
  std::vector<double> table_sum(table.size()), sinks_sum(sinks.size());
  internal::RunEachElement(
      kBackward, count,
      [&](int64_t b) {
        CheckBackward(options, q.At(b), k.At(b), v.At(b), query_pos.At(b), key_pos.At(b), out.At(b),
                      LseOf(lse, b, rows), d_out.At(b), element_grads(b));
      },
      [&](int64_t b) {
        AttentionGradients element = element_grads(b);
        element.relative_bias_table = table;
        element.sinks = sinks;
        Backward(options, q.At(b), k.At(b), v.At(b), query_pos.At(b), key_pos.At(b), out.At(b),
                 LseOf(lse, b, rows), d_out.At(b), element);
        for (size_t i = 0; i < table.size(); ++i) table_sum[i] += table[i];
        for (size_t i = 0; i < sinks.size(); ++i) sinks_sum[i] += sinks[i];
      },
      views);
  std::copy(table_sum.begin(), table_sum.end(), grads.relative_bias_table.begin());
  std::copy(sinks_sum.begin(), sinks_sum.end(), grads.sinks.begin());
}

}  // namespace

void AttentionForward(const AttentionOptions& options, const Batched<Heads<const float>>& q,
                      const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
                      const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                      const Batched<Heads<float>>& out, std::span<float> lse) {
  BatchedForward(options, q, k, v, query_pos, key_pos, out, lse);
}

void AttentionForward(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
                      const Batched<Heads<const BFloat16>>& k,
                      const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                      const BatchedPositions& key_pos, const Batched<Heads<float>>& out,
                      std::span<float> lse) {
  BatchedForward(options, q, k, v, query_pos, key_pos, out, lse);
}

void AttentionBackward(const AttentionOptions& options, const Batched<Heads<const float>>& q,
                       const Batched<Heads<const float>>& k, const Batched<Heads<const float>>& v,
                       const BatchedPositions& query_pos, const BatchedPositions& key_pos,
                       const Batched<Heads<const float>>& out, std::span<const float> lse,
                       const Batched<Heads<const float>>& d_out,
                       const BatchedAttentionGradients& grads) {
  BatchedBackward(options, q, k, v, query_pos, key_pos, out, lse, d_out, grads);
}

void AttentionBackward(const AttentionOptions& options, const Batched<Heads<const BFloat16>>& q,
                       const Batched<Heads<const BFloat16>>& k,
                       const Batched<Heads<const BFloat16>>& v, const BatchedPositions& query_pos,
                       const BatchedPositions& key_pos, const Batched<Heads<const float>>& out,
                       std::span<const float> lse, const Batched<Heads<const float>>& d_out,
                       const BatchedAttentionGradients& grads) {
  BatchedBackward(options, q, k, v, query_pos, key_pos, out, lse, d_out, grads);
}

void AttentionBackwardReference(const AttentionOptions& options, Heads<const float> q,
                                Heads<const float> k, Heads<const float> v,
                                std::span<const int64_t> query_pos,
                                std::span<const int64_t> key_pos, Heads<const float> d_out,
                                const AttentionGradients& grads) {
  // RoPE: the rows the scores read, rotated by the double reference.
  internal::ScratchVector<float> q_rotated, k_rotated;
  if (internal::Rotates(options)) {
    q_rotated = internal::RotatedCopy(options, true, query_pos, q, true);
    k_rotated = internal::RotatedCopy(options, false, key_pos, k, true);
    q = Heads<const float>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim);
    k = Heads<const float>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  }
  const double scale = internal::ResolvedScale(options.scale, q.head_dim);
  const std::vector<double> slopes =
      options.alibi ? AlibiSlopes(*options.alibi) : std::vector<double>();
  const int64_t group = k.num_heads > 0 ? q.num_heads / k.num_heads : 1;
  const auto at = [](int64_t t, int64_t h, int64_t heads, int64_t dim) {
    return static_cast<size_t>((t * heads + h) * dim);
  };
  std::vector<double> dk(static_cast<size_t>(k.tokens * k.num_heads * k.head_dim), 0.0);
  std::vector<double> dv(static_cast<size_t>(v.tokens * v.num_heads * v.head_dim), 0.0);
  std::vector<double> table(grads.relative_bias_table.size(), 0.0);
  std::vector<double> p(static_cast<size_t>(k.tokens)), dq(static_cast<size_t>(q.head_dim));
  std::vector<char> visible(static_cast<size_t>(k.tokens));
  std::vector<double> o(static_cast<size_t>(v.head_dim));
  std::vector<double> cap_grad(static_cast<size_t>(k.tokens), 1.0);  // 1 without soft-capping
  std::vector<double> sinks(grads.sinks.size(), 0.0);
  constexpr double kInf = std::numeric_limits<double>::infinity();

  for (int64_t i = 0; i < q.tokens; ++i) {
    const double c = scale * (options.query_scale ? options.query_scale->At(query_pos[i]) : 1.0);
    for (int64_t h = 0; h < q.num_heads; ++h) {
      const int64_t g = h / group;
      float* dq_row = grads.dq.Row(i, h);
      std::fill(dq.begin(), dq.end(), 0.0);
      if (k.tokens > 0) {
        internal::ReferenceScoreRow(options, q, k, query_pos, key_pos, scale, slopes, i, h, p,
                                    visible, &cap_grad);
      }
      // With a sink: its softmax weight p_sink, and d sink_h = -sum_i p_sink delta_i.
      const double sink = options.sinks.empty() ? -kInf : options.sinks[static_cast<size_t>(h)];
      double p_sink = 0.0;
      if (k.tokens > 0 && internal::SoftmaxRow(p, visible, sink, &p_sink)) {
        // o_i = sum_j p_ij v_j and delta_i = do_i . o_i, from the definition.
        const float* d_out_row = d_out.Row(i, h);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < k.tokens; ++j) {
          if (!visible[j]) continue;
          for (int64_t e = 0; e < v.head_dim; ++e) o[e] += p[j] * v.Row(j, g)[e];
        }
        double delta = 0.0;
        for (int64_t e = 0; e < v.head_dim; ++e) delta += d_out_row[e] * o[e];
        if (!sinks.empty()) sinks[static_cast<size_t>(h)] -= p_sink * delta;
        for (int64_t j = 0; j < k.tokens; ++j) {
          if (!visible[j]) continue;
          const float* v_row = v.Row(j, g);
          double dp = 0.0;
          for (int64_t e = 0; e < v.head_dim; ++e) {
            dp += static_cast<double>(d_out_row[e]) * v_row[e];
            dv[at(j, g, v.num_heads, v.head_dim) + e] += p[j] * d_out_row[e];
          }
          const double ds = p[j] * (dp - delta);
          // Through soft-capping to the uncapped score (the bias comes after the cap).
          const double ds_uncapped = ds * cap_grad[static_cast<size_t>(j)];
          const float* k_row = k.Row(j, g);
          const float* q_row = q.Row(i, h);
          for (int64_t d = 0; d < q.head_dim; ++d) {
            dq[d] += c * ds_uncapped * k_row[d];
            dk[at(j, g, k.num_heads, k.head_dim) + d] += c * ds_uncapped * q_row[d];
          }
          if (options.relative_bias) {
            const int64_t bucket =
                RelativePositionBucket(options.relative_bias->buckets, key_pos[j] - query_pos[i]);
            table[static_cast<size_t>(bucket * q.num_heads + h)] += ds;
          }
        }
      }
      for (int64_t d = 0; d < q.head_dim; ++d) dq_row[d] = static_cast<float>(dq[d]);
    }
  }
  for (int64_t j = 0; j < k.tokens; ++j) {
    for (int64_t g = 0; g < k.num_heads; ++g) {
      for (int64_t d = 0; d < k.head_dim; ++d) {
        grads.dk.Row(j, g)[d] = static_cast<float>(dk[at(j, g, k.num_heads, k.head_dim) + d]);
      }
      for (int64_t e = 0; e < v.head_dim; ++e) {
        grads.dv.Row(j, g)[e] = static_cast<float>(dv[at(j, g, v.num_heads, v.head_dim) + e]);
      }
    }
  }
  for (size_t b = 0; b < table.size(); ++b) {
    grads.relative_bias_table[b] = static_cast<float>(table[b]);
  }
  for (size_t h = 0; h < sinks.size(); ++h) grads.sinks[h] = static_cast<float>(sinks[h]);
  if (internal::Rotates(options)) {
    internal::UnrotateGradient(options, true, query_pos, grads.dq, true);
    internal::UnrotateGradient(options, false, key_pos, grads.dk, true);
  }
}

}  // namespace posenc
