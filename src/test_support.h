// Helpers shared by the unit tests (src/*_test.cc); not part of the library.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

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
