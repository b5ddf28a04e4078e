// What this CPU offers beyond Highway's targets, for the few kernels that call instructions
// Highway 1.0.3 does not (AVX512-BF16): asked once, at run time, never a -march flag.
#pragma once

#include <string_view>

namespace posenc::internal {

// AVX512-F, BW, VL and BF16 (false on other machines and compilers).
bool HasAvx512Bf16();

// Whether AVX512-BF16's vdpbf16ps was measured to run at twice the multiply-adds of float32 FMAs
// on a microarchitecture (as posenc/cpu.h names it): AMD Zen 4 and Zen 5, two pipes each. Not on
// Intel's Sapphire and Emerald Rapids (one port against two FMA ports), nor on a
// microarchitecture not measured yet.
bool Bf16DotProductsDoubleFmas(std::string_view microarchitecture);

}  // namespace posenc::internal
