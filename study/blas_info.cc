#include "blas_info.h"

#include <dlfcn.h>
#include <link.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace posenc::study {

std::string LoadedBlasLibrary() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        const std::string file = std::filesystem::path(name).filename().string();
        if (file.find("blas") == std::string::npos) return 0;
        std::error_code ec;
        const auto real = std::filesystem::canonical(name, ec);
        *static_cast<std::string*>(data) = ec ? name : real.string();
        return file.rfind("libblas", 0) == 0 ? 1 : 0;  // libblas.so.3 is the one torch calls
      },
      &found);
  return found;
}

namespace {

// The kernels the loaded OpenBLAS chose ("SkylakeX", "Prescott", ...), or "" when no OpenBLAS is
// loaded.
std::string OpenBlasCore() {
  using CoreName = char* (*)();
  const auto name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return name ? std::string(name()) : std::string();
}

// The OPENBLAS_CORETYPE whose kernels this CPU runs best, or nullptr when Prescott is all it has.
const char* WidestOpenBlasCore() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

void RestartWithOpenBlasKernelsForThisCpu(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice stands
  const std::string core = OpenBlasCore();
  if (strcasecmp(core.c_str(), "Prescott") != 0) return;
  const char* widest = WidestOpenBlasCore();
  if (widest == nullptr) return;
  std::fprintf(stderr,
               "OpenBLAS does not know this CPU and chose its Prescott (SSE3) kernels; restarting "
               "with OPENBLAS_CORETYPE=%s\n",
               widest);
  std::fflush(stderr);
  setenv("OPENBLAS_CORETYPE", widest, 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "restart failed (%s); going on with the Prescott kernels\n",
               std::strerror(errno));
}

std::string DescribeBlas() {
  const std::string path = LoadedBlasLibrary();
  if (path.empty()) return "no BLAS library loaded (libtorch uses its own kernels)";
  if (path.find("openblas") != std::string::npos) {
    const std::string core = OpenBlasCore();
    return "OpenBLAS" + (core.empty() ? "" : ", " + core + " kernels") + " (" + path + ")";
  }
  if (path.find("blis") != std::string::npos) return "BLIS (" + path + ")";
  if (path.find("mkl") != std::string::npos) return "MKL (" + path + ")";
  return "reference BLAS (" + path +
         "): several times slower; install libopenblas0-pthread (make setup does)";
}

bool UseSingleThreadedBlas() {
  using SetThreads = void (*)(int);
  const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) return false;
  set(1);
  return true;
}

}  // namespace posenc::study
