// (a) Self-attention treats its input as a set: shuffle the tokens and the outputs shuffle with
// them. A causal mask and every position scheme break that symmetry.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lesson/order_experiment.h"
#include "lesson/section.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/learned.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/sinusoidal.h"

namespace posenc::lesson {
namespace {

// How positions enter one single-head attention layer.
enum class Scheme { kNone, kCausalMask, kSinusoidal, kLearned, kRope, kAlibi };

struct Variant {
  Scheme scheme;
  const char* name;
};
constexpr Variant kVariants[] = {{Scheme::kNone, "no positions"},
                                 {Scheme::kCausalMask, "causal mask"},
                                 {Scheme::kSinusoidal, "sinusoidal"},
                                 {Scheme::kLearned, "learned"},
                                 {Scheme::kRope, "RoPE"},
                                 {Scheme::kAlibi, "ALiBi"}};

struct Layer {
  std::vector<float> w_q, w_k, w_v;  // [kOrderWidth, kOrderWidth]
  LearnedPositions learned = LearnedPositions::Random(kOrderMaxTokens, kOrderWidth, 7, 0.5);
};

// The fixed layer every run uses: W_q and W_k scaled by 1 / sqrt(width).
const Layer& FixedLayer() {
  static const Layer layer = [] {
    Layer l{RandomNormal(kOrderWidth, kOrderWidth, 11), RandomNormal(kOrderWidth, kOrderWidth, 12),
            RandomNormal(kOrderWidth, kOrderWidth, 13)};
    for (float& w : l.w_q) w /= std::sqrt(float(kOrderWidth));
    for (float& w : l.w_k) w /= std::sqrt(float(kOrderWidth));
    return l;
  }();
  return layer;
}

std::vector<float> Project(const std::vector<float>& x, const std::vector<float>& w) {
  const int64_t tokens = static_cast<int64_t>(x.size()) / kOrderWidth;
  std::vector<float> y(x.size(), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < kOrderWidth; ++j)
      for (int64_t i = 0; i < kOrderWidth; ++i)
        y[t * kOrderWidth + j] += x[t * kOrderWidth + i] * w[i * kOrderWidth + j];
  return y;
}

// attention(x) for tokens sitting at positions 0 .. n - 1, whatever their content.
std::vector<float> Attend(const Layer& layer, std::vector<float> x, Scheme scheme) {
  const int64_t tokens = static_cast<int64_t>(x.size()) / kOrderWidth;
  const auto positions = PositionRange(0, tokens);
  std::vector<float> table(x.size(), 0.0f);
  if (scheme == Scheme::kSinusoidal) FillSinusoidalTable(Sinusoidal{kOrderWidth}, tokens, table);
  if (scheme == Scheme::kLearned) layer.learned.Lookup(positions, table);
  for (size_t i = 0; i < x.size(); ++i) x[i] += table[i];

  const auto q = Project(x, layer.w_q), k = Project(x, layer.w_k), v = Project(x, layer.w_v);
  AttentionOptions options;
  options.causal = scheme == Scheme::kCausalMask;
  if (scheme == Scheme::kRope) options.rope = Rope::Default(kOrderWidth);
  if (scheme == Scheme::kAlibi) options.alibi = Alibi{.num_heads = 1};
  std::vector<float> out(x.size());
  auto view = [tokens](const std::vector<float>& a) {
    return Heads<const float>::Dense(a.data(), tokens, 1, kOrderWidth);
  };
  Attention(options, view(q), view(k), view(v), positions, positions,
            Heads<float>::Dense(out.data(), tokens, 1, kOrderWidth));
  return out;
}

std::vector<float> Shuffle(std::span<const float> rows, std::span<const int64_t> permutation) {
  std::vector<float> shuffled(rows.size());
  for (size_t t = 0; t < permutation.size(); ++t) {
    std::copy_n(rows.begin() + permutation[t] * kOrderWidth, kOrderWidth,
                shuffled.begin() + t * kOrderWidth);
  }
  return shuffled;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

std::vector<OrderResult> CompareOrders(std::span<const float> x,
                                       std::span<const int64_t> permutation) {
  const int64_t tokens = static_cast<int64_t>(permutation.size());
  Require(tokens >= 1 && tokens <= kOrderMaxTokens, "order", "tokens",
          "be between 1 and " + std::to_string(kOrderMaxTokens), tokens);
  Require(static_cast<int64_t>(x.size()) == tokens * kOrderWidth, "order", "x.size()",
          "be tokens x " + std::to_string(kOrderWidth), x.size());
  std::vector<int64_t> sorted(permutation.begin(), permutation.end());
  std::sort(sorted.begin(), sorted.end());
  for (int64_t t = 0; t < tokens; ++t) {
    Require(sorted[t] == t, "order", "permutation", "hold each of 0 .. tokens - 1 once",
            "a repeated or missing index");
  }
  const std::vector<float> rows(x.begin(), x.end());
  std::vector<OrderResult> results;
  for (const Variant& variant : kVariants) {
    OrderResult r{.scheme = variant.name,
                  .attention = Attend(FixedLayer(), rows, variant.scheme),
                  .shuffled = Attend(FixedLayer(), Shuffle(rows, permutation), variant.scheme)};
    r.max_abs_diff = MaxAbsDiff(r.shuffled, Shuffle(r.attention, permutation));
    results.push_back(std::move(r));
  }
  return results;
}

Section OrderBlindness() {
  Section s{.id = "a", .title = "Attention ignores order"};
  constexpr int64_t kTokens = 5;
  const std::vector<int64_t> permutation = {3, 0, 4, 1, 2};
  const auto x = RandomNormal(kTokens, kOrderWidth, 10);

  s.lines.push_back("5 random tokens of width 8, random W_q, W_k, W_v, one head.");
  s.lines.push_back("Shuffle the tokens by [3, 0, 4, 1, 2]; positions 0..4 stay where they are.");
  s.lines.push_back("max |attention(shuffled x) - shuffled attention(x)|:");

  std::string bars;
  for (const OrderResult& r : CompareOrders(x, permutation)) {
    const bool equivariant = r.max_abs_diff < 1e-6;
    s.lines.push_back(
        Format("  %-13s %.3g  -> %s", r.scheme.c_str(), r.max_abs_diff,
               equivariant ? "same up to the shuffle (True)" : "order matters (False)"));
    s.numbers["max_abs_diff"][r.scheme] = r.max_abs_diff;
    if (r.scheme == "no positions") {
      s.checks.push_back(
          {"attention of the shuffled input equals the shuffled output (True)", equivariant});
    } else if (r.scheme == "causal mask") {
      s.checks.push_back({"a causal mask leaks order: the equality breaks", !equivariant});
    } else {
      s.checks.push_back({r.scheme + " breaks the symmetry", !equivariant});
    }
    bars += Format("\"%s\" %.6g\n", r.scheme.c_str(), r.max_abs_diff);
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

}  // namespace posenc::lesson
