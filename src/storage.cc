#include "posenc/storage.h"

namespace posenc {

// Round to nearest even with integer arithmetic only, so that the result never depends on the
// FPU's rounding mode or on F16C being present (F. Giesen's float_to_half_fast3_rtne).
Float16 Float16::FromFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t out;
  if (u >= (127u + 16u) << 23) {  // overflow, infinity or NaN
    out = u > 0x7F800000u ? 0x7E00 : 0x7C00;
  } else if (u < (127u - 14u) << 23) {  // subnormal or zero: let a float add do the rounding
    constexpr uint32_t kMagicBits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic, sum;
    std::memcpy(&magic, &kMagicBits, sizeof(magic));
    float abs;
    std::memcpy(&abs, &u, sizeof(abs));
    sum = abs + magic;
    uint32_t s;
    std::memcpy(&s, &sum, sizeof(s));
    out = static_cast<uint16_t>(s - kMagicBits);
  } else {
    const uint32_t mantissa_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xFFFu;  // rebias the exponent, add the rounding bias
    u += mantissa_odd;
    out = static_cast<uint16_t>(u >> 13);
  }
  return {static_cast<uint16_t>(out | (sign >> 16))};
}

float Float16::ToFloat() const {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  uint32_t u;
  if (exponent == 0x1F) {
    u = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 127u - 15u) << 23) | (mantissa << 13);
  } else {
    // Subnormal or zero: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    std::memcpy(&u, &magnitude, sizeof(u));
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

const char* StorageTypeName(StorageType type) {
  switch (type) {
    case StorageType::kFloat32:
      return "float32";
    case StorageType::kBFloat16:
      return "bfloat16";
    case StorageType::kFloat16:
      return "float16";
  }
  return "?";
}

}  // namespace posenc
