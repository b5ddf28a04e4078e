// (a) Self-attention treats its input as a set: shuffle the tokens and the outputs shuffle with
// them. A causal mask and every position scheme break that symmetry.
#include <algorithm>
#include <cmath>
#include <optional>

#include "demo/section.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/learned.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/sinusoidal.h"

namespace posenc::demo {
namespace {

constexpr int64_t kTokens = 5;
constexpr int64_t kWidth = 8;
constexpr int64_t kPermutation[kTokens] = {3, 0, 4, 1, 2};

// How positions enter one single-head attention layer.
enum class Scheme { kNone, kCausalMask, kSinusoidal, kLearned, kRope, kAlibi };

struct Layer {
  std::vector<float> w_q, w_k, w_v;  // [kWidth, kWidth]
  LearnedPositions learned = LearnedPositions::Random(kTokens, kWidth, 7, 0.5);
};

std::vector<float> Project(const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<float> y(kTokens * kWidth, 0.0f);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t j = 0; j < kWidth; ++j)
      for (int64_t i = 0; i < kWidth; ++i) y[t * kWidth + j] += x[t * kWidth + i] * w[i * kWidth + j];
  return y;
}

// attention(x) for tokens sitting at positions 0 .. 4, whatever their content.
std::vector<float> Attend(const Layer& layer, std::vector<float> x, Scheme scheme) {
  const auto positions = PositionRange(0, kTokens);
  std::vector<float> table(kTokens * kWidth, 0.0f);
  if (scheme == Scheme::kSinusoidal) FillSinusoidalTable(Sinusoidal{kWidth}, kTokens, table);
  if (scheme == Scheme::kLearned) layer.learned.Lookup(positions, table);
  for (size_t i = 0; i < x.size(); ++i) x[i] += table[i];

  const auto q = Project(x, layer.w_q), k = Project(x, layer.w_k), v = Project(x, layer.w_v);
  AttentionOptions options;
  options.causal = scheme == Scheme::kCausalMask;
  if (scheme == Scheme::kRope) options.rope = Rope::Default(kWidth);
  if (scheme == Scheme::kAlibi) options.alibi = Alibi{.num_heads = 1};
  std::vector<float> out(kTokens * kWidth);
  auto view = [](const std::vector<float>& a) {
    return Heads<const float>::Dense(a.data(), kTokens, 1, kWidth);
  };
  Attention(options, view(q), view(k), view(v), positions, positions,
            Heads<float>::Dense(out.data(), kTokens, 1, kWidth));
  return out;
}

std::vector<float> Shuffle(const std::vector<float>& rows) {
  std::vector<float> shuffled(rows.size());
  for (int64_t t = 0; t < kTokens; ++t) {
    std::copy_n(rows.begin() + kPermutation[t] * kWidth, kWidth, shuffled.begin() + t * kWidth);
  }
  return shuffled;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

Section OrderBlindness() {
  Section s{.id = "a", .title = "Attention ignores order"};
  Layer layer{RandomNormal(kWidth, kWidth, 11), RandomNormal(kWidth, kWidth, 12),
              RandomNormal(kWidth, kWidth, 13)};
  for (float& w : layer.w_q) w /= std::sqrt(float(kWidth));
  for (float& w : layer.w_k) w /= std::sqrt(float(kWidth));
  const auto x = RandomNormal(kTokens, kWidth, 10);

  s.lines.push_back("5 random tokens of width 8, random W_q, W_k, W_v, one head.");
  s.lines.push_back("Shuffle the tokens by [3, 0, 4, 1, 2]; positions 0..4 stay where they are.");
  s.lines.push_back("max |attention(shuffled x) - shuffled attention(x)|:");

  struct Variant { Scheme scheme; const char* name; };
  const Variant variants[] = {{Scheme::kNone, "no positions"},
                              {Scheme::kCausalMask, "causal mask"},
                              {Scheme::kSinusoidal, "sinusoidal"},
                              {Scheme::kLearned, "learned"},
                              {Scheme::kRope, "RoPE"},
                              {Scheme::kAlibi, "ALiBi"}};
  std::string bars;
  for (const Variant& variant : variants) {
    const double diff =
        MaxAbsDiff(Attend(layer, Shuffle(x), variant.scheme), Shuffle(Attend(layer, x, variant.scheme)));
    const bool equivariant = diff < 1e-6;
    s.lines.push_back(Format("  %-13s %.3g  -> %s", variant.name, diff,
                             equivariant ? "same up to the shuffle (True)"
                                         : "order matters (False)"));
    s.numbers["max_abs_diff"][variant.name] = diff;
    if (variant.scheme == Scheme::kNone) {
      s.checks.push_back({"attention of the shuffled input equals the shuffled output (True)",
                          equivariant});
    } else if (variant.scheme == Scheme::kCausalMask) {
      s.checks.push_back({"a causal mask leaks order: the equality breaks", !equivariant});
    } else {
      s.checks.push_back({std::string(variant.name) + " breaks the symmetry", !equivariant});
    }
    bars += Format("\"%s\" %.6g\n", variant.name, diff);
  }
  s.numbers["permutation"] = {3, 0, 4, 1, 2};
  s.figures.push_back(
      {.file_stem = "order_blindness",
       .caption = "How far attention of the shuffled tokens is from the shuffled attention",
       .data = {{"bars", bars}},
       .script = R"(set style fill solid 0.8 border -1
set boxwidth 0.6
set ylabel 'max |attn(shuffled) - shuffled attn|'
set yrange [0:*]
set title 'Without positions, shuffling the input only shuffles the output'
plot $bars using 0:2:xtic(1) with boxes ls 1 notitle)"});
  return s;
}

}  // namespace posenc::demo
