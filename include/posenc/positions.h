// Positions: every position-aware operation takes one 64-bit position per token.
//
// A contiguous range, a packed batch of variable-length sequences and a KV-cache decode step
// are all just lists; these helpers build the common ones.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace posenc {

// start, start + 1, ..., start + count - 1.
std::vector<int64_t> PositionRange(int64_t start, int64_t count);

// Packed sequences given by cumulative lengths cu_seqlens = [0, n0, n0 + n1, ...]: each
// sequence counts from 0. E.g. {0, 3, 5} -> {0, 1, 2, 0, 1}.
std::vector<int64_t> PackedPositions(std::span<const int64_t> cu_seqlens);

// Throws posenc::Error unless positions has `tokens` entries, each >= 0. `name` is the list's
// name in the message, for functions that take more than one list (attention's key_pos).
void ValidatePositions(std::string_view function, std::span<const int64_t> positions,
                       int64_t tokens, std::string_view name = "positions");

}  // namespace posenc
