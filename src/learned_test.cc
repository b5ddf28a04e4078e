#include "posenc/learned.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/npy.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::TempFile;

// A 4 x 3 table whose row r is {10r, 10r + 1, 10r + 2}.
LearnedPositions CountingTable() {
  LearnedPositions table(4, 3);
  for (int64_t i = 0; i < 12; ++i) table.table()[i] = static_cast<float>(10 * (i / 3) + i % 3);
  return table;
}

TEST(Learned, NewTableIsZero) {
  const LearnedPositions table(5, 2);
  EXPECT_EQ(table.max_positions(), 5);
  EXPECT_EQ(table.d_model(), 2);
  EXPECT_EQ(std::vector<float>(table.table().begin(), table.table().end()),
            std::vector<float>(10, 0.0f));
  EXPECT_EQ(std::vector<float>(table.grad().begin(), table.grad().end()),
            std::vector<float>(10, 0.0f));
}

TEST(Learned, LookupReturnsTheRowsOfThePositions) {
  const LearnedPositions table = CountingTable();
  const std::vector<int64_t> positions{2, 0, 2, 3};
  std::vector<float> out(4 * 3);
  table.Lookup(positions, out);
  EXPECT_EQ(out, (std::vector<float>{20, 21, 22, 0, 1, 2, 20, 21, 22, 30, 31, 32}));
  const auto row = table.Row(3);
  EXPECT_EQ(std::vector<float>(row.begin(), row.end()), (std::vector<float>{30, 31, 32}));
  EXPECT_EQ(row.data(), table.table().data() + 9);
}

TEST(Learned, PositionPastTheLastRowHasNoVector) {
  // GPT-2 has 1024 rows: the 1,025th token (position 1024) has no position vector.
  const LearnedPositions table(1024, 4);
  const std::vector<int64_t> positions{1023, 1024};
  std::vector<float> out(2 * 4, -7.0f);
  try {
    table.Lookup(positions, out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[learned.lookup] positions[1] must be < max_positions (1024), got 1024");
  }
  EXPECT_EQ(out, std::vector<float>(2 * 4, -7.0f));
  try {
    table.Row(1024);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[learned] pos must be < max_positions (1024), got 1024");
  }
  EXPECT_NO_THROW(table.Row(1023));
}

TEST(Learned, NegativePositionsAndWrongSizesAreRejected) {
  const LearnedPositions table = CountingTable();
  const std::vector<int64_t> negative{1, -1};
  std::vector<float> out(2 * 3, -7.0f);
  try {
    table.Lookup(negative, out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[learned.lookup] positions[1] must be >= 0, got -1");
  }
  EXPECT_THROW(table.Row(-1), Error);
  const std::vector<int64_t> three{0, 1, 2};
  try {
    table.Lookup(three, out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[learned.lookup] out.size() must equal tokens (3) * d_model (3), got 6");
  }
  EXPECT_EQ(out, std::vector<float>(2 * 3, -7.0f));
}

TEST(Learned, InvalidShapesAreRejected) {
  EXPECT_THROW(LearnedPositions(0, 4), Error);
  EXPECT_THROW(LearnedPositions(4, 0), Error);
  EXPECT_THROW(LearnedPositions(-1, 4), Error);
  EXPECT_THROW(LearnedPositions(4, -8), Error);
  // Would wrap max_positions * d_model around int64 instead of failing to allocate.
  EXPECT_THROW(LearnedPositions(int64_t{1} << 40, int64_t{1} << 40), Error);
  try {
    LearnedPositions(0, 4);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[learned] max_positions must be > 0, got 0");
  }
}

TEST(Learned, RandomIsSeededNormalInRowMajorOrder) {
  const auto table = LearnedPositions::Random(256, 64, 42, 0.02);
  // The specification, re-stated: mt19937_64(seed) feeding N(0, stddev^2) in double, row-major.
  std::mt19937_64 engine(42);
  std::normal_distribution<double> normal(0.0, 0.02);
  for (int64_t i = 0; i < 256 * 64; ++i) {
    ASSERT_EQ(table.table()[i], static_cast<float>(normal(engine))) << "element " << i;
  }
  const auto again = LearnedPositions::Random(256, 64, 42, 0.02);
  EXPECT_TRUE(std::equal(table.table().begin(), table.table().end(), again.table().begin()));
  const auto other = LearnedPositions::Random(256, 64, 43, 0.02);
  EXPECT_FALSE(std::equal(table.table().begin(), table.table().end(), other.table().begin()));
}

TEST(Learned, RandomHasTheRequestedSpread) {
  // 65536 samples: the sample mean's standard error is 0.02 / 256 = 7.8e-5 and the sample
  // standard deviation's about 0.02 / sqrt(2 * 65536) = 5.5e-5, so these bounds are > 6 sigma.
  for (double stddev : {0.02, 1.5}) {
    const auto table = LearnedPositions::Random(1024, 64, 7, stddev);
    double sum = 0.0, sum_sq = 0.0;
    for (float v : table.table()) {
      sum += v;
      sum_sq += double{v} * v;
    }
    const double n = static_cast<double>(table.table().size());
    const double mean = sum / n;
    const double sample_std = std::sqrt((sum_sq - n * mean * mean) / (n - 1));
    EXPECT_NEAR(mean, 0.0, 0.025 * stddev) << "stddev " << stddev;
    EXPECT_NEAR(sample_std, stddev, 0.02 * stddev) << "stddev " << stddev;
  }
  const auto by_default = LearnedPositions::Random(16, 8, 1);
  const auto explicit_gpt2 = LearnedPositions::Random(16, 8, 1, 0.02);
  EXPECT_TRUE(std::equal(by_default.table().begin(), by_default.table().end(),
                         explicit_gpt2.table().begin()));
  EXPECT_THROW(LearnedPositions::Random(4, 4, 1, 0.0), Error);
  EXPECT_THROW(LearnedPositions::Random(4, 4, 1, -0.02), Error);
  EXPECT_THROW(LearnedPositions::Random(4, 4, 1, std::nan("")), Error);
}

TEST(Learned, GradientOfRepeatedPositionsIsSummed) {
  LearnedPositions table(4, 2);
  const std::vector<int64_t> positions{1, 3, 1};
  const std::vector<float> grad_out{1.0f, 2.0f, 10.0f, 20.0f, 0.5f, -4.0f};
  table.AccumulateGradient(positions, grad_out);
  const std::vector<float> once{0, 0, 1.5f, -2.0f, 0, 0, 10.0f, 20.0f};
  EXPECT_EQ(std::vector<float>(table.grad().begin(), table.grad().end()), once);
  // A second backward adds to what is there, as gradient accumulation over micro-batches does.
  table.AccumulateGradient(positions, grad_out);
  const std::vector<float> twice{0, 0, 3.0f, -4.0f, 0, 0, 20.0f, 40.0f};
  EXPECT_EQ(std::vector<float>(table.grad().begin(), table.grad().end()), twice);
  table.ZeroGradient();
  EXPECT_EQ(std::vector<float>(table.grad().begin(), table.grad().end()),
            std::vector<float>(8, 0.0f));
}

TEST(Learned, GradientMatchesFiniteDifferences) {
  // L = sum_t w_t . lookup(p_t); dL/dtable[r, c] is estimated by central differences and
  // compared with the backward pass.
  constexpr int64_t kRows = 8, kWidth = 5;
  auto table = LearnedPositions::Random(kRows, kWidth, 3, 1.0);
  const std::vector<int64_t> positions{0, 3, 3, 7, 1, 3};
  std::mt19937_64 engine(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<float> w(positions.size() * kWidth);
  for (float& v : w) v = static_cast<float>(uniform(engine));

  auto loss = [&]() {
    std::vector<float> x(positions.size() * kWidth);
    table.Lookup(positions, x);
    double sum = 0.0;
    for (size_t i = 0; i < x.size(); ++i) sum += double{w[i]} * x[i];
    return sum;
  };
  table.AccumulateGradient(positions, w);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    const float original = table.table()[i];
    const float up = original + 0.01f, down = original - 0.01f;
    table.table()[i] = up;
    const double loss_up = loss();
    table.table()[i] = down;
    const double loss_down = loss();
    table.table()[i] = original;
    const double numeric = (loss_up - loss_down) / (double{up} - double{down});
    EXPECT_NEAR(table.grad()[i], numeric, 1e-4) << "row " << i / kWidth << " column " << i % kWidth;
  }
  // Rows no token reads get no gradient; row 3, read three times, gets the sum.
  EXPECT_EQ(table.grad()[2 * kWidth], 0.0f);
  EXPECT_NEAR(table.grad()[3 * kWidth], double{w[1 * kWidth]} + w[2 * kWidth] + w[5 * kWidth],
              1e-6);
}

TEST(Learned, BadGradientLeavesGradUntouched) {
  LearnedPositions table(4, 2);
  const std::vector<int64_t> first{0};
  const std::vector<float> g{1.0f, 2.0f};
  table.AccumulateGradient(first, g);
  const std::vector<float> before(table.grad().begin(), table.grad().end());

  const std::vector<int64_t> bad_last{1, 2, 4};
  const std::vector<float> grad_out(3 * 2, 1.0f);
  try {
    table.AccumulateGradient(bad_last, grad_out);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[learned.accumulate_gradient] positions[2] must be < max_positions (4), got 4");
  }
  const std::vector<int64_t> good{1, 2};
  EXPECT_THROW(table.AccumulateGradient(good, grad_out), Error);  // 6 values for 2 tokens
  EXPECT_EQ(std::vector<float>(table.grad().begin(), table.grad().end()), before);
}

TEST(Learned, FreeFunctionsWorkOnACallerOwnedTable) {
  // The counting table again, held in the caller's own buffer: row r is {10r, 10r + 1, 10r + 2}.
  std::vector<float> table(12);
  for (int64_t i = 0; i < 12; ++i) table[i] = static_cast<float>(10 * (i / 3) + i % 3);
  const int64_t positions[] = {3, 0, 3};
  std::vector<float> out(9);
  LookupLearnedRows(table, 3, positions, out);
  EXPECT_EQ(out, (std::vector<float>{30, 31, 32, 0, 1, 2, 30, 31, 32}));

  std::vector<float> grad(12, 0.0f);
  const std::vector<float> grad_out = {1, 2, 3, 4, 5, 6, 0.5f, 0.25f, 0.125f};
  AccumulateLearnedGradient(grad, 3, positions, grad_out);
  EXPECT_EQ(grad, (std::vector<float>{4, 5, 6, 0, 0, 0, 0, 0, 0, 1.5f, 2.25f, 3.125f}));
}

TEST(Learned, FreeFunctionsRejectBadTablesBeforeWriting) {
  std::vector<float> table(12, 1.0f), out(3, -1.0f);
  const int64_t past_end[] = {4};
  ExpectError([&] { LookupLearnedRows(table, 3, past_end, out); },
              "[learned.lookup] positions[0] must be < max_positions (4), got 4");
  ExpectError([&] { LookupLearnedRows(table, 5, past_end, out); },
              "[learned.lookup] table.size() must be a positive multiple of d_model (5), got 12");
  ExpectError([&] { LookupLearnedRows(table, 0, past_end, out); },
              "[learned.lookup] d_model must be > 0, got 0");
  EXPECT_EQ(out, std::vector<float>(3, -1.0f));
  const int64_t ok[] = {1};
  const std::vector<float> short_grad(2, 1.0f);
  ExpectError([&] { AccumulateLearnedGradient(table, 3, ok, short_grad); },
              "[learned.accumulate_gradient] grad_out.size() must equal tokens (1) * d_model "
              "(3), got 2");
  EXPECT_EQ(table, std::vector<float>(12, 1.0f));
}

TEST(Learned, SaveThenLoadRoundTrips) {
  const auto table = LearnedPositions::Random(37, 11, 5, 0.5);
  const TempFile file("table.npy");
  const std::string& path = file.path();
  table.Save(path);
  const auto loaded = LearnedPositions::Load(path);
  EXPECT_EQ(loaded.max_positions(), 37);
  EXPECT_EQ(loaded.d_model(), 11);
  EXPECT_TRUE(std::equal(table.table().begin(), table.table().end(), loaded.table().begin()));
  EXPECT_EQ(loaded.table().size(), table.table().size());
  EXPECT_EQ(loaded.grad().size(), loaded.table().size());
  // The file is a [37, 11] float32 array.
  const NpyArray array = ReadNpy(path);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{37, 11}));
}

TEST(Learned, LoadRejectsArraysThatAreNotTables) {
  const TempFile file("bad.npy");
  const std::string& path = file.path();
  const std::vector<float> data(6, 1.0f);
  const std::vector<int64_t> flat{6};
  WriteNpy(path, data, flat);
  try {
    LearnedPositions::Load(path);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[learned.load] " + path + ": shape must be 2-D [max_positions, d_model], got (6,)");
  }
  const std::vector<int64_t> cube{1, 2, 3};
  WriteNpy(path, data, cube);
  EXPECT_THROW(LearnedPositions::Load(path), Error);
  const std::vector<int64_t> empty_rows{0, 4};
  WriteNpy(path, std::span<const float>(), empty_rows);
  try {
    LearnedPositions::Load(path);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[learned.load] " + path +
                                         ": shape must have max_positions > 0 and d_model > 0, "
                                         "got (0, 4)");
  }
  std::filesystem::remove(path);
  EXPECT_THROW(LearnedPositions::Load(path), Error);  // missing file
}

}  // namespace
}  // namespace posenc
