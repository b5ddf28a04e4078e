#include "posenc/runtime.h"

#include <omp.h>

#include "posenc/error.h"
#include "rope_kernels.h"

namespace posenc {

std::string SimdTargetName() { return internal::KernelTargetName(); }

int ThreadCount() { return omp_get_max_threads(); }

void SetThreadCount(int n) {
  Require(n >= 1, "runtime", "threads", "be >= 1", n);
  omp_set_num_threads(n);
}

}  // namespace posenc
