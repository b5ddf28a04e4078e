// Where the kernels run: the SIMD instruction set chosen for this CPU at run time (Google
// Highway's dynamic dispatch) and the number of OpenMP threads they may use.
#pragma once

#include <cstddef>
#include <string>

namespace posenc {

// The SIMD target the kernels dispatch to, e.g. "AVX3" (AVX-512), "AVX2" or "SSE4".
std::string SimdTargetName();

// The number of threads a large call uses (OpenMP's max threads; OMP_NUM_THREADS sets it).
int ThreadCount();

// Sets the number of threads for later calls from this thread (n >= 1).
void SetThreadCount(int n);

// The large buffers of a call (1 MiB or more: attention's packed key tiles, rotated copies of q
// and k, split-K partials) are kept for later calls instead of going back to the system, up to
// 1 GiB in all: pages the system hands out afresh cost about 2 us each to touch on a virtual
// machine, as much as a third of a prefill. The bytes kept now, and a call that frees them.
size_t KeptScratchBytes();
void FreeKeptScratch();

}  // namespace posenc
