// Errors: one exception type for every bad argument, thrown at the public boundary.
//
// Messages follow one pattern so that a user can act on them without reading our code:
//   "[function] parameter must <rule>, got <value>"
// e.g. "[rope] rotary_dim must be even and <= head_dim, got 65". Kernels behind the boundary
// assume validated input; in-place operations validate everything before touching memory.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace posenc {

class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Builds the canonical message; `value` is anything printable with operator<<.
template <typename T>
[[nodiscard]] std::string ErrorMessage(std::string_view function, std::string_view parameter,
                                       std::string_view rule, const T& value) {
  std::ostringstream out;
  out.precision(17);
  out << '[' << function << "] " << parameter << " must " << rule << ", got " << value;
  return out.str();
}

// Throws posenc::Error with the canonical message unless `ok`.
template <typename T>
void Require(bool ok, std::string_view function, std::string_view parameter, std::string_view rule,
             const T& value) {
  if (!ok) throw Error(ErrorMessage(function, parameter, rule, value));
}

}  // namespace posenc
