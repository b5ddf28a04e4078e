// Token embedding plus absolute position: the input of a GPT-2 or original-Transformer model,
//
//   x[t] = token_embedding[ids[t]] + position(positions[t])
//
// where position() is a learned table row or the sinusoidal vector. (RoPE and ALiBi add nothing
// here: they act inside attention.)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <variant>

#include "posenc/learned.h"
#include "posenc/sinusoidal.h"

namespace posenc {

// A read-only row-major [vocab_size, d_model] token embedding table.
struct TokenTable {
  std::span<const float> data;
  int64_t vocab_size = 0;
  int64_t d_model = 0;
};

// The absolute position scheme to add: a sinusoidal spec or a learned table.
using AbsolutePositions = std::variant<Sinusoidal, std::reference_wrapper<const LearnedPositions>>;

// out is [ids.size(), d_model] and must not overlap the token table. ids and positions have one
// entry per token. Throws posenc::Error for an id outside the vocabulary, a position outside the
// scheme (negative, or >= max_positions of a learned table), or mismatched widths; everything is
// checked before out is written. The sum is taken in float, as PyTorch models compute it.
void EmbedTokens(const TokenTable& tokens, std::span<const int64_t> ids,
                 std::span<const int64_t> positions, const AbsolutePositions& scheme,
                 std::span<float> out);

}  // namespace posenc
