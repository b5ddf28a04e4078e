// The SIMD sinusoidal fill (behind FillSinusoidal) against its scalar twin
// FillSinusoidalReference, on every compiled SIMD target.
#include "sinusoidal_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "posenc/positions.h"
#include "posenc/sinusoidal.h"
#include "simd/simd_targets_for_test.h"

namespace posenc {
namespace {

using testing_support::ForEachSimdTarget;

// Both round a value within ~1e-15 of exact to float32, so they differ by at most one float32
// ulp (2^-24 relative, and the ulp of a value just below a power of two); the twin's double
// angle is itself off by up to half an ulp of pos * freq (2^-30 rad at 2^24), which bounds the
// absolute part.
double Bound(float want, int64_t max_pos) {
  const double angle_error = std::ldexp(static_cast<double>(std::max<int64_t>(max_pos, 1)), -53);
  return std::ldexp(std::abs(static_cast<double>(want)), -23) + angle_error + 1e-30;
}

void ExpectMatchesTwin(const Sinusoidal& spec, const std::vector<int64_t>& positions) {
  const size_t size = positions.size() * static_cast<size_t>(spec.dim);
  // One extra element past the end, which must stay untouched.
  std::vector<float> got(size + 1, -7.0f), want(size + 1, -7.0f);
  FillSinusoidal(spec, positions, std::span<float>(got.data(), size));
  FillSinusoidalReference(spec, positions, std::span<float>(want.data(), size));
  int64_t max_pos = 0;
  for (int64_t p : positions) max_pos = std::max(max_pos, p);
  for (size_t e = 0; e < size; ++e) {
    ASSERT_NEAR(got[e], want[e], Bound(want[e], max_pos))
        << "dim " << spec.dim << " position " << positions[e / spec.dim] << " column "
        << e % spec.dim;
  }
  EXPECT_EQ(got[size], -7.0f);
}

TEST(SinusoidalKernel, MatchesTheTwinForEveryWidthOnEveryTarget) {
  ForEachSimdTarget([](int64_t) {
    // Widths 1 .. 2 * 8 + 1 doubles (AVX-512) cover every tail; 300 rows take the blocked path.
    for (int64_t dim = 1; dim <= 17; ++dim) {
      ExpectMatchesTwin(Sinusoidal{.dim = dim}, PositionRange(0, 5));
      ExpectMatchesTwin(Sinusoidal{.dim = dim, .base = 500.0}, PositionRange(1000, 300));
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

TEST(SinusoidalKernel, ArbitraryPositionsUpTo2To24OnEveryTarget) {
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<int64_t> pos_dist(0, int64_t{1} << 24);
  std::vector<int64_t> positions(700);
  for (auto& p : positions) p = pos_dist(gen);
  positions[0] = int64_t{1} << 24;
  positions[1] = 0;
  ForEachSimdTarget([&](int64_t) {
    ExpectMatchesTwin(Sinusoidal{.dim = 64}, positions);
    ExpectMatchesTwin(Sinusoidal{.dim = 33}, positions);
  });
}

TEST(SinusoidalKernel, LargeTableOnTheThreadedPath) {
  ExpectMatchesTwin(Sinusoidal{.dim = 1024}, PositionRange(0, 600));
}

}  // namespace
}  // namespace posenc
