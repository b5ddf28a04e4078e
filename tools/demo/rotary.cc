// (g) RoPE: turn q and k by their positions; scores then depend only on the distance.
#include <cmath>
#include <numbers>

#include "demo/section.h"
#include "posenc/rope.h"

namespace posenc::demo {
namespace {

constexpr int64_t kDim = 16;

// q at position m scored against k at position n, both rotated by RoPE.
double Score(const Rope& rope, const std::vector<float>& q, const std::vector<float>& k, int64_t m,
             int64_t n) {
  std::vector<float> qm(kDim), kn(kDim);
  const std::vector<int64_t> pm = {m}, pn = {n};
  ApplyRope(rope, pm, Heads<const float>::Dense(q.data(), 1, 1, kDim),
            Heads<float>::Dense(qm.data(), 1, 1, kDim));
  ApplyRope(rope, pn, Heads<const float>::Dense(k.data(), 1, 1, kDim),
            Heads<float>::Dense(kn.data(), 1, 1, kDim));
  double dot = 0.0;
  for (int64_t d = 0; d < kDim; ++d) dot += double(qm[d]) * kn[d];
  return dot;
}

}  // namespace

Section RotaryEmbedding() {
  Section s{.id = "g", .title = "RoPE: positions as rotations of q and k"};

  // One pair turned by a quarter turn: inv_freq = pi/2 at position 1.
  Rope quarter{.head_dim = 2, .rotary_dim = 2, .inv_freq = {std::numbers::pi / 2}};
  std::vector<float> v = {2.0f, 1.0f}, turned(2);
  ApplyRope(quarter, std::vector<int64_t>{1}, Heads<const float>::Dense(v.data(), 1, 1, 2),
            Heads<float>::Dense(turned.data(), 1, 1, 2));
  const double before = std::hypot(v[0], v[1]), after = std::hypot(turned[0], turned[1]);
  s.lines.push_back("(2, 1) turned a quarter turn: " + FormatVector(turned) +
                    Format("; length %.4f before, %.4f after", before, after));
  s.checks.push_back({"(2, 1) turned a quarter gives (-1, 2)",
                      std::fabs(turned[0] + 1) < 1e-6 && std::fabs(turned[1] - 2) < 1e-6});
  s.checks.push_back({"its length is 2.236 before and after",
                      std::fabs(before - std::sqrt(5.0)) < 1e-6 && std::fabs(after - std::sqrt(5.0)) < 1e-6});
  s.numbers["quarter_turn"] = turned;

  const Rope rope = Rope::Default(kDim);
  const auto q = RandomNormal(1, kDim, 21), k = RandomNormal(1, kDim, 22);
  const int64_t pairs[][2] = {{5, 2}, {105, 102}, {1005, 1002}, {1000005, 1000002}, {7, 2}};
  s.lines.push_back("16-wide random q and k; score = rope(q, m) . rope(k, n):");
  for (const auto& [m, n] : pairs) {
    const double score = Score(rope, q, k, m, n);
    s.lines.push_back(Format("  (m, n) = (%lld, %lld), m - n = %lld: %.6f", static_cast<long long>(m),
                             static_cast<long long>(n), static_cast<long long>(m - n), score));
    s.numbers["scores"].push_back({{"m", m}, {"n", n}, {"score", score}});
  }
  const double s52 = Score(rope, q, k, 5, 2);
  const bool equal = std::fabs(Score(rope, q, k, 105, 102) - s52) < 1e-5 &&
                     std::fabs(Score(rope, q, k, 1005, 1002) - s52) < 1e-5;
  s.checks.push_back({"scores at (5, 2), (105, 102) and (1005, 1002) are equal", equal});
  s.checks.push_back({"... and at (1000005, 1000002), a million positions on",
                      std::fabs(Score(rope, q, k, 1000005, 1000002) - s52) < 1e-5});
  s.checks.push_back({"(7, 2) differs", std::fabs(Score(rope, q, k, 7, 2) - s52) > 1e-3});

  std::string rows;
  for (int64_t distance = -40; distance <= 40; ++distance) {
    rows += Format("%lld %.6f %.6f\n", static_cast<long long>(distance),
                   Score(rope, q, k, 50 + distance, 50), Score(rope, q, k, 100000 + distance, 100000));
  }
  s.figures.push_back({.file_stem = "rope_score_vs_distance",
                       .caption = "RoPE score against m - n, with k at position 50 and at 100,000: "
                                  "the curves coincide",
                       .data = {{"scores", rows}},
                       .script = R"(set title 'RoPE: the score depends only on m - n'
set xlabel 'm - n'
set ylabel 'rope(q, m) · rope(k, n)'
set key bottom right box opaque
plot $scores using 1:2 with lines ls 1 lw 6 title 'n = 50', \
     $scores using 1:3 with lines ls 2 dt 2 title 'n = 100,000')"});
  return s;
}

}  // namespace posenc::demo
