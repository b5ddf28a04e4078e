// Sinusoidal positions (Vaswani et al. 2017, "Attention Is All You Need", section 3.5):
//
//   PE(p, 2i)     = sin(p / base^(2i / d))
//   PE(p, 2i + 1) = cos(p / base^(2i / d))        base = 10000
//
// Column j uses frequency index i = floor(j / 2): even columns hold sin, odd columns cos, so each
// (sin, cos) pair is a point on a circle turning at its own rate, and PE(p + k) is PE(p) with every
// pair turned by k * base^(-2i / d). For odd d the last column d - 1 is a lone sin of frequency
// index (d - 1) / 2 (exponent (d - 1) / d); it has no cos partner. This is the formula read
// literally (even column: sin, odd column: cos) for every column, whatever the parity of d.
//
// Precision: the angle pos * Frequency(j) and its sin/cos are computed in double (the fast path
// splits the angle by the addition identity, still in double) and only the result is rounded to
// float, so values are float-accurate at positions in the millions (a float32
// angle near 10^6 is a multiple of 1/16 rad, so its sin would be off in the second digit).
#pragma once

#include <cstdint>
#include <span>

namespace posenc {

struct Sinusoidal {
  int64_t dim = 0;        // d: width of each position vector, > 0
  double base = 10000.0;  // finite, > 1

  // Throws posenc::Error naming the field, value and rule.
  void Validate() const;

  // Angular frequency of column j: base^(-2 floor(j/2) / d) radians per position. Validates the
  // spec and 0 <= column < dim.
  double Frequency(int64_t column) const;
  // Wavelength of column j in positions: 2 pi / Frequency(j). Same checks as Frequency.
  double Wavelength(int64_t column) const;
};

// PE(pos, column) in double; pos >= 0, 0 <= column < dim.
double SinusoidalValue(const Sinusoidal& spec, int64_t pos, int64_t column);

// Writes out[t * dim + j] = PE(positions[t], j): a row-major [positions.size(), dim] table.
// Positions must be >= 0 and out.size() must be positions.size() * dim; out is untouched on error.
void FillSinusoidal(const Sinusoidal& spec, std::span<const int64_t> positions,
                    std::span<float> out);

// The scalar reference twin of FillSinusoidal: one double sine or cosine per value, rounded to
// float. The fast kernel (SIMD, threads, angle addition in double) is tested against it. Assumes
// validated input (no checks).
void FillSinusoidalReference(const Sinusoidal& spec, std::span<const int64_t> positions,
                             std::span<float> out);

// The table for positions 0 .. tokens - 1: out is [tokens, dim].
void FillSinusoidalTable(const Sinusoidal& spec, int64_t tokens, std::span<float> out);

}  // namespace posenc
