// Where the kernels run: the SIMD instruction set chosen for this CPU at run time (Google
// Highway's dynamic dispatch) and the number of OpenMP threads they may use.
#pragma once

#include <string>

namespace posenc {

// The SIMD target the kernels dispatch to, e.g. "AVX3" (AVX-512), "AVX2" or "SSE4".
std::string SimdTargetName();

// The number of threads a large call uses (OpenMP's max threads; OMP_NUM_THREADS sets it).
int ThreadCount();

// Sets the number of threads for later calls from this thread (n >= 1).
void SetThreadCount(int n);

}  // namespace posenc
