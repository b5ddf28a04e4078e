// Helpers shared by the unit tests (src/*_test.cc); not part of the library.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "posenc/batch.h"
#include "posenc/error.h"
#include "posenc/heads.h"

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

// A batch of two elements sharing q, k, v and the positions `pos` (of q's and k's tokens), whose
// second element's key positions hold a bad one: attend(q, k, v, query_pos, key_pos, out), an
// attention call on Batched views, must refuse the batch with Attention's message for element 1
// before writing either element's output.
template <typename Attend>
void ExpectBadSecondElementRefusedBeforeWriting(Heads<const float> q, Heads<const float> k,
                                                Heads<const float> v,
                                                const std::vector<int64_t>& pos, Attend&& attend) {
  const int64_t out_floats = q.tokens * q.num_heads * v.head_dim;
  std::vector<float> outs(static_cast<size_t>(2 * out_floats), 7.0f);
  std::vector<int64_t> key_pos = pos;
  key_pos.insert(key_pos.end(), pos.begin(), pos.end());
  key_pos[pos.size() + 1] = -1;
  const Batched<Heads<const float>> qs(q, {2}, {0}), ks(k, {2}, {0}), vs(v, {2}, {0});
  const Batched<Heads<float>> out_batch(
      Heads<float>::Dense(outs.data(), q.tokens, q.num_heads, v.head_dim), {2}, {out_floats});
  const auto tokens = static_cast<int64_t>(pos.size());
  const BatchedPositions key_batch(std::span<const int64_t>(key_pos).first(pos.size()), {2},
                                   {tokens});
  ExpectError([&] { attend(qs, ks, vs, BatchedPositions(pos), key_batch, out_batch); },
              "[attention] key_pos[1] must be >= 0, got -1 (in batch element 1)");
  for (const float x : outs) ASSERT_EQ(x, 7.0f);
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
