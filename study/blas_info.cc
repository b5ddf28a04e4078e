#include "blas_info.h"

#include <dlfcn.h>
#include <link.h>

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

std::string DescribeBlas() {
  const std::string path = LoadedBlasLibrary();
  if (path.empty()) return "no BLAS library loaded (libtorch uses its own kernels)";
  if (path.find("openblas") != std::string::npos) return "OpenBLAS (" + path + ")";
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
