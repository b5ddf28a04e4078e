// The most a command may write or hold in memory for its output, checked before anything is
// allocated: a typo such as `--positions 200000000` is a clear error, not gigabytes of memory and
// then std::bad_alloc. `--max-output-bytes` raises it.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace posenc::cli {

struct OutputLimit {
  static constexpr int64_t kDefaultBytes = int64_t{1} << 30;  // 1 GiB
  int64_t bytes = kDefaultBytes;

  void AddTo(CLI::App* command);

  // Throws posenc::Error naming the command, what sets the size and the limit unless
  // count * bytes_per_item <= bytes (computed without overflow).
  void Check(std::string_view command, std::string_view what, double count,
             double bytes_per_item) const;
};

}  // namespace posenc::cli
