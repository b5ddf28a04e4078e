#include "output_limit.h"

#include <cstdio>

#include "numbers.h"
#include "posenc/error.h"

namespace posenc::cli {

void OutputLimit::AddTo(CLI::App* command) {
  command
      ->add_option("--max-output-bytes", bytes,
                   "Refuse outputs larger than this (checked before anything is allocated)")
      ->transform(DecimalInteger(1))
      ->capture_default_str();
}

void OutputLimit::Check(std::string_view command, std::string_view what, double count,
                        double bytes_per_item) const {
  // In double: exact up to 2^53 and never overflowing, so a huge request cannot wrap to a small
  // size; the limit is far below 2^53.
  const double needed = count * bytes_per_item;
  if (needed <= static_cast<double>(bytes)) return;
  char got[96];
  std::snprintf(got, sizeof got, "%.0f items, about %.3g bytes", count, needed);
  Require(false, command, what,
          "give an output of at most " + std::to_string(bytes) +
              " bytes (--max-output-bytes raises the limit)",
          got);
}

}  // namespace posenc::cli
