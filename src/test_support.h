// Helpers shared by the unit tests (src/*_test.cc); not part of the library.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "posenc/error.h"

namespace posenc::testing_support {

// Expects `call` to throw posenc::Error with exactly `message`.
template <typename F>
void ExpectError(F&& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "expected posenc::Error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// n standard normal floats from a fixed seed: the same inputs on every run and machine
// (std::mt19937 and std::normal_distribution as libstdc++ implements them).
inline std::vector<float> RandomNormal(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// A JSON file, parsed; a missing file fails the test (and parses as null).
inline nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
}

// A file of tests/golden/ ("model_positions/deepseek-v3.json"), parsed.
inline nlohmann::json GoldenJson(const std::string& relative_path) {
  return ReadJsonFile(std::string(POSENC_GOLDEN_DIR) + "/" + relative_path);
}

// The path of a config in tests/configs/ ("llama2-7b.json", "real/smollm3-3b-base.json").
inline std::string ConfigPath(const std::string& name) {
  return std::string(POSENC_GOLDEN_DIR) + "/../configs/" + name;
}

// A path private to this process and test, removed when the test ends, pass or fail.
class TempFile {
 public:
  explicit TempFile(const std::string& name) {
    const auto* test = testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::path(testing::TempDir()) /
             ("posenc_" + std::to_string(getpid()) + "_" + test->name() + "_" + name))
                .string();
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace posenc::testing_support
