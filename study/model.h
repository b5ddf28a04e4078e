// The study's model: a tiny pre-norm causal transformer over characters. Only the position
// method changes between arms; it enters in one of three places, all served by posenc:
//   learned / sinusoidal: added to the token embeddings (LookupLearnedAutograd, SinusoidalTable);
//   RoPE: q and k rotated inside attention (with any Rope: scaled or not);
//   ALiBi: a bias on the attention scores;
//   none (NoPE): nothing; only the causal mask tells the model where it is.
// Attention itself is posenc's, forward and backward (CausalAttentionAutograd), with RoPE and
// ALiBi as its options.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "long_context.h"
#include "posenc/rope.h"

namespace posenc::study {

enum class PositionMethod { kLearned, kSinusoidal, kRope, kAlibi, kNone };

std::string MethodName(PositionMethod method);

struct ModelShape {
  int64_t vocab = 0;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t learned_rows = 2048;  // rows of the learned table (only the trained length is trained)
};

class CharModelImpl : public torch::nn::Module {
 public:
  CharModelImpl(const ModelShape& shape, PositionMethod method);

  // ids: int64 [batch, tokens] -> logits [batch, tokens, vocab]. Window positions are
  // 0 .. tokens - 1. `rope` is the rotation for this call (scaled variants swap it at evaluation);
  // it is ignored by the other methods. `reading` changes how a RoPE model's attention reads the
  // window (Self-Extend, attention sinks: long_context.h; evaluation only, no gradient).
  torch::Tensor forward(const torch::Tensor& ids, const Rope& rope,
                        const LongContext& reading = {});

  const ModelShape& shape() const { return shape_; }
  PositionMethod method() const { return method_; }
  int64_t head_dim() const { return shape_.d_model / shape_.heads; }

 private:
  struct Block {
    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
  };
  torch::Tensor Attention(Block& block, const torch::Tensor& x, const torch::Tensor& positions,
                          const Rope& rope, const LongContext& reading);

  ModelShape shape_;
  PositionMethod method_;
  torch::nn::Embedding tokens_{nullptr};
  torch::Tensor learned_;  // [learned_rows, d_model], learned method only
  std::vector<Block> blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(CharModel);

}  // namespace posenc::study
