// One experiment of the lesson: what it claims, what we measured, and the figures that show it.
// Each experiment file (order_blindness.cc, ...) builds Sections; report.cc turns them into the
// text report, the JSON object and report.html.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plot/plot.h"

namespace posenc::lesson {

// The lesson draws with the figures that the study and `posenc inspect` draw with too.
using plot::DataBlock;
using plot::Figure;
using plot::GnuplotString;
using plot::Render;

// A claim of the lesson and whether our numbers reproduce it.
struct Check {
  std::string claim;
  bool holds = false;
};

struct Section {
  std::string id;  // "a", "b", ... as in the lesson
  std::string title;
  std::vector<std::string> lines;  // the readable report, one line each
  std::vector<Check> checks;
  nlohmann::json numbers = nlohmann::json::object();  // the same numbers for --json
  std::vector<Figure> figures;
};

// Each experiment; all are deterministic (fixed seeds).
Section OrderBlindness();     // a
Section SeatNumbers();        // b
Section LearnedTableLimit();  // c
Section SinusoidalTable();    // d
Section SinusoidalWaves();    // e
Section ShiftAsRotation();    // f
Section RotaryEmbedding();    // g
Section AlibiBiases();        // h
Section Stretching();         // i
Section MethodsSideBySide();  // j
Section MultimodalRope();     // k

// Helpers shared by the experiments.

// rows x cols standard normal values from a fixed seed, row-major.
std::vector<float> RandomNormal(int64_t rows, int64_t cols, uint64_t seed);

// "[0.4, 0.5]" with `digits` significant digits.
std::string FormatVector(std::span<const double> values, int digits = 3);
std::string FormatVector(std::span<const float> values, int digits = 3);

// printf-style formatting into a std::string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace posenc::lesson
