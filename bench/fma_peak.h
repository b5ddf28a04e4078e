// The float32 FMA peak of this machine, measured rather than looked up: compute-bound kernels
// (attention) are reported as a fraction of it, as memory-bound ones are of the STREAM bandwidth.
#pragma once

#include <cstdint>

namespace posenc::bench {

// Runs `iterations` rounds of independent float32 fused multiply-adds on every OpenMP thread,
// with the widest SIMD target Highway finds on this CPU at run time (the one the kernels use),
// and returns the floating-point operations done (2 per FMA lane).
double FmaPeakRun(int64_t iterations);

}  // namespace posenc::bench
