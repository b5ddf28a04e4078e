#include "positions_autograd.h"

#include <span>
#include <vector>

#include "posenc/alibi.h"
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

// The [heads, queries, keys] bias of posenc's ALiBi for one window of positions.
torch::Tensor AlibiBiasTable(const torch::Tensor& positions, int64_t heads) {
  const std::vector<double> slopes = AlibiSlopes(Alibi{.num_heads = heads});
  const int64_t n = positions.numel();
  const int64_t* pos = positions.data_ptr<int64_t>();
  torch::Tensor bias = torch::empty({heads, n, n}, torch::kFloat32);
  float* out = bias.data_ptr<float>();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        *out++ = static_cast<float>(AlibiBias(slopes[h], pos[i], pos[j]));
      }
    }
  }
  return bias;
}

class AlibiFunction : public torch::autograd::Function<AlibiFunction> {
 public:
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& scores,
                               const torch::Tensor& positions) {
    return scores + AlibiBiasTable(positions, scores.size(1));
  }
  static variable_list backward(AutogradContext*, variable_list grad_outputs) {
    return {grad_outputs[0], torch::Tensor()};  // d(scores + constant) / d scores = identity
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

torch::Tensor AddAlibiAutograd(const torch::Tensor& scores, const torch::Tensor& positions) {
  return AlibiFunction::apply(scores, positions.contiguous());
}

torch::Tensor SinusoidalTable(const torch::Tensor& positions, int64_t d_model) {
  torch::Tensor out = torch::empty({positions.numel(), d_model}, torch::kFloat32);
  FillSinusoidal(Sinusoidal{.dim = d_model}, Int64Span(positions.contiguous()),
                 {out.data_ptr<float>(), static_cast<size_t>(out.numel())});
  return out;
}

}  // namespace posenc::study
