// The lesson's first experiment, for any tokens and any shuffle: one single-head attention layer
// (width 8, fixed random weights) over token vectors at positions 0 .. n - 1, with positions
// entering by each scheme in turn. Without positions, attention of the shuffled tokens is the
// shuffled attention; a causal mask and every position scheme break that. `posenc demo` runs it on
// five random tokens; `posenc serve`'s Order panel on the words of a sentence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace posenc::lesson {

constexpr int64_t kOrderWidth = 8;  // features per token
constexpr int64_t kOrderMaxTokens = 16;

struct OrderResult {
  std::string scheme;            // "no positions", "causal mask", "sinusoidal", "learned", ...
  std::vector<float> attention;  // attention(x) [n, kOrderWidth]
  std::vector<float> shuffled;   // attention(shuffled x) [n, kOrderWidth]
  double max_abs_diff = 0.0;     // max |attention(shuffled x) - shuffled attention(x)|
};

// x is [n, kOrderWidth] with 1 <= n <= kOrderMaxTokens; shuffled row t is x's row
// permutation[t] (a permutation of 0 .. n - 1). One result per scheme.
std::vector<OrderResult> CompareOrders(std::span<const float> x,
                                       std::span<const int64_t> permutation);

}  // namespace posenc::lesson
