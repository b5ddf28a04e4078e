// The CPU the kernels run on, named well enough to compare figures across machines and to choose
// a kernel's arithmetic by measurement per microarchitecture: the brand string, CPUID's vendor,
// family, model and stepping, the microarchitecture they stand for, and the instruction set
// extensions posenc's kernels care about (AVX-512, AVX512-BF16, AMX). `posenc bench` prints it.
#pragma once

#include <string>

namespace posenc {

struct CpuInfo {
  std::string model_name = "unknown";       // the brand string ("AMD EPYC 9B45 128-Core Processor")
  std::string vendor = "unknown";           // CPUID leaf 0: "GenuineIntel", "AuthenticAMD"
  int family = 0, model = 0, stepping = 0;  // display family and model (extended fields added)
  std::string microarchitecture = "unknown";
  bool hypervisor = false;  // CPUID says it runs under a hypervisor (a VM: the brand may be vague)
  // CPUID bits, AVX and AVX-512 only where the OS also saves their registers (XCR0).
  bool avx2 = false, avx512f = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false;
  // Linux hands out AMX tile data per process on request (arch_prctl(ARCH_REQ_XCOMP_PERM)):
  // true when the request succeeded, so that a kernel in this process may use the tiles.
  bool amx_permitted = false;
};

// The microarchitecture of a CPUID vendor, display family, display model and stepping: "Emerald
// Rapids", "Zen 5", ... for the families in the table (Intel server and client cores since
// Nehalem, AMD Zen 1 to 6 by the Linux kernel's model ranges), "unknown" otherwise.
std::string Microarchitecture(const std::string& vendor, int family, int model, int stepping);

// This machine's CPU, read through CPUID (and /proc/cpuinfo for the brand where CPUID has none).
// The first call asks the kernel for AMX permission where the CPU has AMX.
const CpuInfo& ThisCpu();

// "Emerald Rapids (GenuineIntel family 6 model 0xcf stepping 2)".
std::string CpuIdentity(const CpuInfo& cpu);

// "AVX-512 yes, AVX512-BF16 yes, AVX512-FP16 yes, AMX-BF16 no".
std::string CpuExtensions(const CpuInfo& cpu);

}  // namespace posenc
