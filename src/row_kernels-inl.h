// Row kernel bodies, compiled once per Highway target by row_kernels.cc. One vector body per
// kernel; a row's last partial vector goes through a stack buffer (Highway 1.0.3's MaskedLoad is
// not safe at the end of a row on SSE4, see rope_kernels-inl.h).

#if defined(POSENC_ROW_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ROW_KERNELS_INL_H_
#undef POSENC_ROW_KERNELS_INL_H_
#else
#define POSENC_ROW_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "simd/kernel_threads.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// y[j] = x[j] + y_in[j] for j < n, vector by vector; in place when y == y_in.
template <class DF>
HWY_INLINE void AddRow(DF df, const float* HWY_RESTRICT x, const float* y_in, float* y, size_t n) {
  const size_t lanes = hn::Lanes(df);
  size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(df, x + j), hn::LoadU(df, y_in + j)), df, y + j);
  }
  if (j == n) return;
  HWY_ALIGN float stage[2 * HWY_MAX_BYTES / sizeof(float)] = {};
  const size_t bytes = (n - j) * sizeof(float);
  std::memcpy(stage, x + j, bytes);
  std::memcpy(stage + lanes, y_in + j, bytes);
  hn::Store(hn::Add(hn::Load(df, stage), hn::Load(df, stage + lanes)), df, stage);
  std::memcpy(y + j, stage, bytes);
}

HWY_NOINLINE void GatherAddImpl(const float* a, const int64_t* a_rows, const float* b,
                                const int64_t* b_rows, int64_t tokens, int64_t width, float* out) {
  const hn::ScalableTag<float> df;
  internal::ForRanges(tokens, tokens * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = out + t * width;
      const float* b_row = b != nullptr ? b + b_rows[t] * width : row;
      AddRow(df, a + a_rows[t] * width, b_row, row, static_cast<size_t>(width));
    }
  });
}

HWY_NOINLINE void ScatterAddImpl(const float* grad_out, const int64_t* rows, int64_t tokens,
                                 int64_t width, float* grad) {
  const hn::ScalableTag<float> df;
  // Columns in whole vectors per thread, so that every thread but the last runs tail-free.
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t chunks = (width + lanes - 1) / lanes;
  internal::ForRanges(chunks, tokens * width, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * lanes, last = std::min(width, end * lanes);
    if (first >= last) return;
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = grad + rows[t] * width + first;
      AddRow(df, grad_out + t * width + first, row, row, static_cast<size_t>(last - first));
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ROW_KERNELS_INL_H_
