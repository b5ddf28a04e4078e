#include "fire.h"

#include <cmath>
#include <limits>
#include <vector>

namespace posenc::study {

torch::Tensor FireBias(const FireParameters& fire, int64_t tokens) {
  namespace F = torch::nn::functional;
  const torch::Tensor position = torch::arange(tokens, torch::kFloat32);
  const torch::Tensor c = fire.c.abs();
  const auto psi = [&](const torch::Tensor& x) { return torch::log1p(c * x); };
  const torch::Tensor distance = (position.unsqueeze(1) - position.unsqueeze(0)).clamp_min(0);
  const torch::Tensor divisor = psi(torch::maximum(position, fire.threshold.abs()));
  const torch::Tensor input = psi(distance) / divisor.unsqueeze(1);  // [query, key]
  // The MLP over query rows in blocks: its hidden layer is 32 floats per pair, 512 MB at 2048
  // tokens if made at once.
  const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 18) / tokens);
  std::vector<torch::Tensor> blocks;
  for (int64_t first = 0; first < tokens; first += rows) {
    const torch::Tensor x = input.slice(0, first, std::min(tokens, first + rows)).unsqueeze(-1);
    const torch::Tensor hidden = torch::relu(F::linear(x, fire.hidden->weight, fire.hidden->bias));
    blocks.push_back(F::linear(hidden, fire.out->weight, fire.out->bias));  // [rows, tokens, heads]
  }
  return torch::cat(blocks, 0).permute({2, 0, 1});
}

torch::Tensor ComposedCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& bias) {
  const int64_t tokens = q.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor scores =
      torch::matmul(q.transpose(1, 2), k.permute({0, 2, 3, 1})) * scale + bias.unsqueeze(0);
  const torch::Tensor future = torch::ones({tokens, tokens}, torch::kBool).triu(1);
  const torch::Tensor weights =
      torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(weights, v.transpose(1, 2)).transpose(1, 2);
}

}  // namespace posenc::study
