// (i) Stretching a RoPE model past its training window: which pairs have seen a full turn, and
// what position interpolation and YaRN do to them. A learned table cannot stretch at all.
#include <cmath>
#include <numbers>

#include "lesson/section.h"
#include "posenc/error.h"
#include "posenc/learned.h"
#include "posenc/rope_scaling.h"

namespace posenc::lesson {

Section Stretching() {
  Section s{.id = "i", .title = "Stretching the context"};
  constexpr int64_t kHeadDim = 128, kTrained = 4096;
  constexpr double kBase = 10000.0, kFactor = 4.0;
  const auto plain = ComputeRopeFrequencies(kBase, kHeadDim, NoScaling{});
  const auto linear = ComputeRopeFrequencies(kBase, kHeadDim, LinearScaling{kFactor});
  const auto yarn = ComputeRopeFrequencies(
      kBase, kHeadDim, YarnScaling{.factor = kFactor, .original_max_positions = kTrained});

  auto wavelength = [](double inv_freq) { return 2.0 * std::numbers::pi / inv_freq; };
  int64_t full_turn = 0, kept = 0, interpolated = 0, blended = 0;
  std::string rows;
  for (size_t i = 0; i < plain.inv_freq.size(); ++i) {
    full_turn += wavelength(plain.inv_freq[i]) <= kTrained;
    const double ratio = plain.inv_freq[i] / yarn.inv_freq[i];
    if (ratio == 1.0)
      ++kept;
    else if (std::fabs(ratio - kFactor) < 1e-9)
      ++interpolated;
    else
      ++blended;
    rows += Format("%zu %.6g %.6g %.6g\n", i, wavelength(plain.inv_freq[i]),
                   wavelength(linear.inv_freq[i]), wavelength(yarn.inv_freq[i]));
  }
  const int64_t pairs = kHeadDim / 2;
  s.lines.push_back(Format("A RoPE model, head_dim %lld, base %.0f, trained on %lld positions:",
                           static_cast<long long>(kHeadDim), kBase,
                           static_cast<long long>(kTrained)));
  s.lines.push_back(
      Format("  pairs 0..%lld have wavelengths <= %lld: they turned full circles in "
             "training",
             static_cast<long long>(full_turn - 1), static_cast<long long>(kTrained)));
  s.lines.push_back(
      Format("  pairs %lld..%lld never completed a turn: angles past %lld are new to "
             "them",
             static_cast<long long>(full_turn), static_cast<long long>(pairs - 1),
             static_cast<long long>(kTrained)));
  s.lines.push_back(Format("To run at %.0fx (%lld positions):", kFactor,
                           static_cast<long long>(kFactor * kTrained)));
  s.lines.push_back("  position interpolation divides every frequency by 4: no unseen angles, but");
  s.lines.push_back("    neighbours are 4x closer in angle on the fast pairs too;");
  s.lines.push_back(
      Format("  YaRN keeps %lld fast pairs as they are, interpolates %lld slow pairs by 4,",
             static_cast<long long>(kept), static_cast<long long>(interpolated)));
  s.lines.push_back(
      Format("    blends %lld in between, and scales attention by %.4f (0.1 ln 4 + 1).",
             static_cast<long long>(blended), yarn.attention_factor));
  s.checks.push_back({"some pairs complete a full turn within the window and some never do",
                      full_turn > 0 && full_turn < pairs});
  s.checks.push_back({"PI stretches every wavelength by the factor",
                      std::fabs(linear.inv_freq[0] * kFactor - plain.inv_freq[0]) < 1e-15});
  s.checks.push_back(
      {"YaRN keeps the fast pairs and interpolates the slow ones", kept > 0 && interpolated > 0});

  std::string message;
  const auto table = LearnedPositions(kTrained, 8);
  std::vector<float> row(8);
  try {
    table.Lookup(std::vector<int64_t>{kTrained}, row);
  } catch (const Error& e) {
    message = e.what();
  }
  s.lines.push_back("A learned table of 4096 positions cannot stretch at all:");
  s.lines.push_back("  " + message);
  s.checks.push_back({"a learned table cannot stretch", !message.empty()});

  s.numbers = {{"head_dim", kHeadDim},
               {"trained_positions", kTrained},
               {"pairs_with_full_turn", full_turn},
               {"yarn",
                {{"kept", kept},
                 {"interpolated", interpolated},
                 {"blended", blended},
                 {"attention_factor", yarn.attention_factor}}}};
  s.figures.push_back({.file_stem = "rope_stretching",
                       .caption = "Wavelength per pair for a model trained on 4,096 positions: "
                                  "original, position interpolation (x4) and YaRN (x4)",
                       .data = {{"wavelengths", rows}},
                       .script = R"(set title 'Wavelength per RoPE pair (head dim 128, base 10000)'
set xlabel 'pair i'
set xrange [0:63]
set ylabel 'wavelength (positions)'
set logscale y
set format y '10^{%L}'
set key top left
set arrow from graph 0, first 4096 to graph 1, first 4096 nohead dt 2 lc rgb '#444444'
set label 'trained window 4096' at graph 0.70, first 2600 tc rgb '#444444'
set arrow from graph 0, first 16384 to graph 1, first 16384 nohead dt 3 lc rgb '#888888'
set label 'target 16384' at graph 0.70, first 26000 tc rgb '#888888'
plot $wavelengths using 1:2 with lines ls 1 title 'original', \
     $wavelengths using 1:3 with lines ls 2 title 'position interpolation', \
     $wavelengths using 1:4 with lines ls 3 dt 2 title 'YaRN')"});
  return s;
}

}  // namespace posenc::lesson
