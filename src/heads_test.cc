#include "posenc/heads.h"

#include <gtest/gtest.h>

#include <vector>

#include "posenc/positions.h"
#include "rows.h"

namespace posenc {
namespace {

TEST(Heads, DenseViewAddressesRowMajor) {
  std::vector<float> buffer(2 * 3 * 4);
  auto view = Heads<float>::Dense(buffer.data(), 2, 3, 4);
  EXPECT_EQ(view.Row(1, 2), buffer.data() + 1 * 12 + 2 * 4);
  EXPECT_EQ(view.Extent(), 24);
  EXPECT_NO_THROW(view.Validate("test", "x"));
}

TEST(Heads, HeadsOuterLayoutIsValid) {
  // Hugging Face's [heads, seq, dim]: head_stride = tokens * dim, token_stride = dim.
  std::vector<float> buffer(3 * 5 * 8);
  Heads<float> view{buffer.data(), 5, 3, 8, 8, 40};
  EXPECT_NO_THROW(view.Validate("test", "x"));
}

TEST(Heads, OverlappingRowsAreRejectedWithAClearMessage) {
  std::vector<float> buffer(64);
  Heads<float> view{buffer.data(), 2, 2, 8, 16, 4};
  try {
    view.Validate("rope", "q");
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[rope] q.head_stride must be >= head_dim (8) so that rows do not overlap, got 4");
  }
  Heads<float> tokens_overlap{buffer.data(), 2, 2, 8, 12, 8};
  EXPECT_THROW(tokens_overlap.Validate("rope", "q"), Error);
}

TEST(Heads, NegativeSizesAreRejectedAndEmptyViewsAccepted) {
  std::vector<float> buffer(8);
  EXPECT_NO_THROW((Heads<float>{buffer.data(), 0, 1, 8, 8, 8}.Validate("f", "x")));
  EXPECT_NO_THROW((Heads<float>{nullptr, 3, 0, 8, 8, 8}.Validate("f", "x")));
  EXPECT_FALSE(Overlaps(Heads<float>{buffer.data(), 0, 1, 8, 8, 8},
                        Heads<float>{buffer.data(), 1, 1, 8, 8, 8}));
  EXPECT_THROW((Heads<float>{buffer.data(), -1, 1, 8, 8, 8}.Validate("f", "x")), Error);
  EXPECT_THROW((Heads<float>{buffer.data(), 1, -1, 8, 8, 8}.Validate("f", "x")), Error);
  EXPECT_THROW((Heads<float>{buffer.data(), 1, 1, 0, 8, 8}.Validate("f", "x")), Error);
  EXPECT_THROW((Heads<float>{nullptr, 1, 1, 8, 8, 8}.Validate("f", "x")), Error);
}

TEST(Heads, OverlapDetection) {
  std::vector<float> buffer(32);
  auto a = Heads<float>::Dense(buffer.data(), 1, 1, 16);
  auto b = Heads<float>::Dense(buffer.data() + 16, 1, 1, 16);
  auto c = Heads<float>::Dense(buffer.data() + 15, 1, 1, 16);
  EXPECT_FALSE(Overlaps(a, b));
  EXPECT_TRUE(Overlaps(a, c));
}

TEST(Heads, RowsOverlapIsExactForFusedQkv) {
  // A fused [tokens, 3 * heads, dim] buffer: q takes heads 0-1, k heads 2-3 of every token. Their
  // hulls interleave, but no row is shared.
  std::vector<float> qkv(4 * 6 * 8);
  Heads<float> q{qkv.data(), 4, 2, 8, 48, 8};
  Heads<float> k{qkv.data() + 16, 4, 2, 8, 48, 8};
  EXPECT_TRUE(Overlaps(q, k));
  EXPECT_FALSE(internal::RowsOverlap(q, k));
  Heads<float> shifted{qkv.data() + 12, 4, 2, 8, 48, 8};  // straddles q's second head
  EXPECT_TRUE(internal::RowsOverlap(q, shifted));
  EXPECT_TRUE(internal::RowsOverlap(shifted, q));
}

TEST(Positions, RangeAndPacked) {
  EXPECT_EQ(PositionRange(5, 3), (std::vector<int64_t>{5, 6, 7}));
  const std::vector<int64_t> cu{0, 3, 5};
  EXPECT_EQ(PackedPositions(cu), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  const std::vector<int64_t> bad{0, 3, 2};
  EXPECT_THROW(PackedPositions(bad), Error);
}

TEST(Positions, NegativePositionNamesTheToken) {
  const std::vector<int64_t> positions{0, 1, -4};
  try {
    ValidatePositions("rope", positions, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[rope] positions[2] must be >= 0, got -4");
  }
  EXPECT_THROW(ValidatePositions("rope", positions, 2), Error);
}

}  // namespace
}  // namespace posenc
