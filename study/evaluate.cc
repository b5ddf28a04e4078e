#include "evaluate.h"

#include <algorithm>
#include <vector>

#include "random_positions.h"

namespace posenc::study {

std::string ProtocolName(Protocol protocol) {
  return protocol == Protocol::kNonOverlapping ? "nonoverlapping" : "sliding";
}

double HeldOutLoss(CharModel& model, const Rope& rope, const torch::Tensor& held_out,
                   int64_t length, Protocol protocol, int64_t eval_chars, int64_t batch_tokens,
                   const LongContext& reading, int64_t random_position_range) {
  torch::NoGradGuard no_grad;
  model->eval();
  // Each window: the characters at [start, start + length) predict [start + 1, start + length],
  // and only targets from `first_scored` on count.
  struct Window {
    int64_t start, first_scored;
  };
  std::vector<Window> windows;
  if (protocol == Protocol::kNonOverlapping) {
    for (int64_t start = 0; start + length <= eval_chars; start += length)
      windows.push_back({start, 0});
  } else {
    const int64_t stride = std::max<int64_t>(1, length / 4);
    for (int64_t start = 0; start + length <= eval_chars; start += stride) {
      windows.push_back({start, start == 0 ? 0 : length - stride});
    }
  }
  const int64_t per_batch = std::max<int64_t>(1, batch_tokens / length);
  double nats = 0.0;
  int64_t scored = 0;
  for (size_t first = 0; first < windows.size(); first += per_batch) {
    const size_t last = std::min(windows.size(), first + per_batch);
    std::vector<torch::Tensor> rows;
    for (size_t w = first; w < last; ++w)
      rows.push_back(held_out.slice(0, windows[w].start, windows[w].start + length + 1));
    const torch::Tensor batch = torch::stack(rows);
    torch::Tensor positions;
    if (model->method() == PositionMethod::kRandomized) {
      std::vector<torch::Tensor> drawn;
      for (size_t w = first; w < last; ++w) {
        const auto seed = static_cast<uint64_t>(windows[w].start * 1'000'003 + length);
        drawn.push_back(torch::tensor(RandomOrderedPositions(length, random_position_range, seed),
                                      torch::kInt64));
      }
      positions = torch::stack(drawn);
    }
    const torch::Tensor logits =
        model->forward(batch.slice(1, 0, length), rope, reading, positions);
    const torch::Tensor losses =
        torch::nn::functional::cross_entropy(
            logits.reshape({-1, logits.size(2)}), batch.slice(1, 1).reshape(-1),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
            .view({static_cast<int64_t>(last - first), length});
    for (size_t w = first; w < last; ++w) {
      const int64_t from = windows[w].first_scored;
      nats += losses[static_cast<int64_t>(w - first)].slice(0, from).sum().item<double>();
      scored += length - from;
    }
  }
  return nats / static_cast<double>(scored);
}

}  // namespace posenc::study
