// Rotate a query and a key with RoPE and check that their score depends only on the distance.
#include <posenc/rope.h>

#include <cstdio>
#include <vector>

int main() {
  const int64_t tokens = 2, heads = 1, head_dim = 8;
  const posenc::Rope rope = posenc::Rope::Default(head_dim);  // base 10000, half-split pairs

  auto score_at = [&](int64_t m, int64_t n) {
    std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8,   // q: token 0
                            8, 7, 6, 5, 4, 3, 2, 1};  // k: token 1
    const std::vector<int64_t> positions = {m, n};
    // x is row-major [tokens, heads, head_dim], rotated in place.
    posenc::ApplyRope(rope, positions,
                      posenc::Heads<float>::Dense(x.data(), tokens, heads, head_dim));
    float dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += x[d] * x[head_dim + d];
    return dot;
  };
  std::printf("score(5, 2) = %.4f, score(1005, 1002) = %.4f\n", score_at(5, 2),
              score_at(1005, 1002));
}
