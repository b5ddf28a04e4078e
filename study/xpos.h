// xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer", arXiv:2212.10554): RoPE whose
// pairs also decay with distance. Pair i of a head of d dimensions has
//
//   zeta_i = (2 i / d + gamma) / (1 + gamma)        (gamma = 0.4: zeta in [0.29, 1))
//
// and q at position n is rotated and scaled by zeta_i^(n / B), k at position m rotated and scaled
// by zeta_i^(-m / B), so pair i's part of the score q . k is scaled by zeta_i^((n - m) / B): the
// farther the key, the less its fast-turning pairs count. B is the scale base (the paper's 512
// at a training length of 1024). As the authors' code does, positions are counted from the middle
// of the window (n - ceil(T / 2) for a window of T tokens), which keeps both factors near 1; the
// scores depend on n - m only, so this changes nothing but the float range.
//
// In the study the rotation is posenc's RoPE inside posenc's attention; the scale is these
// factors, multiplied into q and k before the call (a torch multiply; its gradient is torch's).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace posenc::study {

struct Xpos {
  double gamma = 0.4;
  double scale_base = 512.0;  // B
};

// float32 [tokens, 3, 1, head_dim]: the factors q, k and v of window positions 0 .. tokens - 1
// are multiplied by (v's are 1), laid out to broadcast over qkv [batch, tokens, 3, heads,
// head_dim] with half-split pairs (pair i is dimensions i and i + head_dim / 2). Computed in
// double.
torch::Tensor XposFactors(const Xpos& xpos, int64_t tokens, int64_t head_dim);

}  // namespace posenc::study
