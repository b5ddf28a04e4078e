// Compiles attention_kernels-inl.h once per Highway target (foreach_target.h re-includes this
// file) and dispatches to the best one for this CPU, once per call.
#include "attention_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

// After highway.h: the kernels are written against its per-target namespace.
#include "attention_kernels-inl.h"

#if HWY_ONCE
namespace posenc::internal {

HWY_EXPORT(AttentionKernelImpl);

void AttentionKernel(const AttentionKernelArgs& args) {
  HWY_DYNAMIC_DISPATCH(AttentionKernelImpl)(args);
}

}  // namespace posenc::internal
#endif  // HWY_ONCE
