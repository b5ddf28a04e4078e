// Compiles row_kernels-inl.h once per Highway target (foreach_target.h re-includes this file)
// and dispatches to the best one for this CPU, once per call; plus the scalar twins.
#include "row_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "row_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "row_kernels-inl.h"

#if HWY_ONCE
#include <cstring>

#include "simd/kernel_threads.h"

namespace posenc::internal {

HWY_EXPORT(GatherAddImpl);
HWY_EXPORT(ScatterAddImpl);

void GatherAdd(const float* a, const int64_t* a_rows, const float* b, const int64_t* b_rows,
               int64_t tokens, int64_t width, float* out) {
  HWY_DYNAMIC_DISPATCH(GatherAddImpl)(a, a_rows, b, b_rows, tokens, width, out);
}

void ScatterAdd(const float* grad_out, const int64_t* rows, int64_t tokens, int64_t width,
                float* grad) {
  HWY_DYNAMIC_DISPATCH(ScatterAddImpl)(grad_out, rows, tokens, width, grad);
}

void GatherRows(const float* table, const int64_t* rows, int64_t tokens, int64_t width,
                float* out) {
  // A copy needs no arithmetic: memcpy is already the fastest row copy; threads add bandwidth.
  const size_t bytes = static_cast<size_t>(width) * sizeof(float);
  ForRanges(tokens, tokens * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      std::memcpy(out + t * width, table + rows[t] * width, bytes);
  });
}

void GatherAddReference(const float* a, const int64_t* a_rows, const float* b,
                        const int64_t* b_rows, int64_t tokens, int64_t width, float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < width; ++j) {
      const float other = b != nullptr ? b[b_rows[t] * width + j] : out[t * width + j];
      out[t * width + j] = a[a_rows[t] * width + j] + other;
    }
  }
}

void ScatterAddReference(const float* grad_out, const int64_t* rows, int64_t tokens, int64_t width,
                         float* grad) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < width; ++j) grad[rows[t] * width + j] += grad_out[t * width + j];
  }
}

}  // namespace posenc::internal
#endif  // HWY_ONCE
