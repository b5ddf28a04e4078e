#include "posenc/embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "posenc/error.h"

namespace posenc {
namespace {

// A three-word vocabulary of width 2: 0 "the", 1 "dog", 2 "ran".
constexpr float kVocab[] = {0.9f, -0.1f, 0.3f, 0.7f, -0.6f, 0.2f};
constexpr int64_t kDog = 1;

TokenTable Vocab() { return {.data = kVocab, .vocab_size = 3, .d_model = 2}; }

// A 5-row learned table with position 1 = [0.1, -0.2] and position 4 = [-0.5, 0.0].
LearnedPositions LessonTable() {
  LearnedPositions table(5, 2);
  const float rows[5][2] = {{0.0f, 0.0f}, {0.1f, -0.2f}, {0.8f, 0.8f}, {0.4f, 0.4f}, {-0.5f, 0.0f}};
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 2; ++c) table.table()[r * 2 + c] = rows[r][c];
  }
  return table;
}

TEST(EmbedTokens, SameWordAtTwoPositionsGetsTwoVectors) {
  // "dog" = [0.3, 0.7] at position 1 -> [0.4, 0.5]; at position 4 -> [-0.2, 0.7].
  const LearnedPositions table = LessonTable();
  const std::vector<int64_t> ids{kDog, kDog};
  const std::vector<int64_t> positions{1, 4};
  std::vector<float> out(2 * 2);
  EmbedTokens(Vocab(), ids, positions, std::cref(table), out);
  EXPECT_FLOAT_EQ(out[0], 0.4f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
  EXPECT_FLOAT_EQ(out[2], -0.2f);
  EXPECT_FLOAT_EQ(out[3], 0.7f);
}

TEST(EmbedTokens, SinusoidalAddsTheLiteralVectors) {
  // Width 4; PE(1) = [sin 1, cos 1, sin 0.01, cos 0.01], PE(2) likewise at 2 and 0.02.
  const std::vector<float> vocab{1, 2, 3, 4, -1, -2, -3, -4};
  const TokenTable tokens{.data = vocab, .vocab_size = 2, .d_model = 4};
  const std::vector<int64_t> ids{1, 0, 1};
  const std::vector<int64_t> positions{2, 0, 1};
  std::vector<float> out(3 * 4);
  EmbedTokens(tokens, ids, positions, Sinusoidal{.dim = 4}, out);
  const double expected[3][4] = {
      {-1 + 0.9092974268256817, -2 - 0.4161468365471424, -3 + 0.01999866669333308,
       -4 + 0.9998000066665778},
      {1 + 0.0, 2 + 1.0, 3 + 0.0, 4 + 1.0},
      {-1 + 0.8414709848078965, -2 + 0.5403023058681398, -3 + 0.009999833334166664,
       -4 + 0.9999500004166653},
  };
  for (int t = 0; t < 3; ++t) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(out[t * 4 + j], expected[t][j], 1e-6);
  }
}

TEST(EmbedTokens, SinusoidalEqualsTokenRowPlusSinusoidalValue) {
  constexpr int64_t kVocabSize = 7, kWidth = 10;
  std::vector<float> vocab(kVocabSize * kWidth);
  for (size_t i = 0; i < vocab.size(); ++i) vocab[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  const TokenTable tokens{.data = vocab, .vocab_size = kVocabSize, .d_model = kWidth};
  const std::vector<int64_t> ids{6, 0, 3, 3, 5};
  const std::vector<int64_t> positions{0, 17, 1000, 99999, 3};
  const Sinusoidal spec{.dim = kWidth, .base = 500.0};
  std::vector<float> out(ids.size() * kWidth);
  EmbedTokens(tokens, ids, positions, spec, out);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t j = 0; j < kWidth; ++j) {
      const double expected = vocab[ids[t] * kWidth + j] + SinusoidalValue(spec, positions[t], j);
      EXPECT_NEAR(out[t * kWidth + j], expected, 1e-6) << "token " << t << " column " << j;
    }
  }
}

// Each bad call must throw posenc::Error with `message` and leave out as it was.
void ExpectRejected(const TokenTable& tokens, std::span<const int64_t> ids,
                    std::span<const int64_t> positions, const AbsolutePositions& scheme,
                    size_t out_size, const std::string& message) {
  std::vector<float> out(out_size, -7.0f);
  try {
    EmbedTokens(tokens, ids, positions, scheme, out);
    ADD_FAILURE() << "expected posenc::Error: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  EXPECT_EQ(out, std::vector<float>(out_size, -7.0f)) << message;
}

TEST(EmbedTokens, BadInputsThrowAndLeaveOutUntouched) {
  const LearnedPositions table = LessonTable();
  const auto learned = std::cref(table);
  const Sinusoidal sinusoidal{.dim = 2};
  const std::vector<int64_t> two{0, 1};
  ExpectRejected(Vocab(), std::vector<int64_t>{kDog, 3}, two, learned, 4,
                 "[embed_tokens] ids[1] must be < vocab_size (3), got 3");
  ExpectRejected(Vocab(), std::vector<int64_t>{-1, kDog}, two, sinusoidal, 4,
                 "[embed_tokens] ids[0] must be >= 0, got -1");
  ExpectRejected(Vocab(), two, std::vector<int64_t>{5, 0}, learned, 4,
                 "[embed_tokens] positions[0] must be < max_positions (5), got 5");
  ExpectRejected(Vocab(), two, std::vector<int64_t>{0, -2}, sinusoidal, 4,
                 "[embed_tokens] positions[1] must be >= 0, got -2");
  ExpectRejected(Vocab(), two, std::vector<int64_t>{0}, learned, 4,
                 "[embed_tokens] positions.size() must equal the number of tokens (2), got 1");
  ExpectRejected(Vocab(), two, two, learned, 5,
                 "[embed_tokens] out.size() must equal tokens (2) * d_model (2), got 5");
  ExpectRejected(Vocab(), two, two, Sinusoidal{.dim = 4}, 4,
                 "[embed_tokens] sinusoidal dim must equal tokens.d_model (2), got 4");
  ExpectRejected(Vocab(), two, two, Sinusoidal{.dim = 2, .base = 0.5}, 4,
                 "[sinusoidal] base must be finite and > 1, got 0.5");

  const LearnedPositions wide(5, 3);
  ExpectRejected(Vocab(), two, two, std::cref(wide), 4,
                 "[embed_tokens] learned d_model must equal tokens.d_model (2), got 3");

  const TokenTable short_table{.data = kVocab, .vocab_size = 4, .d_model = 2};
  ExpectRejected(short_table, two, two, learned, 4,
                 "[embed_tokens] tokens.data.size() must equal vocab_size (4) * d_model (2), "
                 "got 6");
  const TokenTable no_width{.data = kVocab, .vocab_size = 3, .d_model = 0};
  ExpectRejected(no_width, two, two, learned, 4,
                 "[embed_tokens] tokens.d_model must be > 0, got 0");
}

TEST(EmbedTokens, NoTokensWritesNothing) {
  const LearnedPositions table = LessonTable();
  EXPECT_NO_THROW(EmbedTokens(Vocab(), {}, {}, std::cref(table), std::span<float>()));
  EXPECT_NO_THROW(EmbedTokens(Vocab(), {}, {}, Sinusoidal{.dim = 2}, std::span<float>()));
}

}  // namespace
}  // namespace posenc
