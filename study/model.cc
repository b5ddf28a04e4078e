#include "model.h"

#include <optional>

#include "positions_autograd.h"

namespace posenc::study {

std::string MethodName(PositionMethod method) {
  switch (method) {
    case PositionMethod::kLearned:
      return "learned";
    case PositionMethod::kSinusoidal:
      return "sinusoidal";
    case PositionMethod::kRope:
      return "rope";
    case PositionMethod::kAlibi:
      return "alibi";
    case PositionMethod::kNone:
      return "nope";
  }
  return "?";
}

CharModelImpl::CharModelImpl(const ModelShape& shape, PositionMethod method)
    : shape_(shape), method_(method) {
  const int64_t d = shape.d_model;
  tokens_ = register_module("tokens", torch::nn::Embedding(shape.vocab, d));
  // Token vectors of unit scale (the original Transformer scales N(0, 1/d) by sqrt(d)), so that
  // a sinusoidal vector (entries in [-1, 1]) neither drowns them nor drowns in them.
  torch::nn::init::normal_(tokens_->weight, 0.0, 1.0);
  if (method == PositionMethod::kLearned) {
    // GPT-2's initialisation, N(0, 0.02^2). Rows past the training length never receive a
    // gradient: at 2x and beyond the model reads rows it has never trained, as a GPT-2 style
    // table extended for the occasion would give it.
    learned_ = register_parameter("learned", torch::randn({shape.learned_rows, d}) * 0.02);
  }
  for (int64_t l = 0; l < shape.layers; ++l) {
    const std::string p = "block" + std::to_string(l) + "_";
    Block b;
    b.norm1 = register_module(p + "norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    b.norm2 = register_module(p + "norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    b.qkv = register_module(p + "qkv", torch::nn::Linear(d, 3 * d));
    b.proj = register_module(p + "proj", torch::nn::Linear(d, d));
    b.up = register_module(p + "up", torch::nn::Linear(d, 4 * d));
    b.down = register_module(p + "down", torch::nn::Linear(4 * d, d));
    blocks_.push_back(b);
  }
  final_norm_ =
      register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  head_ = register_module("head", torch::nn::Linear(d, shape.vocab));
}

torch::Tensor CharModelImpl::Attention(Block& block, const torch::Tensor& x,
                                       const torch::Tensor& positions, const Rope& rope,
                                       const LongContext& reading) {
  const int64_t batch = x.size(0), n = x.size(1);
  // [batch, tokens, 3, heads, head_dim]: q, k and v of each token side by side.
  const torch::Tensor qkv = block.qkv(x).view({batch, n, 3, shape_.heads, head_dim()});
  if (reading.kind != LongContext::Kind::kFull) {
    const torch::Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);
    const torch::Tensor mixed =
        reading.kind == LongContext::Kind::kSelfExtend
            ? SelfExtendRead(q, k, v, rope, reading.self_extend)
            : SinkRead(q, k, v, rope, reading.sinks, reading.cache, reading.positions);
    return block.proj(mixed.reshape({batch, n, shape_.d_model}));
  }
  const std::optional<Rope> rotation =
      method_ == PositionMethod::kRope ? std::optional<Rope>(rope) : std::nullopt;
  const torch::Tensor mixed =
      CausalAttentionAutograd(qkv, positions, rotation, method_ == PositionMethod::kAlibi);
  return block.proj(mixed.reshape({batch, n, shape_.d_model}));
}

torch::Tensor CharModelImpl::forward(const torch::Tensor& ids, const Rope& rope,
                                     const LongContext& reading) {
  if (reading.kind != LongContext::Kind::kFull) {
    TORCH_CHECK(method_ == PositionMethod::kRope && !torch::GradMode::is_enabled(),
                "[study] Self-Extend and attention sinks read a RoPE model, without gradient");
  }
  const int64_t n = ids.size(1);
  const torch::Tensor positions = torch::arange(n, torch::kInt64);
  torch::Tensor x = tokens_(ids);
  if (method_ == PositionMethod::kLearned) {
    x = x + LookupLearnedAutograd(learned_, positions);
  } else if (method_ == PositionMethod::kSinusoidal) {
    x = x + SinusoidalTable(positions, shape_.d_model);
  }
  for (Block& block : blocks_) {
    x = x + Attention(block, block.norm1(x), positions, rope, reading);
    x = x + block.down(torch::gelu(block.up(block.norm2(x))));
  }
  return head_(final_norm_(x));
}

}  // namespace posenc::study
