// The storage types: exact round trips, and round-to-nearest-even at the documented edges.
#include "posenc/storage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace posenc {
namespace {

TEST(Storage, EveryBFloat16AndFloat16ValueRoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float fb = BFloat16{b}.ToFloat();
    if (!std::isnan(fb)) EXPECT_EQ(BFloat16::FromFloat(fb).bits, b) << bits;
    const float fh = Float16{b}.ToFloat();
    if (!std::isnan(fh)) EXPECT_EQ(Float16::FromFloat(fh).bits, b) << bits;
  }
}

TEST(Storage, BFloat16RoundsToNearestEven) {
  // bfloat16 keeps 8 significant bits: near 1 the spacing is 2^-7.
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 0x1p-8f).ToFloat(), 1.0f);                // tie: even
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 3 * 0x1p-8f).ToFloat(), 1.0f + 0x1p-6f);  // tie: even
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 0x1p-8f + 0x1p-20f).ToFloat(), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(BFloat16::FromFloat(std::numeric_limits<float>::quiet_NaN()).ToFloat()));
  EXPECT_EQ(BFloat16::FromFloat(-2.5f).ToFloat(), -2.5f);
}

TEST(Storage, Float16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(Float16::FromFloat(1.0f + 0x1p-11f).ToFloat(), 1.0f);                // tie: even
  EXPECT_EQ(Float16::FromFloat(1.0f + 3 * 0x1p-11f).ToFloat(), 1.0f + 0x1p-9f);  // tie: even
  EXPECT_EQ(Float16::FromFloat(65504.0f).ToFloat(), 65504.0f);                   // the largest
  EXPECT_EQ(Float16::FromFloat(65519.0f).ToFloat(), 65504.0f);
  EXPECT_TRUE(std::isinf(Float16::FromFloat(65520.0f).ToFloat()));  // rounds up
  EXPECT_EQ(Float16::FromFloat(0x1p-24f).ToFloat(), 0x1p-24f);      // smallest
  EXPECT_EQ(Float16::FromFloat(0x1p-25f).ToFloat(), 0.0f);          // tie: even
  EXPECT_EQ(Float16::FromFloat(3 * 0x1p-25f).ToFloat(), 0x1p-23f);  // tie: even
  EXPECT_TRUE(std::isnan(Float16::FromFloat(std::numeric_limits<float>::quiet_NaN()).ToFloat()));
  EXPECT_EQ(Float16::FromFloat(-0.0f).bits, 0x8000);
}

}  // namespace
}  // namespace posenc
