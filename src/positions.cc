#include "posenc/positions.h"

#include <string>

#include "posenc/error.h"

namespace posenc {

std::vector<int64_t> PositionRange(int64_t start, int64_t count) {
  Require(start >= 0, "position_range", "start", "be >= 0", start);
  Require(count >= 0, "position_range", "count", "be >= 0", count);
  ValidatePosition("position_range", "start", start);
  // Written as a difference so that a huge count cannot overflow.
  Require(count <= kMaxPosition - start + 1, "position_range", "count",
          "keep start + count - 1 <= 2^32 = 4294967296 (kMaxPosition)", count);
  std::vector<int64_t> positions(count);
  for (int64_t i = 0; i < count; ++i) positions[i] = start + i;
  return positions;
}

std::vector<int64_t> PackedPositions(std::span<const int64_t> cu_seqlens) {
  Require(!cu_seqlens.empty() && cu_seqlens[0] == 0, "packed_positions", "cu_seqlens[0]", "be 0",
          cu_seqlens.empty() ? std::string("an empty list") : std::to_string(cu_seqlens[0]));
  std::vector<int64_t> positions;
  for (size_t s = 1; s < cu_seqlens.size(); ++s) {
    Require(cu_seqlens[s] >= cu_seqlens[s - 1], "packed_positions",
            "cu_seqlens[" + std::to_string(s) + "]", "be non-decreasing", cu_seqlens[s]);
    for (int64_t p = 0; p < cu_seqlens[s] - cu_seqlens[s - 1]; ++p) positions.push_back(p);
  }
  return positions;
}

void ValidatePosition(std::string_view function, std::string_view name, int64_t pos) {
  Require(pos >= 0, function, name, "be >= 0", pos);
  Require(pos <= kMaxPosition, function, name,
          "be <= 2^32 = 4294967296 (kMaxPosition, where float32 RoPE stops being accurate)", pos);
}

void ValidatePositions(std::string_view function, std::span<const int64_t> positions,
                       int64_t tokens, std::string_view name) {
  // Messages are built only on failure: this runs on every call, a decode step included.
  const std::string_view n = name;
  if (static_cast<int64_t>(positions.size()) != tokens) {
    Require(false, function, std::string(n) + ".size()",
            "equal the number of tokens (" + std::to_string(tokens) + ")", positions.size());
  }
  for (size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0 || positions[t] > kMaxPosition) {
      ValidatePosition(function, std::string(n) + "[" + std::to_string(t) + "]", positions[t]);
    }
  }
}

}  // namespace posenc
