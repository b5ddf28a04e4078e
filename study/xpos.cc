#include "xpos.h"

#include <cmath>

namespace posenc::study {

torch::Tensor XposFactors(const Xpos& xpos, int64_t tokens, int64_t head_dim) {
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0 && xpos.scale_base > 0.0 && xpos.gamma > 0.0,
              "[study] XposFactors: head_dim must be even and > 0, gamma and scale_base > 0");
  const int64_t pairs = head_dim / 2;
  const int64_t middle = (tokens + 1) / 2;
  torch::Tensor factors = torch::ones({tokens, 3, 1, head_dim}, torch::kFloat64);
  auto f = factors.accessor<double, 4>();
  for (int64_t t = 0; t < tokens; ++t) {
    const double exponent = static_cast<double>(t - middle) / xpos.scale_base;
    for (int64_t i = 0; i < pairs; ++i) {
      const double zeta =
          (2.0 * static_cast<double>(i) / static_cast<double>(head_dim) + xpos.gamma) /
          (1.0 + xpos.gamma);
      const double q = std::pow(zeta, exponent);
      for (int64_t half : {int64_t{0}, pairs}) {
        f[t][0][0][i + half] = q;
        f[t][1][0][i + half] = 1.0 / q;
      }
    }
  }
  return factors.to(torch::kFloat32);
}

}  // namespace posenc::study
