// Compiles the FMA loop once per Highway target (foreach_target.h re-includes this file) and
// dispatches to the best one for this CPU, as the library's kernels do.
#include "fma_peak.h"

#include <omp.h>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace posenc::bench {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Written once per call so that the compiler must keep every FMA.
float fma_sink;

// Twelve independent accumulators: an FMA has a latency of 4 to 5 cycles and two issue ports on
// current x86 cores, so at least 8 to 10 chains must be in flight to keep both ports busy; 12
// chains plus the two constants still fit in AVX2's 16 registers (no spills). a <- a * m + c
// converges to c / (1 - m) and never overflows or goes subnormal, which would slow it down.
double FmaPeakRunImpl(int64_t iterations) {
  const hn::ScalableTag<float> d;
  double flops = 0;
  float sink = 0;
#pragma omp parallel reduction(+ : flops, sink)
  {
    const auto m = hn::Set(d, 0.999f), c = hn::Set(d, 1e-3f);
    // Distinct starting values: with equal ones the compiler merges the chains into one.
    const float base = 1e-3f * static_cast<float>(omp_get_thread_num() + 1);
    const auto start = [&](int k) { return hn::Set(d, base + 1e-4f * static_cast<float>(k)); };
    auto a0 = start(0), a1 = start(1), a2 = start(2), a3 = start(3), a4 = start(4);
    auto a5 = start(5), a6 = start(6), a7 = start(7), a8 = start(8), a9 = start(9);
    auto a10 = start(10), a11 = start(11);
    for (int64_t i = 0; i < iterations; ++i) {
      a0 = hn::MulAdd(a0, m, c);
      a1 = hn::MulAdd(a1, m, c);
      a2 = hn::MulAdd(a2, m, c);
      a3 = hn::MulAdd(a3, m, c);
      a4 = hn::MulAdd(a4, m, c);
      a5 = hn::MulAdd(a5, m, c);
      a6 = hn::MulAdd(a6, m, c);
      a7 = hn::MulAdd(a7, m, c);
      a8 = hn::MulAdd(a8, m, c);
      a9 = hn::MulAdd(a9, m, c);
      a10 = hn::MulAdd(a10, m, c);
      a11 = hn::MulAdd(a11, m, c);
    }
    const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                                     hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                             hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
    sink += hn::GetLane(hn::SumOfLanes(d, sum));
    flops += 2.0 * 12.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
  }
  fma_sink = sink;
  return flops;
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace posenc::bench {

HWY_EXPORT(FmaPeakRunImpl);

double FmaPeakRun(int64_t iterations) { return HWY_DYNAMIC_DISPATCH(FmaPeakRunImpl)(iterations); }

}  // namespace posenc::bench
#endif  // HWY_ONCE
