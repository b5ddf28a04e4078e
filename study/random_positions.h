// Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
// Generalization of Transformers", arXiv:2305.16843): a window of n tokens takes n distinct
// positions drawn uniformly from [0, range), in increasing order, instead of 0 .. n - 1. The
// model trains on short windows whose positions nonetheless spread over the whole range, so that
// a long window's positions and distances are ones it has seen. range is the longest window it
// is meant to read (here 16x the training length); at that length the positions are 0 .. n - 1.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace posenc::study {

// `count` positions of [0, range), sorted, distinct, every subset equally likely (Knuth's
// selection sampling, TAOCP vol. 2, 3.4.2, Algorithm S: position t is taken with probability
// (count - taken) / (range - t)), a function of `seed` alone. Requires 0 <= count <= range.
std::vector<int64_t> RandomOrderedPositions(int64_t count, int64_t range, uint64_t seed);

// int64 [batch, count]: one draw per row, the rows in turn from one generator seeded by `seed`.
torch::Tensor RandomOrderedPositionRows(int64_t batch, int64_t count, int64_t range, uint64_t seed);

}  // namespace posenc::study
