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

// start, start + 1, ..., start + count - 1 (all within [0, kMaxPosition]).
std::vector<int64_t> PositionRange(int64_t start, int64_t count);

// Packed sequences given by cumulative lengths cu_seqlens = [0, n0, n0 + n1, ...]: each
// sequence counts from 0. E.g. {0, 3, 5} -> {0, 1, 2, 0, 1}.
std::vector<int64_t> PackedPositions(std::span<const int64_t> cu_seqlens);

// The largest position any operation takes: 2^32, 400 times the longest context of any released
// model. Every position is in [0, kMaxPosition], the one rule for every API and storage type:
// up to it, float32, bfloat16 and float16 RoPE (and the sinusoidal table) keep cos and sin
// within 2 float32 ulps of 1 of the exact values; beyond it the float32 angle reduction drifts
// (32 ulps at 2^36, 2000 at 2^42) and from about 2^59 gives inf and NaN. Differences of two
// positions cannot overflow int64. See docs/PRECISION.md.
inline constexpr int64_t kMaxPosition = int64_t{1} << 32;

// Throws posenc::Error unless 0 <= pos <= kMaxPosition; `name` names it in the message.
void ValidatePosition(std::string_view function, std::string_view name, int64_t pos);

// Throws posenc::Error unless positions has `tokens` entries, each in [0, kMaxPosition]. `name` is
// the list's name in the message, for functions that take more than one list (attention's
// key_pos).
void ValidatePositions(std::string_view function, std::span<const int64_t> positions,
                       int64_t tokens, std::string_view name = "positions");

}  // namespace posenc
