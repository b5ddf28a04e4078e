// Compiles attention_backward_kernels-inl.h once per Highway target (foreach_target.h re-includes
// this file) and dispatches to the best one for this CPU, once per call.
#include "attention_backward_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_backward_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

// After highway.h: the kernels are written against its per-target namespace.
#include "attention_backward_kernels-inl.h"

#if HWY_ONCE
namespace posenc::internal {

HWY_EXPORT(AttentionBackwardImpl);

void AttentionBackwardKernel(const AttentionBackwardKernelArgs& args) {
  HWY_DYNAMIC_DISPATCH(AttentionBackwardImpl)(args);
}

}  // namespace posenc::internal
#endif  // HWY_ONCE
