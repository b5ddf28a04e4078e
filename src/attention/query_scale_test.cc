#include "posenc/query_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;

LogFloorQueryScale Llama4() {  // Llama 4 Scout's NoPE layers: attn_scale 0.1, floor_scale 8192
  return {.rule = "llama4_attn_temperature", .beta = 0.1, .floor_scale = 8192.0, .offset = 1};
}

TEST(LogFloorQueryScale, Llama4WorkedByHand) {
  const LogFloorQueryScale s = Llama4();
  s.Validate();
  // floor((p + 1) / 8192) = 0 up to p = 8190: scale 1 + 0.1 ln 1 = 1.
  EXPECT_EQ(s.At(0), 1.0);
  EXPECT_EQ(s.At(8190), 1.0);
  // p = 8191: floor(8192 / 8192) = 1, 1 + 0.1 ln 2.
  EXPECT_DOUBLE_EQ(s.At(8191), 1.0 + 0.1 * 0.69314718055994530942);
  // p = 3 * 8192 - 1: floor = 3, 1 + 0.1 ln 4.
  EXPECT_DOUBLE_EQ(s.At(3 * 8192 - 1), 1.0 + 0.1 * 1.38629436111989061883);
  // p = 3 * 8192 - 2: floor(24575 / 8192) = 2, 1 + 0.1 ln 3.
  EXPECT_DOUBLE_EQ(s.At(3 * 8192 - 2), 1.0 + 0.1 * 1.09861228866810969140);
}

TEST(LogFloorQueryScale, MinistralOffsetZeroWorkedByHand) {
  // llama_4_scaling_beta 0.1 over original_max_position_embeddings 16384.
  const LogFloorQueryScale s{.rule = "llama_4_scaling", .beta = 0.1, .floor_scale = 16384.0};
  EXPECT_EQ(s.At(16383), 1.0);
  EXPECT_DOUBLE_EQ(s.At(16384), 1.0 + 0.1 * 0.69314718055994530942);
  // At the largest position: floor(2^32 / 2^14) = 2^18, 1 + 0.1 ln(2^18 + 1).
  EXPECT_DOUBLE_EQ(s.At(int64_t{1} << 32), 1.0 + 0.1 * std::log(262145.0));
}

TEST(LogFloorQueryScale, BetaZeroIsOneEverywhere) {
  const LogFloorQueryScale s{.beta = 0.0, .floor_scale = 1.0, .offset = 1};
  for (const int64_t p : {int64_t{0}, int64_t{1}, int64_t{12345}, int64_t{1} << 32}) {
    EXPECT_EQ(s.At(p), 1.0);
  }
}

TEST(LogFloorQueryScaleErrors, EachFieldNamed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ExpectError([] { LogFloorQueryScale{.beta = -0.5}.Validate(); },
              "[query_scale] beta must be finite and >= 0, got -0.5");
  ExpectError([&] { LogFloorQueryScale{.beta = nan}.Validate(); },
              "[query_scale] beta must be finite and >= 0, got nan");
  ExpectError([] { LogFloorQueryScale{.beta = 0.1, .floor_scale = 0.5}.Validate(); },
              "[query_scale] floor_scale must be finite and >= 1, got 0.5");
  ExpectError(
      [] { LogFloorQueryScale{.floor_scale = std::numeric_limits<double>::infinity()}.Validate(); },
      "[query_scale] floor_scale must be finite and >= 1, got inf");
  ExpectError([] { LogFloorQueryScale{.offset = 2}.Validate(); },
              "[query_scale] offset must be 0 or 1, got 2");
  ExpectError([] { Llama4().At(-1); }, "[query_scale] position must be >= 0, got -1");
}

}  // namespace
}  // namespace posenc
