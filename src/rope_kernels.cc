// Compiles rope_kernels-inl.h once per Highway target (foreach_target.h re-includes this file)
// and dispatches to the best one for this CPU, once per call.
#include "rope_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "rope_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "rope_kernels-inl.h"

#if HWY_ONCE
namespace posenc::internal {

HWY_EXPORT(RopeKernelImpl);
HWY_EXPORT(TargetNameImpl);

void RopeKernel(const RopeKernelArgs& args) { HWY_DYNAMIC_DISPATCH(RopeKernelImpl)(args); }

const char* KernelTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace posenc::internal
#endif  // HWY_ONCE
