#include "numbers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <system_error>
#include <variant>

namespace posenc::cli {
namespace {

// The value as the user wrote it, in quotes so that "" and spaces show.
std::string Got(const std::string& text) { return "got '" + text + "'"; }

std::string Range(int64_t min, int64_t max) {
  return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string Range(double min, double max) {
  char text[80];
  std::snprintf(text, sizeof text, "[%.17g, %.17g]", min, max);
  return text;
}

// Parses all of text with from_chars (locale-independent, decimal only); false on any leftover.
template <typename T>
bool ParseWhole(const std::string& text, T& value, std::errc& error) {
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  error = ec;
  return ec == std::errc() && stop == end;
}

// The value of text, or the message that says why it is not a decimal integer in [min, max].
std::variant<int64_t, std::string> ParseDecimal(const std::string& text, int64_t min, int64_t max) {
  const std::string rule = "must be a decimal integer in " + Range(min, max);
  int64_t value = 0;
  std::errc error{};
  if (!ParseWhole(text, value, error)) {
    return rule +
           (error == std::errc::result_out_of_range ? " (it does not fit in 64 bits), " : ", ") +
           Got(text);
  }
  if (value < min || value > max) return rule + ", " + Got(text);
  return value;
}

}  // namespace

CLI::Validator DecimalInteger(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const auto parsed = ParseDecimal(text, min, max);
        if (const auto* message = std::get_if<std::string>(&parsed)) return *message;
        text = std::to_string(std::get<int64_t>(parsed));
        return {};
      },
      "INT in " + Range(min, max), "DecimalInteger");
}

CLI::Option* AddIntegerList(CLI::App* command, const std::string& name,
                            std::vector<int64_t>& values, const std::string& description,
                            int64_t min, int64_t max) {
  const CLI::callback_t parse = [&values, name, min, max](const CLI::results_t& results) {
    for (const std::string& result : results) {
      size_t start = 0;
      while (true) {
        const size_t comma = std::min(result.find(',', start), result.size());
        const auto parsed = ParseDecimal(result.substr(start, comma - start), min, max);
        if (const auto* message = std::get_if<std::string>(&parsed)) {
          throw CLI::ValidationError(name, *message);
        }
        values.push_back(std::get<int64_t>(parsed));
        if (comma == result.size()) break;
        start = comma + 1;
      }
    }
    return true;
  };
  return command->add_option(name, parse, description)
      ->type_name("INT,INT,... in " + Range(min, max))
      ->expected(1);
}

CLI::Validator FiniteNumber(double min, double max) {
  const std::string rule = "must be a finite decimal number in " + Range(min, max);
  return CLI::Validator(
      [min, max, rule](std::string& text) -> std::string {
        double value = 0;
        std::errc error{};
        if (!ParseWhole(text, value, error) || !std::isfinite(value) || value < min ||
            value > max) {
          return rule + ", " + Got(text);
        }
        char canonical[32];
        std::snprintf(canonical, sizeof canonical, "%.17g", value);
        text = canonical;
        return {};
      },
      "NUMBER", "FiniteNumber");
}

}  // namespace posenc::cli
