#include "posenc/sinusoidal.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/positions.h"
#include "sinusoidal_kernels.h"

namespace posenc {
namespace {

constexpr const char* kFunction = "sinusoidal";

// base^(-2 floor(j/2) / d) for a validated spec and column, in double: section 3.5 of Vaswani et
// al. writes the angle as pos / 10000^(2i / d), i = floor(j / 2).
double ColumnFrequency(const Sinusoidal& spec, int64_t column) {
  const double exponent = -static_cast<double>(2 * (column / 2)) / static_cast<double>(spec.dim);
  return std::pow(spec.base, exponent);
}

// The one place a value is formed: the angle in double, sin for even columns, cos for odd ones.
double ColumnValue(int64_t pos, int64_t column, double frequency) {
  const double angle = static_cast<double>(pos) * frequency;
  return column % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

void CheckColumn(const Sinusoidal& spec, int64_t column) {
  Require(column >= 0 && column < spec.dim, kFunction, "column",
          "be in [0, dim) = [0, " + std::to_string(spec.dim) + ")", column);
}

// out must hold [tokens, dim]; compared by division so that a huge dim cannot wrap the product
// around to out.size().
void CheckOutSize(const Sinusoidal& spec, size_t tokens, std::span<float> out) {
  const auto dim = static_cast<size_t>(spec.dim);
  Require(out.size() % dim == 0 && out.size() / dim == tokens, kFunction, "out.size()",
          "equal tokens (" + std::to_string(tokens) + ") * dim (" + std::to_string(dim) + ")",
          out.size());
}

}  // namespace

void Sinusoidal::Validate() const {
  Require(dim > 0, kFunction, "dim", "be > 0", dim);
  Require(std::isfinite(base) && base > 1.0, kFunction, "base", "be finite and > 1", base);
}

double Sinusoidal::Frequency(int64_t column) const {
  Validate();
  CheckColumn(*this, column);
  return ColumnFrequency(*this, column);
}

double Sinusoidal::Wavelength(int64_t column) const {
  return 2.0 * std::numbers::pi / Frequency(column);
}

double SinusoidalValue(const Sinusoidal& spec, int64_t pos, int64_t column) {
  spec.Validate();
  ValidatePosition(kFunction, "pos", pos);
  CheckColumn(spec, column);
  return ColumnValue(pos, column, ColumnFrequency(spec, column));
}

void FillSinusoidal(const Sinusoidal& spec, std::span<const int64_t> positions,
                    std::span<float> out) {
  spec.Validate();
  ValidatePositions(kFunction, positions, static_cast<int64_t>(positions.size()));
  CheckOutSize(spec, positions.size(), out);

  if (positions.empty()) return;
  std::vector<double> frequencies(static_cast<size_t>(spec.dim));
  for (int64_t j = 0; j < spec.dim; ++j) frequencies[j] = ColumnFrequency(spec, j);
  internal::SinusoidalKernel(frequencies.data(), spec.dim, positions.data(),
                             static_cast<int64_t>(positions.size()), out.data());
}

void FillSinusoidalReference(const Sinusoidal& spec, std::span<const int64_t> positions,
                             std::span<float> out) {
  const auto dim = static_cast<size_t>(spec.dim);
  std::vector<double> frequencies(dim);
  for (size_t j = 0; j < dim; ++j) frequencies[j] = ColumnFrequency(spec, j);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (size_t j = 0; j < dim; ++j) {
      out[t * dim + j] = static_cast<float>(ColumnValue(positions[t], j, frequencies[j]));
    }
  }
}

void FillSinusoidalTable(const Sinusoidal& spec, int64_t tokens, std::span<float> out) {
  spec.Validate();
  Require(tokens >= 0, kFunction, "tokens", "be >= 0", tokens);
  CheckOutSize(spec, static_cast<size_t>(tokens), out);
  const std::vector<int64_t> positions = PositionRange(0, tokens);
  FillSinusoidal(spec, positions, out);
}

}  // namespace posenc
