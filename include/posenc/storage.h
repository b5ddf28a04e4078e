// Storage types: the element types activations may be stored in. Arithmetic is always float32;
// these types only say how a value sits in memory.
//
//   float32   1 sign | 8 exponent | 23 mantissa bits
//   bfloat16  1 sign | 8 exponent |  7 mantissa bits   (the top half of a float32: same range)
//   float16   1 sign | 5 exponent | 10 mantissa bits   (IEEE 754 binary16: max 65504)
//
// Conversions from float round to nearest, ties to even, as PyTorch's .to(torch.bfloat16) and
// .to(torch.float16) do; NaN stays NaN, float16 overflows to infinity. Inverse frequencies,
// positions and angles never use these types: only activations do.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace posenc {

struct BFloat16 {
  uint16_t bits = 0;

  static BFloat16 FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return {static_cast<uint16_t>(u >> 16)};
  }
  float ToFloat() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};

struct Float16 {
  uint16_t bits = 0;

  static Float16 FromFloat(float f);  // storage.cc
  float ToFloat() const;
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2);

enum class StorageType { kFloat32, kBFloat16, kFloat16 };

// The StorageType of an element type (const or not).
template <typename T>
constexpr StorageType StorageTypeOf();
template <>
constexpr StorageType StorageTypeOf<float>() {
  return StorageType::kFloat32;
}
template <>
constexpr StorageType StorageTypeOf<BFloat16>() {
  return StorageType::kBFloat16;
}
template <>
constexpr StorageType StorageTypeOf<Float16>() {
  return StorageType::kFloat16;
}

// float -> T and T -> float for any storage type, float included (the identity).
template <typename T>
T FromFloat(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    return T::FromFloat(f);
  }
}
inline float ToFloat(float f) { return f; }
inline float ToFloat(BFloat16 b) { return b.ToFloat(); }
inline float ToFloat(Float16 h) { return h.ToFloat(); }

// "float32", "bfloat16" or "float16".
const char* StorageTypeName(StorageType type);

}  // namespace posenc
