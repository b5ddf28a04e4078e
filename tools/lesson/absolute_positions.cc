// (b) Absolute positions are seat numbers added to the token vectors; (c) a learned table has a
// fixed number of seats.
#include <cmath>

#include "lesson/section.h"
#include "posenc/embedding.h"
#include "posenc/error.h"
#include "posenc/learned.h"

namespace posenc::lesson {

Section SeatNumbers() {
  Section s{.id = "b", .title = "Seat numbers: token plus position"};
  // A one-word vocabulary and a 5-seat learned table with the lesson's vectors at seats 1 and 4.
  const std::vector<float> vocabulary = {0.3f, 0.7f};  // "dog"
  LearnedPositions seats(5, 2);
  seats.table()[1 * 2 + 0] = 0.1f;
  seats.table()[1 * 2 + 1] = -0.2f;
  seats.table()[4 * 2 + 0] = -0.5f;
  seats.table()[4 * 2 + 1] = 0.0f;

  const std::vector<int64_t> ids = {0, 0}, positions = {1, 4};
  std::vector<float> x(2 * 2);
  EmbedTokens({vocabulary, 1, 2}, ids, positions, std::cref(seats), x);
  const std::span<const float> at1(x.data(), 2), at4(x.data() + 2, 2);
  s.lines.push_back("\"dog\" = [0.3, 0.7]; position 1 = [0.1, -0.2]; position 4 = [-0.5, 0]");
  s.lines.push_back("dog at position 1: " + FormatVector(at1));
  s.lines.push_back("dog at position 4: " + FormatVector(at4));
  s.lines.push_back(
      "Same word, different seat, different vector: attention can now tell them apart.");
  auto near = [](std::span<const float> v, float a, float b) {
    return std::fabs(v[0] - a) < 1e-6f && std::fabs(v[1] - b) < 1e-6f;
  };
  s.checks.push_back({"dog at position 1 is [0.4, 0.5]", near(at1, 0.4f, 0.5f)});
  s.checks.push_back({"dog at position 4 is [-0.2, 0.7]", near(at4, -0.2f, 0.7f)});
  s.numbers["dog_at_1"] = std::vector<float>(at1.begin(), at1.end());
  s.numbers["dog_at_4"] = std::vector<float>(at4.begin(), at4.end());
  return s;
}

Section LearnedTableLimit() {
  Section s{.id = "c", .title = "A learned table has a fixed number of seats"};
  const auto table = LearnedPositions::Random(1024, 768, 2024);  // GPT-2 small: 1024 x 768
  std::vector<float> row(768);
  const std::vector<int64_t> last = {1023}, past = {1024};
  table.Lookup(last, row);
  s.lines.push_back("GPT-2-sized table: 1024 positions x 768.");
  s.lines.push_back("position 1023 (the 1,024th token): a vector, first values " +
                    FormatVector(std::span<const float>(row.data(), 3)));
  std::string message;
  try {
    table.Lookup(past, row);
  } catch (const Error& e) {
    message = e.what();
  }
  s.lines.push_back("position 1024 (the 1,025th token): error");
  s.lines.push_back("  " + message);
  s.lines.push_back("Nothing was trained for that seat, so there is nothing to look up.");
  s.checks.push_back({"position 1024 of a 1024-position table is a clear error",
                      message.find("1024") != std::string::npos});
  s.numbers["max_positions"] = 1024;
  s.numbers["error"] = message;
  return s;
}

}  // namespace posenc::lesson
