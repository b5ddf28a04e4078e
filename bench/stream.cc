#include "stream.h"

#include <cstdint>

namespace posenc::bench {

// Static schedules give each thread one contiguous chunk, as the RoPE kernel's token split does.

void StreamCopy(const float* in, float* out, size_t n) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = in[i];
}

void StreamScaleInPlace(float* x, size_t n, float s) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) x[i] *= s;
}

void StreamFill(float* out, size_t n, float v) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = v;
}

float StreamRead(const float* in, size_t n) {
  const auto count = static_cast<int64_t>(n);
  float sum = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < count; ++i) sum += in[i];
  return sum;
}

}  // namespace posenc::bench
