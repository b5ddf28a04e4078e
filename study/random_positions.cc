#include "random_positions.h"

#include <random>

namespace posenc::study {
namespace {

void Draw(std::mt19937_64& engine, int64_t count, int64_t range, int64_t* out) {
  int64_t taken = 0;
  for (int64_t t = 0; t < range && taken < count; ++t) {
    // Uniform in [0, range - t): below count - taken with exactly the probability wanted.
    std::uniform_int_distribution<int64_t> draw(0, range - t - 1);
    if (draw(engine) < count - taken) out[taken++] = t;
  }
}

void Check(int64_t count, int64_t range) {
  TORCH_CHECK(count >= 0 && count <= range,
              "[study] RandomOrderedPositions: count must be in [0, range], got count ", count,
              " with range ", range);
}

}  // namespace

std::vector<int64_t> RandomOrderedPositions(int64_t count, int64_t range, uint64_t seed) {
  Check(count, range);
  std::mt19937_64 engine(seed);
  std::vector<int64_t> positions(static_cast<size_t>(count));
  Draw(engine, count, range, positions.data());
  return positions;
}

torch::Tensor RandomOrderedPositionRows(int64_t batch, int64_t count, int64_t range,
                                        uint64_t seed) {
  Check(count, range);
  std::mt19937_64 engine(seed);
  torch::Tensor rows = torch::empty({batch, count}, torch::kInt64);
  for (int64_t b = 0; b < batch; ++b) Draw(engine, count, range, rows[b].data_ptr<int64_t>());
  return rows;
}

}  // namespace posenc::study
