// (d) The sinusoidal table, (e) its waves, (f) why a shift is a rotation.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lesson/section.h"
#include "posenc/sinusoidal.h"

namespace posenc::lesson {
namespace {

double Dot(const Sinusoidal& spec, int64_t p, int64_t q) {
  double sum = 0.0;
  for (int64_t j = 0; j < spec.dim; ++j)
    sum += SinusoidalValue(spec, p, j) * SinusoidalValue(spec, q, j);
  return sum;
}

}  // namespace

Section SinusoidalTable() {
  Section s{.id = "d", .title = "Sinusoidal positions: a fixed table of sines and cosines"};
  const Sinusoidal small{.dim = 4};
  const double lesson[3][4] = {{0, 1, 0, 1}, {0.841, 0.54, 0.01, 1.0}, {0.909, -0.416, 0.02, 1.0}};
  bool matches = true;
  s.lines.push_back("d = 4, PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(same):");
  for (int64_t p = 0; p < 3; ++p) {
    std::vector<float> row(4);
    FillSinusoidal(small, std::vector<int64_t>{p}, row);
    s.lines.push_back(Format("  position %lld: ", static_cast<long long>(p)) + FormatVector(row));
    s.numbers["d4"].push_back(row);
    for (int j = 0; j < 4; ++j) matches &= std::fabs(row[j] - lesson[p][j]) < 5e-3;
  }
  s.checks.push_back(
      {"positions 0, 1, 2 give [0, 1, 0, 1], [0.841, 0.54, 0.01, 1.0], "
       "[0.909, -0.416, 0.02, 1.0]",
       matches});

  const Sinusoidal wide{.dim = 32};
  constexpr int64_t kPositions = 64;
  std::vector<int64_t> order(kPositions);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> similarity(kPositions);
  for (int64_t p = 0; p < kPositions; ++p) similarity[p] = Dot(wide, 20, p);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return similarity[a] > similarity[b]; });
  s.lines.push_back("The 64 x 32 table; dot products with position 20, most similar first:");
  for (int r = 0; r < 5; ++r) {
    s.lines.push_back(
        Format("  position %2lld: %.9f", static_cast<long long>(order[r]), similarity[order[r]]));
    s.numbers["most_similar_to_20"].push_back(
        {{"position", order[r]}, {"dot", similarity[order[r]]}});
  }
  const double tie1 = std::fabs(similarity[19] - similarity[21]);
  const double tie2 = std::fabs(similarity[18] - similarity[22]);
  s.lines.push_back(
      Format("  |dot(20,19) - dot(20,21)| = %.2g, |dot(20,18) - dot(20,22)| = %.2g", tie1, tie2));
  s.lines.push_back("  (the dot product is sum_i cos((p - q) w_i): it depends only on |p - q|)");
  std::vector<int64_t> top(order.begin(), order.begin() + 5);
  std::sort(top.begin() + 1, top.begin() + 3);
  std::sort(top.begin() + 3, top.begin() + 5);
  s.checks.push_back({"the five most similar to 20 are 20, then 19 and 21, then 18 and 22",
                      top == std::vector<int64_t>{20, 19, 21, 18, 22}});
  s.checks.push_back({"each pair ties exactly (to 1e-12)", tie1 < 1e-12 && tie2 < 1e-12});

  double self_min = 1e9, self_max = -1e9;
  for (int64_t p = 0; p < kPositions; ++p) {
    self_min = std::min(self_min, Dot(wide, p, p));
    self_max = std::max(self_max, Dot(wide, p, p));
  }
  s.lines.push_back(
      Format("  every position's dot product with itself: min %.12g, max %.12g "
             "(sin^2 + cos^2 = 1, 16 pairs)",
             self_min, self_max));
  s.checks.push_back({"every position's dot product with itself is 16",
                      std::fabs(self_min - 16) < 1e-12 && std::fabs(self_max - 16) < 1e-12});
  s.numbers["self_dot"] = {{"min", self_min}, {"max", self_max}};

  std::vector<float> table(kPositions * wide.dim);
  FillSinusoidalTable(wide, kPositions, table);
  std::string matrix;
  for (int64_t j = 0; j < wide.dim; ++j) {
    for (int64_t p = 0; p < kPositions; ++p) matrix += Format("%.5f ", table[p * wide.dim + j]);
    matrix += '\n';
  }
  s.figures.push_back(
      {.file_stem = "sinusoidal_heatmap",
       .caption = "The 64 x 32 sinusoidal table: position across, dimension down",
       .width = 900,
       .height = 480,
       .data = {{"table", matrix}},
       .script = R"(set title 'Sinusoidal table, d = 32: fast waves on top, slow ones below'
set xlabel 'position'
set ylabel 'dimension'
set xrange [-0.5:63.5]
set yrange [31.5:-0.5]
set cbrange [-1:1]
set grid noxtics noytics
plot $table matrix with image pixels notitle)"});
  return s;
}

Section SinusoidalWaves() {
  Section s{.id = "e", .title = "The waves: every pair turns at its own speed"};
  const Sinusoidal spec{.dim = 32};
  const int64_t pairs[] = {0, 4, 12};
  const double lesson_wavelength[] = {6.3, 63, 6300};
  std::string rows;
  for (int64_t p = 0; p <= 23; ++p) {
    rows += Format("%lld", static_cast<long long>(p));
    for (int64_t pair : pairs) rows += Format(" %.6f", SinusoidalValue(spec, p, 2 * pair));
    rows += '\n';
  }
  bool close = true;
  for (int k = 0; k < 3; ++k) {
    const double wavelength = spec.Wavelength(2 * pairs[k]);
    s.lines.push_back(Format("pair %2lld (dims %lld, %lld): wavelength %.1f positions",
                             static_cast<long long>(pairs[k]), 2 * static_cast<long long>(pairs[k]),
                             2 * static_cast<long long>(pairs[k]) + 1, wavelength));
    s.numbers["wavelength"][std::to_string(pairs[k])] = wavelength;
    close &= std::fabs(wavelength / lesson_wavelength[k] - 1) < 0.01;
  }
  s.lines.push_back("Fast pairs tell neighbours apart; slow pairs tell distant regions apart.");
  s.checks.push_back(
      {"pairs 0, 4 and 12 have wavelengths of about 6.3, 63 and 6,300 tokens", close});
  // Points are posenc's table values; the curves through them are the same sines drawn
  // continuously by gnuplot from the frequencies posenc computed.
  std::string script = Format("w0 = %.17g; w4 = %.17g; w12 = %.17g\n", spec.Frequency(0),
                              spec.Frequency(8), spec.Frequency(24));
  script += R"(set title 'Sinusoidal waves, d = 32: PE(p, 2i) = sin(p w_i)'
set xlabel 'position p'
set ylabel 'PE(p, 2i)'
set xrange [0:23]
set yrange [-1.15:1.15]
set samples 500
set key outside right
plot sin(w0*x) with lines ls 1 lw 1.5 notitle, \
     sin(w4*x) with lines ls 2 lw 1.5 notitle, \
     sin(w12*x) with lines ls 3 lw 1.5 notitle, \
     $waves using 1:2 with points ls 1 pt 7 ps 0.9 title 'pair 0 (λ ≈ 6.3)', \
     $waves using 1:3 with points ls 2 pt 7 ps 0.9 title 'pair 4 (λ ≈ 63)', \
     $waves using 1:4 with points ls 3 pt 7 ps 0.9 title 'pair 12 (λ ≈ 6283)')";
  s.figures.push_back(
      {.file_stem = "sinusoidal_waves",
       .caption = "sin of pairs 0, 4 and 12 of a 32-wide model over positions 0..23",
       .data = {{"waves", rows}},
       .script = script});
  return s;
}

Section ShiftAsRotation() {
  Section s{.id = "f", .title = "A shift is a rotation"};
  const Sinusoidal spec{.dim = 32};
  const int64_t starts[] = {0, 7, 100, 1000, 123456};
  const int64_t shifts[] = {1, 5, 50};
  double worst = 0.0;
  for (int64_t i = 0; i < spec.dim / 2; ++i) {
    const double w = spec.Frequency(2 * i);
    for (int64_t k : shifts) {
      // The same 2x2 matrix for every p: (sin, cos) at p + k from (sin, cos) at p.
      const double c = std::cos(k * w), sn = std::sin(k * w);
      for (int64_t p : starts) {
        const double sp = SinusoidalValue(spec, p, 2 * i), cp = SinusoidalValue(spec, p, 2 * i + 1);
        worst = std::max(worst, std::fabs(sp * c + cp * sn - SinusoidalValue(spec, p + k, 2 * i)));
        worst =
            std::max(worst, std::fabs(cp * c - sp * sn - SinusoidalValue(spec, p + k, 2 * i + 1)));
      }
    }
  }
  s.lines.push_back(
      "For each pair i: [sin, cos](p + k) = [[cos kw, sin kw], [-sin kw, cos kw]] [sin, cos](p)");
  s.lines.push_back("Checked for all 16 pairs, k in {1, 5, 50}, p in {0, 7, 100, 1000, 123456}:");
  s.lines.push_back(Format("  largest deviation %.2g (double rounding)", worst));
  s.lines.push_back("The matrix depends on k only, so a linear layer can learn \"k tokens back\".");
  s.checks.push_back(
      {"PE(p + k) is PE(p) turned by k w_i for every pair, whatever p is", worst < 1e-9});
  s.numbers["max_deviation"] = worst;
  return s;
}

}  // namespace posenc::lesson
