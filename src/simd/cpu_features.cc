#include "cpu_features.h"

namespace posenc::internal {

bool HasAvx512Bf16() {
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 10)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool Bf16DotProductsDoubleFmas(std::string_view microarchitecture) {
  return microarchitecture == "Zen 4" || microarchitecture == "Zen 5";
}

}  // namespace posenc::internal
