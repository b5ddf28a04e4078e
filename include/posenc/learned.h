// Learned absolute positions (GPT-2 style): one trained vector per position, up to a fixed
// length. The table is row-major [max_positions, d_model]; position p reads row p. There is no row
// for p >= max_positions (GPT-2 has 1024 rows: the 1,025th token has no position vector), so such a
// position is an error, never a silent wrap or clamp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace posenc {

class LearnedPositions {
 public:
  // A zero table of max_positions rows of width d_model (both > 0).
  LearnedPositions(int64_t max_positions, int64_t d_model);

  // A table drawn from N(0, stddev^2) (stddev finite and > 0; 0.02 is GPT-2's) with a fixed seed:
  // std::mt19937_64(seed) feeds std::normal_distribution<double>, filled in row-major order, so
  // runs are reproducible.
  static LearnedPositions Random(int64_t max_positions, int64_t d_model, uint64_t seed,
                                 double stddev = 0.02);

  // A table loaded from a 2-D float32 (or float64) .npy file [max_positions, d_model]; any other
  // shape, an empty table or an unreadable file is a posenc::Error naming the path.
  static LearnedPositions Load(const std::string& path);
  // Saves the table as a float32 .npy file [max_positions, d_model], readable by numpy.load.
  void Save(const std::string& path) const;

  int64_t max_positions() const { return max_positions_; }
  int64_t d_model() const { return d_model_; }
  std::span<float> table() { return table_; }
  std::span<const float> table() const { return table_; }
  std::span<const float> Row(int64_t pos) const;  // validated
  std::span<float> grad() { return grad_; }
  std::span<const float> grad() const { return grad_; }

  // Forward: out[t] = table[positions[t]]; out is [positions.size(), d_model].
  void Lookup(std::span<const int64_t> positions, std::span<float> out) const;

  // Backward: grad[positions[t]] += grad_out[t]; grad_out is [positions.size(), d_model].
  // Repeated positions accumulate. Everything is validated before grad is touched.
  void AccumulateGradient(std::span<const int64_t> positions, std::span<const float> grad_out);
  void ZeroGradient();

  // Throws posenc::Error, naming `function` and the token, unless every position is in
  // [0, max_positions). Public so that callers that read rows (EmbedTokens) validate up front.
  void CheckPositions(std::string_view function, std::span<const int64_t> positions) const;

 private:
  int64_t max_positions_;
  int64_t d_model_;
  std::vector<float> table_;
  std::vector<float> grad_;
};

// The same forward and backward on a table the caller owns (a torch Parameter, a mapped file):
// table and grad are row-major [max_positions, d_model] with max_positions = size / d_model.
// Validated as the methods are (d_model > 0, sizes, every position in range) before any write.
void LookupLearnedRows(std::span<const float> table, int64_t d_model,
                       std::span<const int64_t> positions, std::span<float> out);
void AccumulateLearnedGradient(std::span<float> grad, int64_t d_model,
                               std::span<const int64_t> positions, std::span<const float> grad_out);

}  // namespace posenc
