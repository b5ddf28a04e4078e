// Reading Hugging Face config.json values: typed access with errors that name the key as written
// in the file (with its dotted path) and show the offending value as JSON. Internal to the
// config reader (src/models/).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "posenc/error.h"

namespace posenc::hf_json {

using Json = nlohmann::json;

inline constexpr const char* kFn = "hf_config";
inline constexpr size_t kMaxBytes = size_t{64} << 20;  // real configs are a few kB
inline constexpr int kMaxDepth = 64;                   // real configs nest 3 or 4 levels
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
inline constexpr int64_t kMaxHeads = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxPositions = int64_t{1} << 53;  // exact in double

template <size_t N>
bool In(std::string_view value, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), value) != std::end(list);
}

inline std::string Format(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Errors name the key as written in the file and show the value as JSON.

inline std::string Shown(const Json* value) {
  if (value == nullptr) return "nothing (the key is missing)";
  std::string text = value->dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

[[noreturn]] inline void Fail(std::string_view key, std::string_view rule, const Json* value) {
  throw Error(ErrorMessage(kFn, key, rule, Shown(value)));
}

// A JSON object and the dotted path it sits at ("" at the top, "rope_scaling." below it).
struct Node {
  const Json& object;
  std::string path;

  std::string Key(std::string_view key) const { return path + std::string(key); }
  const Json* Find(std::string_view key) const {
    const auto it = object.find(std::string(key));
    return it == object.end() ? nullptr : &*it;
  }
  // Present and not null: Hugging Face's config classes treat null as absent.
  const Json* Value(std::string_view key) const {
    const Json* value = Find(key);
    return value != nullptr && !value->is_null() ? value : nullptr;
  }
};

inline const Json& EmptyObject() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

// A finite number that satisfies `ok`; rule reads "be a number >= 1" etc.
template <typename Ok>
double AsNumber(const Node& node, std::string_view key, const Json& value, std::string_view rule,
                Ok ok) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || !ok(value.get<double>())) {
    Fail(node.Key(key), rule, &value);
  }
  return value.get<double>();
}

template <typename Ok>
std::optional<double> OptionalNumber(const Node& node, std::string_view key, std::string_view rule,
                                     Ok ok) {
  const Json* value = node.Value(key);
  if (value == nullptr) return std::nullopt;
  return AsNumber(node, key, *value, rule, ok);
}

template <typename Ok>
double RequiredNumber(const Node& node, std::string_view key, std::string_view rule, Ok ok) {
  const Json* value = node.Value(key);
  if (value == nullptr) Fail(node.Key(key), rule, node.Find(key));
  return AsNumber(node, key, *value, rule, ok);
}

inline std::string IntRule(int64_t lo, int64_t hi) {
  return "be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// Integers may be written as 4096 or 4096.0 (Python writes both); nothing else.
inline std::optional<int64_t> OptionalInt(const Node& node, std::string_view key, int64_t lo,
                                          int64_t hi) {
  const Json* value = node.Value(key);
  if (value == nullptr) return std::nullopt;
  const bool integral = value->is_number() && std::isfinite(value->get<double>()) &&
                        std::trunc(value->get<double>()) == value->get<double>();
  if (!integral) Fail(node.Key(key), IntRule(lo, hi), value);
  const double v = value->get<double>();
  if (v < static_cast<double>(lo) || v > static_cast<double>(hi)) {
    Fail(node.Key(key), IntRule(lo, hi), value);
  }
  return value->is_number_float() ? static_cast<int64_t>(v) : value->get<int64_t>();
}

inline int64_t RequiredInt(const Node& node, std::string_view key, int64_t lo, int64_t hi) {
  const std::optional<int64_t> value = OptionalInt(node, key, lo, hi);
  if (!value) Fail(node.Key(key), IntRule(lo, hi), node.Find(key));
  return *value;
}

// The first of several spellings of one key that the config has (e.g. n_head for GPT-J).
inline std::string_view FirstKey(const Node& node, std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys) {
    if (node.Value(key) != nullptr) return key;
  }
  return *keys.begin();
}

inline std::optional<std::string> OptionalString(const Node& node, std::string_view key) {
  const Json* value = node.Value(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) Fail(node.Key(key), "be a string", value);
  return value->get<std::string>();
}

inline const auto kPositive = [](double v) { return v > 0; };
inline const auto kAtLeastOne = [](double v) { return v >= 1; };
inline const auto kNonNegative = [](double v) { return v >= 0; };
inline const auto kUnitInterval = [](double v) { return v > 0 && v <= 1; };

// ---------------------------------------------------------------------------------------------
// Hostile input is rejected before the parser sees it: nlohmann's dump and comparisons recurse.

inline void CheckShape(std::string_view text) {
  Require(text.size() <= kMaxBytes, kFn, "config", "be at most 64 MiB",
          std::to_string(text.size()) + " bytes");
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      Require(++depth <= kMaxDepth, kFn, "config", "nest at most 64 levels deep", "deeper nesting");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace posenc::hf_json
