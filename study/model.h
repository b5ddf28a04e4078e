// The study's model: a tiny pre-norm causal transformer over characters. Only the position
// method changes between arms; it enters in one of these places, all served by posenc but FIRE:
//   learned / sinusoidal: added to the token embeddings (LookupLearnedAutograd, SinusoidalTable);
//   RoPE: q and k rotated inside attention (with any Rope: scaled or not);
//   randomized: RoPE at positions the caller draws (random_positions.h), not 0 .. tokens - 1;
//   xPos: RoPE inside attention, q and k scaled before it (xpos.h);
//   ALiBi: a bias on the attention scores;
//   T5: a learned table of biases by bucket of distance, shared by the layers, as T5 shares it;
//   KERPLE (log): a learned bias of the distance per layer and head, as a one-bucket-per-distance
//     table (distance_bias.h);
//   FIRE: a learned bias of the query's position and the distance per layer, in attention composed
//     in torch ops (fire.h: the kernel has no such bias);
//   none (NoPE): nothing; only the causal mask tells the model where it is.
// Attention itself is posenc's, forward and backward (CausalAttentionAutograd), with RoPE, ALiBi
// and the bucket biases as its options; FIRE alone attends in torch ops.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "fire.h"
#include "long_context.h"
#include "posenc/rope.h"

namespace posenc::study {

enum class PositionMethod {
  kLearned,
  kSinusoidal,
  kRope,
  kAlibi,
  kNone,
  kT5,
  kXpos,
  kKerple,
  kFire,
  kRandomized
};

std::string MethodName(PositionMethod method);
// The schemes papers compare against the common ones (T5's bias, xPos, KERPLE, FIRE, randomized
// positions): drawn apart in the figures.
bool IsResearchScheme(PositionMethod method);

struct ModelShape {
  int64_t vocab = 0;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t learned_rows = 2048;  // rows of the learned table (only the trained length is trained)
  // T5's buckets: T5's 32, and its max_distance of 128 is the training length here.
  int64_t t5_buckets = 32;
  int64_t t5_max_distance = 128;
  // xPos's scale base B: the paper's 512 at a training length of 1024, half the training length.
  double xpos_scale_base = 64.0;
  // FIRE's threshold L starts at the training length (learned from there).
  double fire_threshold = 128.0;
};

class CharModelImpl : public torch::nn::Module {
 public:
  CharModelImpl(const ModelShape& shape, PositionMethod method);

  // ids: int64 [batch, tokens] -> logits [batch, tokens, vocab]. Window positions are
  // 0 .. tokens - 1, or for the randomized method `positions`, int64 [batch, tokens] (increasing
  // along each row; random_positions.h), which it requires. `rope` is the rotation for this call
  // (scaled variants swap it at evaluation); it is ignored by the methods without RoPE.
  // `reading` changes how a RoPE model's attention reads the window (Self-Extend, dual chunk
  // attention, attention sinks: long_context.h; evaluation only, no gradient).
  torch::Tensor forward(const torch::Tensor& ids, const Rope& rope, const LongContext& reading = {},
                        const torch::Tensor& positions = torch::Tensor());

  const ModelShape& shape() const { return shape_; }
  PositionMethod method() const { return method_; }
  int64_t head_dim() const { return shape_.d_model / shape_.heads; }

 private:
  struct Block {
    torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
    torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
    torch::Tensor kerple_r1, kerple_r2;  // KERPLE only: [heads] each
    FireParameters fire;                 // FIRE only
  };
  torch::Tensor Attention(Block& block, const torch::Tensor& x, const torch::Tensor& positions,
                          const Rope& rope, const LongContext& reading);

  ModelShape shape_;
  PositionMethod method_;
  torch::nn::Embedding tokens_{nullptr};
  torch::Tensor learned_;   // [learned_rows, d_model], learned method only
  torch::Tensor t5_table_;  // [t5_buckets, heads], T5 only
  std::vector<Block> blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(CharModel);

}  // namespace posenc::study
