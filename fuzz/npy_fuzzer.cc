// libFuzzer target for the .npy reader: any byte string, written to a file, must either read as
// an array of product(shape) floats or be rejected with posenc::Error. Anything else (another
// exception, a crash, an allocation past the file's size, undefined behaviour under ASan +
// UBSan) is a bug; its input goes into fuzz/npy_regressions once fixed. ReadNpy takes a path, so
// the input goes through a file, as it does for a user: the reader's stat, header and data reads
// are all exercised.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "posenc/error.h"
#include "posenc/npy.h"

namespace {

// One file per fuzzing process, rewritten for every input and removed at exit.
const std::string& InputPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr ? dir : "/tmp") + "/posenc_npy_fuzzer_" +
                    std::to_string(::getpid()) + ".npy";
    std::atexit([] { std::remove(InputPath().c_str()); });
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = InputPath();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  if (std::fclose(file) != 0) std::abort();
  try {
    // A cap of 1 MiB: inputs are far smaller, and the cap's own check is exercised too.
    const posenc::NpyArray array = posenc::ReadNpy(path, uint64_t{1} << 20);
    size_t count = 1;
    for (const int64_t extent : array.shape) count *= static_cast<size_t>(extent);
    if (count != array.data.size()) std::abort();
  } catch (const posenc::Error&) {
    // The documented outcome for bad input.
  }
  return 0;
}
