#include "model.h"

#include <cmath>
#include <optional>

#include "distance_bias.h"
#include "positions_autograd.h"
#include "xpos.h"

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
    case PositionMethod::kT5:
      return "t5";
    case PositionMethod::kXpos:
      return "xpos";
    case PositionMethod::kKerple:
      return "kerple";
    case PositionMethod::kFire:
      return "fire";
    case PositionMethod::kRandomized:
      return "rope-randomized";
  }
  return "?";
}

bool IsResearchScheme(PositionMethod method) {
  switch (method) {
    case PositionMethod::kT5:
    case PositionMethod::kXpos:
    case PositionMethod::kKerple:
    case PositionMethod::kFire:
    case PositionMethod::kRandomized:
      return true;
    default:
      return false;
  }
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
  if (method == PositionMethod::kT5) {
    // Hugging Face's T5 initialisation, N(0, 1 / d_model).
    t5_table_ = register_parameter(
        "t5_table", torch::randn({shape.t5_buckets, shape.heads}) / std::sqrt(double(d)));
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
    if (method == PositionMethod::kKerple) {
      // r1 uniform in [0, 2], r2 in [0, 1]: heads start at different decays (clamped at 0.01).
      b.kerple_r1 = register_parameter(p + "kerple_r1", torch::rand({shape.heads}) * 2.0);
      b.kerple_r2 = register_parameter(p + "kerple_r2", torch::rand({shape.heads}));
    }
    if (method == PositionMethod::kFire) {
      b.fire.hidden = register_module(p + "fire_hidden", torch::nn::Linear(1, 32));
      b.fire.out = register_module(p + "fire_out", torch::nn::Linear(32, shape.heads));
      b.fire.c = register_parameter(p + "fire_c", torch::ones({1}));
      b.fire.threshold =
          register_parameter(p + "fire_threshold", torch::full({1}, shape.fire_threshold));
    }
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
        : reading.kind == LongContext::Kind::kDualChunk
            ? DualChunkRead(q, k, v, rope, reading.dual_chunk)
            : SinkRead(q, k, v, rope, reading.sinks, reading.cache, reading.positions);
    return block.proj(mixed.reshape({batch, n, shape_.d_model}));
  }
  if (method_ == PositionMethod::kFire) {  // the composed path (fire.h)
    const torch::Tensor mixed = ComposedCausalAttention(qkv.select(2, 0), qkv.select(2, 1),
                                                        qkv.select(2, 2), FireBias(block.fire, n));
    return block.proj(mixed.reshape({batch, n, shape_.d_model}));
  }
  const bool rotates = method_ == PositionMethod::kRope || method_ == PositionMethod::kXpos ||
                       method_ == PositionMethod::kRandomized;
  const std::optional<Rope> rotation = rotates ? std::optional<Rope>(rope) : std::nullopt;
  std::optional<BucketBias> bias;
  if (method_ == PositionMethod::kT5) {
    bias = BucketBias{.table = t5_table_,
                      .buckets = {.num_buckets = shape_.t5_buckets,
                                  .max_distance = shape_.t5_max_distance,
                                  .bidirectional = false}};
  } else if (method_ == PositionMethod::kKerple) {
    bias = KerpleLogBias(block.kerple_r1, block.kerple_r2, n);
  }
  const torch::Tensor scaled =
      method_ == PositionMethod::kXpos
          ? qkv * XposFactors(Xpos{.scale_base = shape_.xpos_scale_base}, n, head_dim())
          : qkv;
  const torch::Tensor mixed =
      CausalAttentionAutograd(scaled, positions, rotation, method_ == PositionMethod::kAlibi, bias);
  return block.proj(mixed.reshape({batch, n, shape_.d_model}));
}

torch::Tensor CharModelImpl::forward(const torch::Tensor& ids, const Rope& rope,
                                     const LongContext& reading, const torch::Tensor& positions) {
  if (reading.kind != LongContext::Kind::kFull) {
    TORCH_CHECK(method_ == PositionMethod::kRope && !torch::GradMode::is_enabled(),
                "[study] Self-Extend, dual chunk attention and attention sinks read a RoPE model, "
                "without gradient");
  }
  const int64_t batch = ids.size(0), n = ids.size(1);
  TORCH_CHECK(positions.defined() == (method_ == PositionMethod::kRandomized),
              "[study] positions are given for randomized positions, and for nothing else");
  const torch::Tensor window = torch::arange(n, torch::kInt64);
  const torch::Tensor rows = positions.defined() ? positions : window.expand({batch, n});
  TORCH_CHECK(rows.sizes() == ids.sizes(), "[study] positions must be [batch, tokens] as ids");
  torch::Tensor x = tokens_(ids);
  if (method_ == PositionMethod::kLearned) {
    x = x + LookupLearnedAutograd(learned_, window);
  } else if (method_ == PositionMethod::kSinusoidal) {
    x = x + SinusoidalTable(window, shape_.d_model);
  }
  for (Block& block : blocks_) {
    x = x + Attention(block, block.norm1(x), rows, rope, reading);
    x = x + block.down(torch::gelu(block.up(block.norm2(x))));
  }
  return head_(final_norm_(x));
}

}  // namespace posenc::study
