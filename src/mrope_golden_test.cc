// Multi-stream RoPE (posenc/mrope.h) against the Hugging Face reference code
// (tests/golden/mrope/, SOURCES.md): Qwen2-VL block and Qwen3-VL interleaved M-RoPE on text,
// image and large positions, and the vision-tower builders with their positions
// (posenc/vision_positions.h), in float32 and double storage.
//
// Each file holds the reference's output twice: as it runs (float32 angles) and with every step
// in float64. posenc forms angles in double, so the float64 file is the truth it is held to:
// within float32 rounding for float storage, within double rounding of the angle for double.
// Against the float32 file it may differ by the reference's own angle error, a few float32 ulps
// of the angle (0.01 rad at 2^17), which the test allows and no more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"
#include "posenc/vision_positions.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using nlohmann::json;
using testing_support::ForEachSimdTarget;
using testing_support::GoldenJson;

// Float32 values are stored with 9 significant digits: parsed as double, then rounded to float,
// they are the exact float32 inputs the reference used.
std::vector<float> Floats(const json& a) {
  std::vector<float> v;
  for (const json& x : a) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}
std::vector<double> Doubles(const json& a) { return a.get<std::vector<double>>(); }
std::vector<double> Widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// [streams][tokens] nested arrays to one [streams, tokens] row-major array.
std::vector<int64_t> DenseStreams(const json& streams) {
  std::vector<int64_t> data;
  for (const json& s : streams) {
    for (const json& p : s) data.push_back(p.get<int64_t>());
  }
  return data;
}

// Tolerances per storage type, relative to the norm of the row (one token, one head):
// float32 storage rounds cos, sin (2 ulps, rope.h) and the rotated values; double storage
// differs from the float64 reference only by the rounding of inv_freq (posenc forms
// theta^(-2j/d) with pow, the reference 1 / theta^(2j/d)), which the angle multiplies by the
// position.
double Float32Tolerance() { return 4.0 * 0x1p-24; }
double DoubleTolerance(int64_t max_pos) { return 1e-16 * static_cast<double>(max_pos) + 1e-15; }
// The float32 reference forms each angle as a float32 product of float32 inv_freq and position:
// off by up to about 2 ulps of the angle, plus its own float32 rounding of the rotation.
double HfFloat32Tolerance(int64_t max_pos) {
  return 4.0 * 0x1p-24 * static_cast<double>(max_pos) + Float32Tolerance();
}

// Largest position of token t in any stream.
int64_t MaxPosition(const PositionStreams& p, int64_t t) {
  int64_t m = 0;
  for (int64_t s = 0; s < p.num_streams; ++s) m = std::max(m, p.At(s, t));
  return m;
}

// Expects got[t][h][:] within tolerance(t) * |want row| of want, for every row.
template <typename T, typename Tol>
void ExpectRowsNear(const std::vector<T>& got, const std::vector<double>& want, int64_t tokens,
                    int64_t heads, int64_t head_dim, Tol tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(static_cast<int64_t>(want.size()), tokens * heads * head_dim) << what;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = (t * heads + h) * head_dim;
      double norm = 0, err = 0;
      for (int64_t d = 0; d < head_dim; ++d) {
        norm += want[row + d] * want[row + d];
        err = std::max(err, std::abs(static_cast<double>(got[row + d]) - want[row + d]));
      }
      EXPECT_LE(err, tolerance(t) * std::sqrt(norm)) << what << " token " << t << " head " << h;
    }
  }
}

// One golden tensor (q or k) rotated by posenc in T storage, in place and out of place.
template <typename T>
std::vector<T> Rotated(const MRope& m, const PositionStreams& p, const std::vector<float>& in,
                       int64_t heads, int64_t head_dim) {
  std::vector<T> x(in.begin(), in.end());
  std::vector<T> out(x.size());
  ApplyMRope<T>(m, p, Heads<const T>::Dense(x.data(), p.tokens, heads, head_dim),
                Heads<T>::Dense(out.data(), p.tokens, heads, head_dim));
  ApplyMRope<T>(m, p, Heads<T>::Dense(x.data(), p.tokens, heads, head_dim));
  EXPECT_EQ(x, out) << "in place and out of place differ";
  return out;
}

// q (and k where the file has its own) of a text file, rotated by `m` and compared with both
// reference outputs; q and k also in one call.
void CheckTextFile(const MRope& m, const json& g) {
  const std::string name = g["name"];
  const int64_t head_dim = g["head_dim"], tokens = g["tokens"];
  const std::vector<int64_t> pos_data = DenseStreams(g["positions"]);
  const PositionStreams p = PositionStreams::Dense(pos_data.data(), 3, tokens);
  auto f32_tol = [](int64_t) { return Float32Tolerance(); };
  auto f64_tol = [&](int64_t t) { return DoubleTolerance(MaxPosition(p, t)); };
  auto hf_tol = [&](int64_t t) { return HfFloat32Tolerance(MaxPosition(p, t)); };

  std::vector<std::string> tensors = {"q"};
  if (g["num_heads_k"].get<int64_t>() > 0) tensors.push_back("k");
  for (const std::string& x : tensors) {
    const int64_t heads = g["num_heads_" + x];
    const std::vector<float> in = Floats(g[x]);
    const std::vector<double> want64 = Doubles(g[x + "_out_f64"]);
    const std::vector<double> want32 = Widened(Floats(g[x + "_out_f32"]));
    const std::vector<float> got32 = Rotated<float>(m, p, in, heads, head_dim);
    const std::vector<double> got64 = Rotated<double>(m, p, in, heads, head_dim);
    ExpectRowsNear(got32, want64, tokens, heads, head_dim, f32_tol, name + " " + x + " f32 vs f64");
    ExpectRowsNear(got64, want64, tokens, heads, head_dim, f64_tol, name + " " + x + " f64");
    ExpectRowsNear(got32, want32, tokens, heads, head_dim, hf_tol, name + " " + x + " f32 vs HF");
  }
  if (tensors.size() == 2) {
    std::vector<float> q = Floats(g["q"]), k = Floats(g["k"]);
    const int64_t hq = g["num_heads_q"], hk = g["num_heads_k"];
    ApplyMRope<float>(m, p, Heads<float>::Dense(q.data(), tokens, hq, head_dim),
                      Heads<float>::Dense(k.data(), tokens, hk, head_dim));
    EXPECT_EQ(q, Rotated<float>(m, p, Floats(g["q"]), hq, head_dim)) << name;
    EXPECT_EQ(k, Rotated<float>(m, p, Floats(g["k"]), hk, head_dim)) << name;
  }
}

// The relative error of the reference's float32 frequency f = 1 / theta^x: x = 2j / d is rounded
// to float32 first (unless d is a power of two), which moves theta^x by ln(theta) x = |ln f|
// float32 ulps at most, and pow, the division and the rounding add about 3 more.
double HfFloat32FrequencyError(double f) { return (std::abs(std::log(f)) + 3.0) * 0x1p-24; }

// inv_freq against the reference's float64 values (a few double ulps: pow against 1 / pow) and
// its float32 values.
void ExpectInvFreq(const std::vector<double>& got, const json& f64, const json& f32,
                   const std::string& what) {
  const std::vector<double> want64 = Doubles(f64);
  const std::vector<float> want32 = Floats(f32);
  ASSERT_EQ(got.size(), want64.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want64[i], 4e-16 * want64[i]) << what << " pair " << i;
    EXPECT_NEAR(got[i], want32[i], HfFloat32FrequencyError(got[i]) * got[i])
        << what << " pair " << i;
  }
}

MRope TextMRope(const json& g, MropeSections layout) {
  return MRope::Sections(Rope::Default(g["head_dim"], g["theta"]),
                         g["mrope_section"].get<std::vector<int64_t>>(), layout);
}

TEST(MRopeGolden, Qwen2VlBlocksMatchTheReferenceOnTextImageAndLargePositions) {
  for (const char* file : {"mrope/qwen2_vl_text.json", "mrope/qwen2_vl_text_small.json"}) {
    const json g = GoldenJson(file);
    const MRope m = TextMRope(g, MropeSections::kBlocks);
    ExpectInvFreq(m.rope.inv_freq, g["inv_freq_f64"], g["inv_freq_f32"], file);
    ForEachSimdTarget([&](int64_t) { CheckTextFile(m, g); });
  }
}

TEST(MRopeGolden, Qwen3VlInterleavedMatchesTheReference) {
  for (const char* file : {"mrope/qwen3_vl_text.json", "mrope/qwen3_vl_text_small.json"}) {
    const json g = GoldenJson(file);
    const MRope m = TextMRope(g, MropeSections::kInterleaved);
    ExpectInvFreq(m.rope.inv_freq, g["inv_freq_f64"], g["inv_freq_f32"], file);
    ForEachSimdTarget([&](int64_t) { CheckTextFile(m, g); });
  }
}

TEST(MRopeGolden, InterleavedSectionsPastThePairsFollowTheReference) {
  // [2, 3, 3] over 8 pairs: the reference's slices give height 1, 4, 7, width 2, 5 (its slice
  // stops at the last pair) and time 0, 3, 6, so no stream gets its section's count. Sections
  // follows the reference's rule rather than the counts, and reproduces its numbers.
  const json g = GoldenJson("mrope/qwen3_vl_text_uneven.json");
  const MRope m = TextMRope(g, MropeSections::kInterleaved);
  EXPECT_EQ(m.pair_stream, (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  ForEachSimdTarget([&](int64_t) { CheckTextFile(m, g); });
}

// The angles of every token and pair, inv_freq[i] * position of the pair's stream, against the
// reference's float32 table ([tokens, pairs]): its float32 frequency's error and one rounding of
// the product.
void ExpectAngles(const MRope& m, const PositionStreams& p, const json& table,
                  const std::string& what) {
  const std::vector<float> want = Floats(table);
  const int64_t pairs = m.rope.rotary_dim / 2;
  ASSERT_EQ(static_cast<int64_t>(want.size()), p.tokens * pairs) << what;
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int64_t i = 0; i < pairs; ++i) {
      const double angle = m.rope.inv_freq[i] * static_cast<double>(p.At(m.pair_stream[i], t));
      const double error = HfFloat32FrequencyError(m.rope.inv_freq[i]) + 0x1p-24;
      EXPECT_NEAR(angle, want[t * pairs + i], error * angle)
          << what << " token " << t << " pair " << i;
    }
  }
}

// The tokens `apply_tokens` of the positions, as their own [2, n] streams.
std::vector<int64_t> SelectTokens(const VisionPositions& all, const json& tokens) {
  std::vector<int64_t> data;
  for (int64_t s = 0; s < all.num_streams; ++s) {
    for (const json& t : tokens) data.push_back(all.At(s, t.get<int64_t>()));
  }
  return data;
}

// q of a vision file (one head, the rows apply_tokens) rotated by m at those tokens' positions.
void CheckVisionApply(const MRope& m, const VisionPositions& all, const json& g) {
  const std::string name = g["name"];
  const int64_t head_dim = g["head_dim"];
  const std::vector<int64_t> sel = SelectTokens(all, g["apply_tokens"]);
  const int64_t n = static_cast<int64_t>(g["apply_tokens"].size());
  const PositionStreams p = PositionStreams::Dense(sel.data(), 2, n);
  const std::vector<float> q = Floats(g["q"]);
  const std::vector<double> want64 = Doubles(g["q_out_f64"]);
  const std::vector<double> want32 = Widened(Floats(g["q_out_f32"]));
  auto f32_tol = [](int64_t) { return Float32Tolerance(); };
  auto f64_tol = [&](int64_t t) { return DoubleTolerance(MaxPosition(p, t)); };
  auto hf_tol = [&](int64_t t) { return HfFloat32Tolerance(MaxPosition(p, t)); };
  ExpectRowsNear(Rotated<float>(m, p, q, 1, head_dim), want64, n, 1, head_dim, f32_tol,
                 name + " f32 vs f64");
  ExpectRowsNear(Rotated<double>(m, p, q, 1, head_dim), want64, n, 1, head_dim, f64_tol,
                 name + " f64");
  ExpectRowsNear(Rotated<float>(m, p, q, 1, head_dim), want32, n, 1, head_dim, hf_tol,
                 name + " f32 vs HF");
}

std::vector<VisionGrid> Grids(const json& g) {
  std::vector<VisionGrid> grids;
  for (const json& thw : g["grids_thw"]) {
    grids.push_back(VisionGrid{.t = thw[0], .h = thw[1], .w = thw[2]});
  }
  return grids;
}

TEST(MRopeGolden, QwenVisionTowersMatchTheReference) {
  for (const char* file : {"mrope/qwen2_vl_vision.json", "mrope/qwen3_vl_vision.json"}) {
    const json g = GoldenJson(file);
    const MRope m = MRope::QwenVision(g["head_dim"], g["theta"]);
    const int64_t quarter = g["head_dim"].get<int64_t>() / 4;
    // Rows and columns share the frequencies: each half of the pairs has the file's inv_freq.
    for (int64_t half = 0; half < 2; ++half) {
      ExpectInvFreq(std::vector<double>(m.rope.inv_freq.begin() + half * quarter,
                                        m.rope.inv_freq.begin() + (half + 1) * quarter),
                    g["inv_freq_f64"], g["inv_freq_f32"], file);
    }
    const VisionPositions p = QwenVisionPositions(Grids(g), g["spatial_merge_size"]);
    EXPECT_EQ(p.data, DenseStreams(g["positions"])) << file;
    if (g.contains("angles_f32")) ExpectAngles(m, p.Streams(), g["angles_f32"], file);
    ForEachSimdTarget([&](int64_t) { CheckVisionApply(m, p, g); });
  }
}

TEST(MRopeGolden, Qwen25VisionTowerRotatesInWindowOrder) {
  const json g = GoldenJson("mrope/qwen2_5_vl_vision.json");
  const MRope m = MRope::QwenVision(g["head_dim"], g["theta"]);
  const int64_t s = g["spatial_merge_size"];
  const int64_t window_units = g["window_size"].get<int64_t>() / s / g["patch_size"].get<int64_t>();
  const VisionPositions p = QwenVisionPositionsInWindowOrder(Grids(g), s, window_units);
  EXPECT_EQ(p.data, DenseStreams(g["positions_window_order"]));
  ForEachSimdTarget([&](int64_t) { CheckVisionApply(m, p, g); });
}

TEST(MRopeGolden, PixtralMatchesTheReference) {
  const json g = GoldenJson("mrope/pixtral_vision.json");
  const MRope m = MRope::Pixtral(g["head_dim"], g["theta"]);
  // Rows take the even frequencies, columns the odd ones.
  const std::vector<double> f64 = Doubles(g["freqs_f64"]);
  const std::vector<float> f32 = Floats(g["freqs_f32"]);
  json even64 = json::array(), odd64 = json::array(), even32 = json::array(), odd32 = json::array();
  for (size_t j = 0; j < f64.size(); ++j) {
    (j % 2 == 0 ? even64 : odd64).push_back(f64[j]);
    (j % 2 == 0 ? even32 : odd32).push_back(static_cast<double>(f32[j]));
  }
  const size_t quarter = f64.size() / 2;
  ExpectInvFreq({m.rope.inv_freq.begin(), m.rope.inv_freq.begin() + quarter}, even64, even32,
                "pixtral rows");
  ExpectInvFreq({m.rope.inv_freq.begin() + quarter, m.rope.inv_freq.end()}, odd64, odd32,
                "pixtral columns");

  std::vector<PatchRowsCols> images;
  for (const json& rc : g["images_rows_cols"]) images.push_back({.rows = rc[0], .cols = rc[1]});
  const VisionPositions p = PixtralVisionPositions(images);
  EXPECT_EQ(p.data, DenseStreams(g["positions"]));
  ExpectAngles(m, p.Streams(), g["angles_f32"], "pixtral");
  ForEachSimdTarget([&](int64_t) { CheckVisionApply(m, p, g); });
}

TEST(MRopeGolden, Llama4VisionMatchesTheReferenceIncludingTheClassToken) {
  const json g = GoldenJson("mrope/llama4_vision.json");
  const MRope m = MRope::Llama4Vision(g["head_dim"], g["theta"]);
  EXPECT_EQ(m.rope.layout, RopeLayout::kInterleaved);
  const int64_t quarter = g["head_dim"].get<int64_t>() / 4;
  for (int64_t half = 0; half < 2; ++half) {
    ExpectInvFreq(std::vector<double>(m.rope.inv_freq.begin() + half * quarter,
                                      m.rope.inv_freq.begin() + (half + 1) * quarter),
                  g["rope_freq_f64"], g["rope_freq_f32"], "llama4");
  }
  const VisionPositions p = Llama4VisionPositions(g["side"]);
  EXPECT_EQ(p.data, DenseStreams(g["positions"]));
  ExpectAngles(m, p.Streams(), g["angles_f32"], "llama4");  // the class token's row is all 0
  ForEachSimdTarget([&](int64_t) { CheckVisionApply(m, p, g); });
}

}  // namespace
}  // namespace posenc
