// (h) ALiBi: no position vectors at all, a per-head linear penalty on scores.
#include <cmath>

#include "lesson/section.h"
#include "posenc/alibi.h"

namespace posenc::lesson {

Section AlibiBiases() {
  Section s{.id = "h", .title = "ALiBi: a linear distance penalty per head"};
  const Alibi alibi{.num_heads = 8};
  const auto slopes = AlibiSlopes(alibi);
  std::string listed;
  bool paper = true;
  for (size_t h = 0; h < slopes.size(); ++h) {
    listed += Format("%s1/%.0f", h ? ", " : "", 1.0 / slopes[h]);
    paper &= slopes[h] == std::ldexp(1.0, -static_cast<int>(h + 1));
  }
  s.lines.push_back("slopes for 8 heads: " + listed);
  s.lines.push_back("bias(i, j) = -slope * (i - j): head 0 looks mostly at recent keys,");
  s.lines.push_back("head 7 (slope 1/256) sees far back almost unpenalised.");
  s.checks.push_back({"the slopes for 8 heads are 1/2, 1/4, ..., 1/256", paper});
  s.numbers["slopes"] = slopes;

  constexpr int kTokens = 12;
  Figure figure{
      .file_stem = "alibi_bias",
      .caption =
          "Each head's causal ALiBi bias for 12 tokens (query down, key across; darker is a larger "
          "penalty, from 0 on the diagonal to -5.5; grey keys are masked)",
      .width = 1000,
      .height = 520};
  figure.script =
      "set multiplot layout 2,4 title 'ALiBi bias per head (causal: future keys masked)'\n"
      "set xrange [-0.5:11.5]\nset yrange [11.5:-0.5]\nset grid noxtics noytics\n"
      "set cbrange [-6:0]\nset palette defined (0 '#08306b', 0.5 '#6baed6', 1 '#f7fbff')\n"
      "set datafile missing 'NaN'\nset xtics 0,4,11\nset ytics 0,4,11\nunset colorbox\n";
  for (size_t h = 0; h < slopes.size(); ++h) {
    std::string matrix;
    for (int i = 0; i < kTokens; ++i) {
      for (int j = 0; j < kTokens; ++j) {
        matrix += j <= i ? Format("%.5f ", AlibiBias(slopes[h], i, j)) : std::string("NaN ");
      }
      matrix += '\n';
    }
    figure.data.push_back({Format("h%zu", h), matrix});
    figure.script += Format(
        "set title 'head %zu, slope 1/%.0f'\n"
        "set object 1 rectangle from graph 0,0 to graph 1,1 behind "
        "fc rgb '#d9d9d9' fillstyle solid noborder\nplot $h%zu matrix with image pixels notitle\n",
        h, 1.0 / slopes[h], h);
  }
  figure.script += "unset multiplot";
  s.figures.push_back(figure);
  return s;
}

}  // namespace posenc::lesson
