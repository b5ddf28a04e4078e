#include "posenc/cpu.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace posenc {
namespace {

struct Range {
  int first, last;
  const char* name;
};

// Intel family 6 display models (Linux's arch/x86/include/asm/intel-family.h). Model 0x55 is
// split by stepping below.
constexpr Range kIntelFamily6[] = {
    {0x1A, 0x1A, "Nehalem"},
    {0x1E, 0x1F, "Nehalem"},
    {0x2E, 0x2E, "Nehalem-EX"},
    {0x25, 0x25, "Westmere"},
    {0x2C, 0x2C, "Westmere-EP"},
    {0x2F, 0x2F, "Westmere-EX"},
    {0x2A, 0x2A, "Sandy Bridge"},
    {0x2D, 0x2D, "Sandy Bridge-EP"},
    {0x3A, 0x3A, "Ivy Bridge"},
    {0x3E, 0x3E, "Ivy Bridge-EP"},
    {0x3C, 0x3C, "Haswell"},
    {0x45, 0x46, "Haswell"},
    {0x3F, 0x3F, "Haswell-EP"},
    {0x3D, 0x3D, "Broadwell"},
    {0x47, 0x47, "Broadwell"},
    {0x4F, 0x4F, "Broadwell-EP"},
    {0x56, 0x56, "Broadwell-DE"},
    {0x4E, 0x4E, "Skylake"},
    {0x5E, 0x5E, "Skylake"},
    {0x8E, 0x8E, "Kaby Lake / Coffee Lake"},
    {0x9E, 0x9E, "Kaby Lake / Coffee Lake"},
    {0xA5, 0xA6, "Comet Lake"},
    {0x66, 0x66, "Cannon Lake"},
    {0x7D, 0x7E, "Ice Lake"},
    {0x6A, 0x6A, "Ice Lake-SP"},
    {0x6C, 0x6C, "Ice Lake-SP"},
    {0x8C, 0x8D, "Tiger Lake"},
    {0xA7, 0xA7, "Rocket Lake"},
    {0x97, 0x97, "Alder Lake"},
    {0x9A, 0x9A, "Alder Lake"},
    {0xBE, 0xBE, "Alder Lake-N"},
    {0xB7, 0xB7, "Raptor Lake"},
    {0xBA, 0xBA, "Raptor Lake"},
    {0xBF, 0xBF, "Raptor Lake"},
    {0xAA, 0xAA, "Meteor Lake"},
    {0xAC, 0xAC, "Meteor Lake"},
    {0xBD, 0xBD, "Lunar Lake"},
    {0xC5, 0xC6, "Arrow Lake"},
    {0xCC, 0xCC, "Panther Lake"},
    {0x8F, 0x8F, "Sapphire Rapids"},
    {0xCF, 0xCF, "Emerald Rapids"},
    {0xAD, 0xAE, "Granite Rapids"},
    {0xAF, 0xAF, "Sierra Forest"},
    {0xB6, 0xB6, "Grand Ridge"},
    {0xDD, 0xDD, "Clearwater Forest"},
    {0x57, 0x57, "Knights Landing"},
    {0x85, 0x85, "Knights Mill"},
};

// AMD Zen generations by family and model, as the Linux kernel sets X86_FEATURE_ZEN1..ZEN6
// (arch/x86/kernel/cpu/amd.c, bsp_init_amd).
constexpr Range kAmd17[] = {{0x00, 0x2F, "Zen"},   {0x50, 0x5F, "Zen"},   {0x30, 0x4F, "Zen 2"},
                            {0x60, 0x7F, "Zen 2"}, {0x90, 0x91, "Zen 2"}, {0xA0, 0xAF, "Zen 2"}};
constexpr Range kAmd19[] = {
    {0x00, 0x0F, "Zen 3"}, {0x20, 0x5F, "Zen 3"}, {0x10, 0x1F, "Zen 4"}, {0x60, 0xAF, "Zen 4"}};
constexpr Range kAmd1A[] = {{0x00, 0x2F, "Zen 5"}, {0x40, 0x4F, "Zen 5"}, {0x60, 0x7F, "Zen 5"},
                            {0x50, 0x5F, "Zen 6"}, {0x80, 0xAF, "Zen 6"}, {0xC0, 0xCF, "Zen 6"}};

template <size_t N>
std::string Find(const Range (&table)[N], int model) {
  for (const Range& r : table) {
    if (model >= r.first && model <= r.last) return r.name;
  }
  return "unknown";
}

std::string Trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  const size_t last = s.find_last_not_of(' ');
  return s.substr(first, last - first + 1);
}

std::string ProcCpuinfoField(const char* field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0 && line.find(':') != std::string::npos) {
      return Trimmed(line.substr(line.find(':') + 1));
    }
  }
  return "";
}

#if defined(__x86_64__) || defined(__i386__)
uint64_t Xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuInfo Detect() {
  CpuInfo cpu;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return cpu;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  cpu.vendor = vendor;
  __get_cpuid(1, &a, &b, &c, &d);
  const int base_family = static_cast<int>((a >> 8) & 0xF);
  const int base_model = static_cast<int>((a >> 4) & 0xF);
  cpu.stepping = static_cast<int>(a & 0xF);
  cpu.family = base_family == 0xF ? base_family + static_cast<int>((a >> 20) & 0xFF) : base_family;
  cpu.model = base_family == 0x6 || base_family == 0xF
                  ? base_model + (static_cast<int>((a >> 16) & 0xF) << 4)
                  : base_model;
  cpu.hypervisor = (c >> 31) & 1;
  const bool osxsave = (c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? Xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG and XTILEDATA
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    cpu.avx2 = os_avx && ((b >> 5) & 1);
    cpu.avx512f = os_avx512 && ((b >> 16) & 1);
    cpu.avx512_fp16 = os_avx512 && ((d >> 23) & 1);
    cpu.amx_bf16 = os_amx && ((d >> 22) & 1);
    cpu.amx_tile = os_amx && ((d >> 24) & 1);
    const unsigned subleaves = a;
    if (subleaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      cpu.avx512_bf16 = os_avx512 && ((a >> 5) & 1);
    }
  }
  unsigned ext = __get_cpuid_max(0x80000000, nullptr);
  if (ext >= 0x80000004) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &a, &b, &c, &d);
      std::memcpy(brand + 16 * leaf, &a, 4);
      std::memcpy(brand + 16 * leaf + 4, &b, 4);
      std::memcpy(brand + 16 * leaf + 8, &c, 4);
      std::memcpy(brand + 16 * leaf + 12, &d, 4);
    }
    cpu.model_name = Trimmed(brand);
  }
#if defined(__linux__)
  if (cpu.amx_tile) {
    // ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA (18): without it the first tile instruction
    // faults. Linux 5.16 and later; older kernels refuse the request.
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    cpu.amx_permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
#endif
  return cpu;
}
#else
CpuInfo Detect() { return {}; }
#endif

}  // namespace

std::string Microarchitecture(const std::string& vendor, int family, int model, int stepping) {
  if (vendor == "GenuineIntel") {
    if (family == 6 && model == 0x55) {
      if (stepping >= 10) return "Cooper Lake";
      if (stepping >= 5) return "Cascade Lake";
      return "Skylake-SP";
    }
    if (family == 6) return Find(kIntelFamily6, model);
    if (family == 0x13 && model == 0x01) return "Diamond Rapids";
    return "unknown";
  }
  if (vendor == "AuthenticAMD") {
    if (family == 0x17) return Find(kAmd17, model);
    if (family == 0x19) return Find(kAmd19, model);
    if (family == 0x1A) return Find(kAmd1A, model);
  }
  return "unknown";
}

const CpuInfo& ThisCpu() {
  static const CpuInfo cpu = [] {
    CpuInfo c = Detect();
    if (c.model_name == "unknown" || c.model_name.empty()) {
      const std::string name = ProcCpuinfoField("model name");
      c.model_name = name.empty() ? "unknown" : name;
    }
    c.microarchitecture = Microarchitecture(c.vendor, c.family, c.model, c.stepping);
    return c;
  }();
  return cpu;
}

std::string CpuIdentity(const CpuInfo& cpu) {
  char text[160];
  std::snprintf(text, sizeof text, "%s (%s family %d model 0x%x stepping %d%s)",
                cpu.microarchitecture.c_str(), cpu.vendor.c_str(), cpu.family, cpu.model,
                cpu.stepping, cpu.hypervisor ? ", virtual machine" : "");
  return text;
}

std::string CpuExtensions(const CpuInfo& cpu) {
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::string amx = !cpu.amx_bf16       ? "no"
                    : cpu.amx_permitted ? "yes"
                                        : "on the CPU, refused by the kernel";
  return std::string("AVX-512 ") + yes(cpu.avx512f) + ", AVX512-BF16 " + yes(cpu.avx512_bf16) +
         ", AVX512-FP16 " + yes(cpu.avx512_fp16) + ", AMX-BF16 " + amx;
}

}  // namespace posenc
