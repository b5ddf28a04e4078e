// Compiles sinusoidal_kernels-inl.h once per Highway target (foreach_target.h re-includes this
// file) and dispatches to the best one for this CPU, once per call.
#include "sinusoidal_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "sinusoidal_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "sinusoidal_kernels-inl.h"

#if HWY_ONCE
namespace posenc::internal {

HWY_EXPORT(SinusoidalKernelImpl);

void SinusoidalKernel(const double* freq, int64_t dim, const int64_t* positions, int64_t tokens,
                      float* out) {
  HWY_DYNAMIC_DISPATCH(SinusoidalKernelImpl)(freq, dim, positions, tokens, out);
}

}  // namespace posenc::internal
#endif  // HWY_ONCE
