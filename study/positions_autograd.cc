#include "positions_autograd.h"

#include <span>

#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/attention_backward.h"
#include "posenc/heads.h"
#include "posenc/learned.h"
#include "posenc/sinusoidal.h"

namespace posenc::study {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::span<const int64_t> Int64Span(const torch::Tensor& t) {
  return {t.data_ptr<int64_t>(), static_cast<size_t>(t.numel())};
}

// [batch, tokens, heads, head_dim] as posenc rows: batch * tokens tokens, contiguous.
template <typename T>
Heads<T> TokenHeads(const torch::Tensor& x) {
  return Heads<T>::Dense(x.data_ptr<float>(), x.size(0) * x.size(1), x.size(2), x.size(3));
}

// The Rope that forward and backward share, rebuilt from what the context saved.
Rope RopeFrom(const torch::Tensor& inv_freq, double attention_factor, int64_t layout,
              int64_t head_dim) {
  Rope rope;
  rope.head_dim = head_dim;
  rope.rotary_dim = 2 * inv_freq.numel();
  rope.layout = static_cast<RopeLayout>(layout);
  rope.inv_freq.assign(inv_freq.data_ptr<double>(), inv_freq.data_ptr<double>() + inv_freq.numel());
  rope.attention_factor = attention_factor;
  return rope;
}

// out = x rotated by +angle (forward) or -angle (the transpose, for the gradient).
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& batch_positions, const Rope& rope,
                     RopeDirection direction) {
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty_like(in);
  ApplyRope(rope, Int64Span(batch_positions), TokenHeads<const float>(in), TokenHeads<float>(out),
            direction);
  return out;
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& batch_positions, const torch::Tensor& inv_freq,
                               double attention_factor, int64_t layout) {
    ctx->save_for_backward({batch_positions, inv_freq});
    ctx->saved_data["attention_factor"] = attention_factor;
    ctx->saved_data["layout"] = layout;
    return Rotate(x, batch_positions, RopeFrom(inv_freq, attention_factor, layout, x.size(3)),
                  RopeDirection::kForward);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const Rope rope = RopeFrom(saved[1], ctx->saved_data["attention_factor"].toDouble(),
                               ctx->saved_data["layout"].toInt(), grad_outputs[0].size(3));
    // With an attention factor a, forward is a * R(phi) x, so the transpose is a * R(-phi).
    return {Rotate(grad_outputs[0], saved[0], rope, RopeDirection::kInverse), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class LearnedLookupFunction : public torch::autograd::Function<LearnedLookupFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& table,
                               const torch::Tensor& positions) {
    ctx->save_for_backward({positions});
    ctx->saved_data["rows"] = table.size(0);
    const torch::Tensor t = table.contiguous();
    torch::Tensor out = torch::empty({positions.numel(), t.size(1)}, t.options());
    LookupLearnedRows({t.data_ptr<float>(), static_cast<size_t>(t.numel())}, t.size(1),
                      Int64Span(positions),
                      {out.data_ptr<float>(), static_cast<size_t>(out.numel())});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor positions = ctx->get_saved_variables()[0];
    const torch::Tensor grad_out = grad_outputs[0].contiguous();
    const int64_t d_model = grad_out.size(1);
    torch::Tensor grad =
        torch::zeros({ctx->saved_data["rows"].toInt(), d_model}, grad_out.options());
    AccumulateLearnedGradient({grad.data_ptr<float>(), static_cast<size_t>(grad.numel())}, d_model,
                              Int64Span(positions),
                              {grad_out.data_ptr<float>(), static_cast<size_t>(grad_out.numel())});
    return {grad, torch::Tensor()};
  }
};

// Part p (0: q, 1: k, 2: v) of batch element b of a contiguous [batch, tokens, 3, heads, head_dim]
// tensor, as a posenc view: the token stride skips the other two parts.
template <typename T>
Heads<T> QkvPart(const torch::Tensor& qkv, int64_t b, int64_t p) {
  return {qkv.data_ptr<float>() + b * qkv.stride(0) + p * qkv.stride(2),
          qkv.size(1),
          qkv.size(3),
          qkv.size(4),
          qkv.stride(1),
          qkv.stride(3)};
}

// Batch element b of a contiguous [batch, tokens, heads, dim] tensor.
template <typename T>
Heads<T> BatchHeads(const torch::Tensor& x, int64_t b) {
  return Heads<T>::Dense(x.data_ptr<float>() + b * x.stride(0), x.size(1), x.size(2), x.size(3));
}

// Batch element b of a contiguous [batch, tokens, heads] log-sum-exp tensor.
template <typename T>
std::span<T> BatchRow(const torch::Tensor& lse, int64_t b) {
  return {lse.data_ptr<float>() + b * lse.stride(0), static_cast<size_t>(lse.stride(0))};
}

// The options forward and backward share, rebuilt from what the context saved (an empty inv_freq:
// no RoPE; an empty table: no bucket bias; the table must outlive the options).
AttentionOptions CausalOptions(int64_t heads, int64_t head_dim, bool alibi,
                               const torch::Tensor& inv_freq, double attention_factor,
                               int64_t layout, const torch::Tensor& table,
                               const RelativeBuckets& buckets) {
  AttentionOptions options;
  options.causal = true;
  if (alibi) options.alibi = Alibi{.num_heads = heads};
  if (inv_freq.numel() > 0) options.rope = RopeFrom(inv_freq, attention_factor, layout, head_dim);
  if (table.numel() > 0) {
    options.relative_bias =
        RelativeBias{.buckets = buckets,
                     .num_heads = heads,
                     .table = {table.data_ptr<float>(), static_cast<size_t>(table.numel())}};
  }
  return options;
}

RelativeBuckets BucketsFrom(AutogradContext* ctx) {
  return {.num_buckets = ctx->saved_data["num_buckets"].toInt(),
          .max_distance = ctx->saved_data["max_distance"].toInt(),
          .bidirectional = ctx->saved_data["bidirectional"].toBool()};
}

// One posenc call per batch element, each with its own row of positions; each call threads over
// heads and tiles itself (a call at the study's shapes is large enough for OpenMP).
class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in,
                               const torch::Tensor& positions, bool alibi,
                               const torch::Tensor& inv_freq, double attention_factor,
                               int64_t layout, const torch::Tensor& table_in, int64_t num_buckets,
                               int64_t max_distance, bool bidirectional) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const torch::Tensor table = table_in.contiguous();
    ctx->saved_data["num_buckets"] = num_buckets;
    ctx->saved_data["max_distance"] = max_distance;
    ctx->saved_data["bidirectional"] = bidirectional;
    const int64_t batch = qkv.size(0), tokens = qkv.size(1), heads = qkv.size(3);
    const AttentionOptions options = CausalOptions(
        heads, qkv.size(4), alibi, inv_freq, attention_factor, layout, table, BucketsFrom(ctx));
    torch::Tensor out = torch::empty({batch, tokens, heads, qkv.size(4)}, qkv.options());
    // Each row's log-sum-exp: all the backward pass needs to recompute the softmax tile by tile.
    torch::Tensor lse = torch::empty({batch, tokens, heads}, qkv.options());
    for (int64_t b = 0; b < batch; ++b) {
      const std::span<const int64_t> pos = Int64Span(positions[b]);
      AttentionForward(options, QkvPart<const float>(qkv, b, 0), QkvPart<const float>(qkv, b, 1),
                       QkvPart<const float>(qkv, b, 2), pos, pos, BatchHeads<float>(out, b),
                       BatchRow<float>(lse, b));
    }
    ctx->save_for_backward({qkv, positions, inv_freq, out, lse, table});
    ctx->saved_data["alibi"] = alibi;
    ctx->saved_data["attention_factor"] = attention_factor;
    ctx->saved_data["layout"] = layout;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &qkv = saved[0], &positions = saved[1], &out = saved[3], &lse = saved[4],
                        &table = saved[5];
    const AttentionOptions options =
        CausalOptions(qkv.size(3), qkv.size(4), ctx->saved_data["alibi"].toBool(), saved[2],
                      ctx->saved_data["attention_factor"].toDouble(),
                      ctx->saved_data["layout"].toInt(), table, BucketsFrom(ctx));
    const torch::Tensor d_out = grad_outputs[0].contiguous();
    // Every element is written (dq, dk, dv fill their parts, each call its table gradient), so no
    // zeroing; the table's gradient is the sum over the batch.
    torch::Tensor d_qkv = torch::empty_like(qkv);
    const bool has_table = table.numel() > 0;
    torch::Tensor d_table, d_table_one;
    if (has_table) {
      d_table = torch::zeros_like(table);
      d_table_one = torch::empty_like(table);
    }
    for (int64_t b = 0; b < qkv.size(0); ++b) {
      const std::span<const int64_t> pos = Int64Span(positions[b]);
      AttentionGradients grads{.dq = QkvPart<float>(d_qkv, b, 0),
                               .dk = QkvPart<float>(d_qkv, b, 1),
                               .dv = QkvPart<float>(d_qkv, b, 2)};
      if (has_table) {
        grads.relative_bias_table = {d_table_one.data_ptr<float>(),
                                     static_cast<size_t>(d_table_one.numel())};
      }
      AttentionBackward(options, QkvPart<const float>(qkv, b, 0), QkvPart<const float>(qkv, b, 1),
                        QkvPart<const float>(qkv, b, 2), pos, pos, BatchHeads<const float>(out, b),
                        BatchRow<const float>(lse, b), BatchHeads<const float>(d_out, b), grads);
      if (has_table) d_table += d_table_one;
    }
    return {d_qkv,           torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), d_table,         torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ApplyRopeAutograd(const torch::Tensor& x, const torch::Tensor& positions,
                                const Rope& rope) {
  rope.Validate();
  const torch::Tensor batch_positions = positions.repeat({x.size(0)}).contiguous();
  const torch::Tensor inv_freq = torch::tensor(rope.inv_freq, torch::kFloat64);
  return RopeFunction::apply(x, batch_positions, inv_freq, rope.attention_factor,
                             static_cast<int64_t>(rope.layout));
}

torch::Tensor LookupLearnedAutograd(const torch::Tensor& table, const torch::Tensor& positions) {
  return LearnedLookupFunction::apply(table, positions.contiguous());
}

torch::Tensor CausalAttentionAutograd(const torch::Tensor& qkv, const torch::Tensor& positions,
                                      const std::optional<Rope>& rope, bool alibi,
                                      const std::optional<BucketBias>& bias) {
  TORCH_CHECK(qkv.scalar_type() == torch::kFloat32 && qkv.dim() == 5 && qkv.size(2) == 3,
              "[study] expected float32 qkv [batch, tokens, 3, heads, head_dim]");
  TORCH_CHECK(positions.scalar_type() == torch::kInt64 && positions.dim() == 2 &&
                  positions.size(0) == qkv.size(0) && positions.size(1) == qkv.size(1),
              "[study] expected int64 positions [batch, tokens]");
  if (rope) rope->Validate();
  if (bias) {
    bias->buckets.Validate();
    TORCH_CHECK(
        bias->table.scalar_type() == torch::kFloat32 &&
            bias->table.sizes() == torch::IntArrayRef({bias->buckets.num_buckets, qkv.size(3)}),
        "[study] expected a float32 bucket bias table [num_buckets, heads]");
  }
  const torch::Tensor inv_freq =
      rope ? torch::tensor(rope->inv_freq, torch::kFloat64) : torch::empty({0}, torch::kFloat64);
  const RelativeBuckets buckets = bias ? bias->buckets : RelativeBuckets{};
  return CausalAttentionFunction::apply(
      qkv, positions.contiguous(), alibi, inv_freq, rope ? rope->attention_factor : 1.0,
      static_cast<int64_t>(rope ? rope->layout : RopeLayout{}),
      bias ? bias->table : torch::empty({0}, torch::kFloat32), buckets.num_buckets,
      buckets.max_distance, buckets.bidirectional);
}

torch::Tensor SinusoidalTable(const torch::Tensor& positions, int64_t d_model) {
  torch::Tensor out = torch::empty({positions.numel(), d_model}, torch::kFloat32);
  FillSinusoidal(Sinusoidal{.dim = d_model}, Int64Span(positions.contiguous()),
                 {out.data_ptr<float>(), static_cast<size_t>(out.numel())});
  return out;
}

}  // namespace posenc::study
