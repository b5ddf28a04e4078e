#include "posenc/learned.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "posenc/error.h"
#include "posenc/npy.h"
#include "row_kernels.h"

namespace posenc {
namespace {

// A learned table has exactly max_positions rows; the position past the last one (1024 in
// GPT-2's 1024-row table) has no vector, so it is refused rather than wrapped or clamped.
// `index` names the token, positions[index]; a negative index names the lone argument pos.
void CheckPosition(std::string_view function, int64_t index, int64_t pos, int64_t max_positions) {
  if (pos >= 0 && pos < max_positions) return;  // the message is built only for a bad position
  const std::string name = index < 0 ? "pos" : "positions[" + std::to_string(index) + "]";
  Require(pos >= 0, function, name, "be >= 0", pos);
  Require(pos < max_positions, function, name,
          "be < max_positions (" + std::to_string(max_positions) + ")", pos);
}

void CheckAllPositions(std::string_view function, std::span<const int64_t> positions,
                       int64_t max_positions) {
  for (size_t t = 0; t < positions.size(); ++t) {
    CheckPosition(function, static_cast<int64_t>(t), positions[t], max_positions);
  }
}

// A span of [rows, width] floats; compared by division so that no product can wrap around.
void CheckRows(std::string_view function, std::string_view name, size_t size, size_t rows,
               int64_t width) {
  const auto w = static_cast<size_t>(width);
  Require(size % w == 0 && size / w == rows, function, name,
          "equal tokens (" + std::to_string(rows) + ") * d_model (" + std::to_string(w) + ")",
          size);
}

// The rows of a caller-owned [max_positions, d_model] table: d_model > 0 and divides its size.
int64_t TableRows(std::string_view function, std::string_view name, size_t size, int64_t d_model) {
  Require(d_model > 0, function, "d_model", "be > 0", d_model);
  Require(size > 0 && size % static_cast<size_t>(d_model) == 0, function, name,
          "be a positive multiple of d_model (" + std::to_string(d_model) + ")", size);
  return static_cast<int64_t>(size / static_cast<size_t>(d_model));
}

}  // namespace

LearnedPositions::LearnedPositions(int64_t max_positions, int64_t d_model)
    : max_positions_(max_positions), d_model_(d_model) {
  Require(max_positions > 0, "learned", "max_positions", "be > 0", max_positions);
  Require(d_model > 0, "learned", "d_model", "be > 0", d_model);
  constexpr auto kMaxElements =
      static_cast<int64_t>(std::numeric_limits<std::ptrdiff_t>::max() / sizeof(float));
  Require(max_positions <= kMaxElements / d_model, "learned", "max_positions",
          "be <= " + std::to_string(kMaxElements / d_model) + " so that the table is addressable",
          max_positions);
  table_.assign(static_cast<size_t>(max_positions * d_model), 0.0f);
  grad_.assign(table_.size(), 0.0f);
}

LearnedPositions LearnedPositions::Random(int64_t max_positions, int64_t d_model, uint64_t seed,
                                          double stddev) {
  Require(std::isfinite(stddev) && stddev > 0.0, "learned.random", "stddev", "be finite and > 0",
          stddev);
  LearnedPositions positions(max_positions, d_model);
  // GPT-2 initialises wpe with N(0, 0.02^2) (Hugging Face GPT2PreTrainedModel._init_weights).
  // mt19937_64 and normal_distribution<double> in row-major order make the table a function of
  // the seed alone (for one standard library: the distribution's algorithm is unspecified).
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal(0.0, stddev);
  for (float& value : positions.table_) value = static_cast<float>(normal(engine));
  return positions;
}

LearnedPositions LearnedPositions::Load(const std::string& path) {
  NpyArray array = ReadNpy(path);
  const std::string where = path + ": shape";
  Require(array.shape.size() == 2, "learned.load", where, "be 2-D [max_positions, d_model]",
          NpyShapeString(array.shape));
  Require(array.shape[0] > 0 && array.shape[1] > 0, "learned.load", where,
          "have max_positions > 0 and d_model > 0", NpyShapeString(array.shape));
  LearnedPositions positions(array.shape[0], array.shape[1]);
  positions.table_ = std::move(array.data);
  return positions;
}

void LearnedPositions::Save(const std::string& path) const {
  const int64_t shape[] = {max_positions_, d_model_};
  WriteNpy(path, table_, shape);
}

std::span<const float> LearnedPositions::Row(int64_t pos) const {
  CheckPosition("learned", -1, pos, max_positions_);
  return std::span<const float>(table_).subspan(static_cast<size_t>(pos * d_model_),
                                                static_cast<size_t>(d_model_));
}

void LearnedPositions::CheckPositions(std::string_view function,
                                      std::span<const int64_t> positions) const {
  CheckAllPositions(function, positions, max_positions_);
}

void LearnedPositions::Lookup(std::span<const int64_t> positions, std::span<float> out) const {
  LookupLearnedRows(table_, d_model_, positions, out);
}

void LearnedPositions::AccumulateGradient(std::span<const int64_t> positions,
                                          std::span<const float> grad_out) {
  AccumulateLearnedGradient(grad_, d_model_, positions, grad_out);
}

void LearnedPositions::ZeroGradient() { std::ranges::fill(grad_, 0.0f); }

void LookupLearnedRows(std::span<const float> table, int64_t d_model,
                       std::span<const int64_t> positions, std::span<float> out) {
  const int64_t rows = TableRows("learned.lookup", "table.size()", table.size(), d_model);
  CheckAllPositions("learned.lookup", positions, rows);
  CheckRows("learned.lookup", "out.size()", out.size(), positions.size(), d_model);
  internal::GatherRows(table.data(), positions.data(), static_cast<int64_t>(positions.size()),
                       d_model, out.data());
}

void AccumulateLearnedGradient(std::span<float> grad, int64_t d_model,
                               std::span<const int64_t> positions,
                               std::span<const float> grad_out) {
  constexpr std::string_view kFunction = "learned.accumulate_gradient";
  const int64_t rows = TableRows(kFunction, "grad.size()", grad.size(), d_model);
  CheckAllPositions(kFunction, positions, rows);
  CheckRows(kFunction, "grad_out.size()", grad_out.size(), positions.size(), d_model);
  // The transpose of the lookup: a row read by several tokens receives the sum of their
  // gradients, in token order, as torch.nn.Embedding's backward does.
  internal::ScatterAdd(grad_out.data(), positions.data(), static_cast<int64_t>(positions.size()),
                       d_model, grad.data());
}

}  // namespace posenc
