// The sinusoidal table body, compiled once per Highway target by sinusoidal_kernels.cc.
//
// A table of T x d values would need T * d double sines; instead each position is split as
// p = hi + lo with lo = p mod B, and the angle-addition identity
//
//   sin(p f + phase) = sin(hi f + phase) cos(lo f) + cos(hi f + phase) sin(lo f)
//
// is evaluated in double: cos(lo f) and sin(lo f) for the B values of lo are formed once per call,
// sin/cos(hi f + phase) once per block of rows sharing hi. Every factor is within ~1e-16 of exact
// (angles as in angles-inl.h), so the rounded float32 result is as accurate as a direct sine, and
// each output costs one double multiply and one FMA: the fill runs at the speed of writing memory.

#if defined(POSENC_SINUSOIDAL_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_SINUSOIDAL_KERNELS_INL_H_
#undef POSENC_SINUSOIDAL_KERNELS_INL_H_
#else
#define POSENC_SINUSOIDAL_KERNELS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>

#include "angles-inl.h"
#include "hwy/aligned_allocator.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "simd/kernel_threads.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Rows per block of the angle-addition split; a power of two, so lo = p & (B - 1).
constexpr int64_t kRowsPerBlock = 32;
// Below this many rows, a block table costs more than it saves: B = 1 (direct sines).
constexpr int64_t kMinRowsForBlocks = 256;

// sin_out[j] = sin(pos f_j + phase_j), cos_out[j] = cos(pos f_j + phase_j) for j < cols
// (a multiple of the double vector length).
template <class DD>
HWY_INLINE void FillAngles(DD dd, int64_t pos, const double* HWY_RESTRICT freq_hi,
                           const double* HWY_RESTRICT freq_lo, const double* HWY_RESTRICT phase,
                           size_t cols, double* HWY_RESTRICT sin_out,
                           double* HWY_RESTRICT cos_out) {
  const auto vpos = hn::Set(dd, static_cast<double>(pos));
  for (size_t j = 0; j < cols; j += hn::Lanes(dd)) {
    const auto angle =
        hn::Add(AngleMod2Pi(dd, vpos, hn::Load(dd, freq_hi + j), hn::Load(dd, freq_lo + j)),
                hn::Load(dd, phase + j));
    hn::Store(hn::Sin(dd, angle), dd, sin_out + j);
    hn::Store(hn::Cos(dd, angle), dd, cos_out + j);
  }
}

// Rows (hi + lo0 + r) for r < rows, consecutive in out (dim apart): out = u k_cos + v k_sin per
// column, rounded to float32. Row-major order: each row is one contiguous stream of stores.
// (Measured and dropped: column-major order, 1.7x slower as rows 4 KiB apart alias in L1; and
// non-temporal stores, 15-20% slower on one thread and no faster on two.)
template <class DD>
HWY_INLINE void CombineRun(DD dd, const double* HWY_RESTRICT u, const double* HWY_RESTRICT v,
                           const double* HWY_RESTRICT k_table, size_t cols, int64_t lo0,
                           int64_t rows, size_t width, float* HWY_RESTRICT out) {
  const hn::Rebind<float, DD> df;
  const size_t nd = hn::Lanes(dd);
  for (int64_t r = 0; r < rows; ++r) {
    const double* k_sin = k_table + 2 * static_cast<size_t>(lo0 + r) * cols;
    const double* k_cos = k_sin + cols;
    float* row = out + static_cast<size_t>(r) * width;
    for (size_t j = 0; j < width; j += nd) {
      const auto value =
          hn::DemoteTo(df, hn::MulAdd(hn::Load(dd, u + j), hn::Load(dd, k_cos + j),
                                      hn::Mul(hn::Load(dd, v + j), hn::Load(dd, k_sin + j))));
      if (j + nd <= width) {
        hn::StoreU(value, df, row + j);
      } else {
        // The last partial vector through a stack buffer (the tables are padded; rows are not).
        HWY_ALIGN float stage[HWY_MAX_BYTES / sizeof(double)];
        hn::Store(value, df, stage);
        std::memcpy(row + j, stage, (width - j) * sizeof(float));
      }
    }
  }
}

HWY_NOINLINE void SinusoidalKernelImpl(const double* freq, int64_t dim, const int64_t* positions,
                                       int64_t tokens, float* out) {
  const hn::ScalableTag<double> dd;
  const size_t nd = hn::Lanes(dd);
  const size_t width = static_cast<size_t>(dim);
  const size_t cols = hwy::RoundUpTo(width, nd);
  const int64_t block = tokens >= kMinRowsForBlocks ? kRowsPerBlock : 1;

  // Per column: frequency split (see angles-inl.h) and phase; zero past dim.
  auto column = hwy::AllocateAligned<double>(3 * cols);
  double* freq_hi = column.get();
  double* freq_lo = freq_hi + cols;
  double* phase = freq_lo + cols;
  for (size_t j = 0; j < cols; ++j) {
    SplitFrequency(j < width ? freq[j] : 0.0, freq_hi + j, freq_lo + j);
    phase[j] = j < width && j % 2 == 1 ? std::numbers::pi / 2 : 0.0;
  }
  // cos(lo f_j) and sin(lo f_j) for every lo < block: phase 0.
  auto zero_phase = hwy::AllocateAligned<double>(cols);
  std::memset(zero_phase.get(), 0, cols * sizeof(double));
  auto k_table = hwy::AllocateAligned<double>(2 * static_cast<size_t>(block) * cols);
  for (int64_t lo = 0; lo < block; ++lo) {
    double* k_sin = k_table.get() + 2 * lo * cols;
    FillAngles(dd, lo, freq_hi, freq_lo, zero_phase.get(), cols, k_sin, k_sin + cols);
  }

  internal::ForRanges(tokens, tokens * dim, [&](int64_t begin, int64_t end) {
    internal::Scratch<double> uv(2 * cols);  // sin, cos of hi f + phase
    double* u = uv.get();
    double* v = uv.get() + cols;
    int64_t current_hi = -1;
    for (int64_t t = begin; t < end;) {
      // A run: consecutive rows whose positions count up by one within one block.
      const int64_t pos = positions[t];
      const int64_t lo0 = pos & (block - 1), hi = pos - lo0;
      int64_t rows = 1;
      while (t + rows < end && lo0 + rows < block && positions[t + rows] == pos + rows) ++rows;
      if (hi != current_hi) {
        FillAngles(dd, hi, freq_hi, freq_lo, phase, cols, u, v);
        current_hi = hi;
      }
      CombineRun(dd, u, v, k_table.get(), cols, lo0, rows, width, out + t * dim);
      t += rows;
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_SINUSOIDAL_KERNELS_INL_H_
