// What this CPU offers beyond Highway's targets, for the few kernels that call instructions
// Highway 1.0.3 does not (AVX512-BF16): asked once, at run time, never a -march flag.
#pragma once

namespace posenc::internal {

// AVX512-F, BW, VL and BF16 (false on other machines and compilers).
bool HasAvx512Bf16();

// Whether the CPU is AMD's (cpuid's vendor), where AVX512-BF16's vdpbf16ps runs on two pipes.
bool IsAmdCpu();

}  // namespace posenc::internal
