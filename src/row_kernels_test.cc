// The row kernels (behind EmbedTokens and LearnedPositions) against their scalar twins on every
// compiled SIMD target. Float additions in the same order round the same way, so the tolerance
// for these kernels is zero: results must be bit-identical.
#include "row_kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ForEachSimdTarget;
using testing_support::RandomNormal;

// Widths 1 .. 2 * 16 + 1 floats cover no full AVX-512 vector, one, two and every tail.
constexpr int64_t kMaxWidth = 33;

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows drawn with repeats (a row used by several tokens), from a table of `rows` rows.
std::vector<int64_t> RandomRows(int64_t tokens, int64_t rows, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, rows - 1);
  std::vector<int64_t> r(tokens);
  for (auto& x : r) x = dist(gen);
  return r;
}

TEST(RowKernels, GatherAddMatchesTheTwinOnEveryTarget) {
  ForEachSimdTarget([](int64_t) {
    for (int64_t width = 1; width <= kMaxWidth; ++width) {
      for (const bool with_b : {false, true}) {
        const int64_t tokens = 1 + width % 7, rows = 5;
        // One float of padding in front misaligns every table and the output.
        const std::vector<float> a = RandomNormal(rows * width + 1, width),
                                 b = RandomNormal(rows * width + 1, 99);
        const std::vector<int64_t> a_rows = RandomRows(tokens, rows, 1),
                                   b_rows = RandomRows(tokens, rows, 2);
        std::vector<float> got = RandomNormal(tokens * width + 2, 5), want = got;
        internal::GatherAdd(a.data() + 1, a_rows.data(), with_b ? b.data() + 1 : nullptr,
                            b_rows.data(), tokens, width, got.data() + 1);
        internal::GatherAddReference(a.data() + 1, a_rows.data(), with_b ? b.data() + 1 : nullptr,
                                     b_rows.data(), tokens, width, want.data() + 1);
        ASSERT_TRUE(BitEqual(got, want)) << "width " << width << " with_b " << with_b;
      }
    }
  });
}

TEST(RowKernels, ScatterAddAccumulatesRepeatedRowsLikeTheTwinOnEveryTarget) {
  ForEachSimdTarget([](int64_t) {
    for (int64_t width = 1; width <= kMaxWidth; ++width) {
      const int64_t tokens = 3 + width % 5, rows = 3;
      const std::vector<float> grad_out = RandomNormal(tokens * width + 1, width);
      const std::vector<int64_t> r = RandomRows(tokens, rows, 3);
      std::vector<float> got = RandomNormal(rows * width + 2, 8), want = got;
      internal::ScatterAdd(grad_out.data() + 1, r.data(), tokens, width, got.data() + 1);
      internal::ScatterAddReference(grad_out.data() + 1, r.data(), tokens, width, want.data() + 1);
      ASSERT_TRUE(BitEqual(got, want)) << "width " << width;
    }
  });
}

TEST(RowKernels, LargeCallsOnTheThreadedPathMatchTheTwins) {
  const int64_t tokens = 700, width = 301, rows = 50;
  const std::vector<float> a = RandomNormal(rows * width, 1), b = RandomNormal(rows * width, 2);
  const std::vector<int64_t> a_rows = RandomRows(tokens, rows, 3),
                             b_rows = RandomRows(tokens, rows, 4);
  std::vector<float> got(tokens * width), want(tokens * width);
  internal::GatherAdd(a.data(), a_rows.data(), b.data(), b_rows.data(), tokens, width, got.data());
  internal::GatherAddReference(a.data(), a_rows.data(), b.data(), b_rows.data(), tokens, width,
                               want.data());
  EXPECT_TRUE(BitEqual(got, want));

  std::vector<float> copy(tokens * width);
  internal::GatherRows(a.data(), a_rows.data(), tokens, width, copy.data());
  for (int64_t t = 0; t < tokens; ++t) {
    ASSERT_EQ(
        std::memcmp(copy.data() + t * width, a.data() + a_rows[t] * width, width * sizeof(float)),
        0)
        << t;
  }

  std::vector<float> grad_got = RandomNormal(rows * width, 9), grad_want = grad_got;
  internal::ScatterAdd(got.data(), a_rows.data(), tokens, width, grad_got.data());
  internal::ScatterAddReference(got.data(), a_rows.data(), tokens, width, grad_want.data());
  EXPECT_TRUE(BitEqual(grad_got, grad_want));
}

}  // namespace
}  // namespace posenc
