// Multi-stream RoPE (posenc/mrope.h): the stream maps of each builder, bit-for-bit agreement with
// 1-D RoPE when the streams agree, the SIMD kernel against the double reference on every target,
// the identities (norm kept, scores depend only on per-stream differences, inverse undoes), and bad
// input refused before anything is written.
#include "posenc/mrope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/rope.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;
using testing_support::RandomNormal;

template <typename T>
std::vector<T> Stored(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, double>)
      out[i] = v[i];
    else
      out[i] = FromFloat<T>(v[i]);
  }
  return out;
}

// Qwen2-VL's streams for a text run, an image of 2 x 3 merged patches, and more text, as its
// get_rope_index numbers them: text 0..3, image (t, h, w) = (4, 4 + row, 4 + col), text from 7.
struct Streams {
  std::vector<int64_t> data;  // [3, tokens]
  int64_t tokens;
  PositionStreams View() const { return PositionStreams::Dense(data.data(), 3, tokens); }
};
Streams TextImageText() {
  std::vector<int64_t> t, h, w;
  for (int64_t p = 0; p < 4; ++p) t.push_back(p), h.push_back(p), w.push_back(p);
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t col = 0; col < 3; ++col)
      t.push_back(4), h.push_back(4 + row), w.push_back(4 + col);
  }
  for (int64_t p = 7; p < 12; ++p) t.push_back(p), h.push_back(p), w.push_back(p);
  Streams s{t, static_cast<int64_t>(t.size())};
  s.data.insert(s.data.end(), h.begin(), h.end());
  s.data.insert(s.data.end(), w.begin(), w.end());
  return s;
}

TEST(MRopeSections, BlocksGiveEachStreamItsRunOfPairs) {
  // Qwen2-VL-7B: head_dim 128, 64 pairs, [16, 24, 24].
  const MRope m = MRope::Sections(Rope::Default(128, 1e6), std::vector<int64_t>{16, 24, 24},
                                  MropeSections::kBlocks);
  ASSERT_EQ(m.pair_stream.size(), 64u);
  EXPECT_EQ(m.num_streams, 3);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(m.pair_stream[i], i < 16 ? 0 : i < 40 ? 1 : 2) << i;
  }
}

TEST(MRopeSections, InterleavedTakesTurnsThenTimeKeepsTheRest) {
  // Qwen3-VL: [24, 20, 20] of 64 pairs: t h w repeated 20 times (pairs 0-59), then t t t t.
  const MRope m = MRope::Sections(Rope::Default(128, 5e6), std::vector<int64_t>{24, 20, 20},
                                  MropeSections::kInterleaved);
  for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(m.pair_stream[i], i % 3) << i;
  for (int64_t i = 60; i < 64; ++i) EXPECT_EQ(m.pair_stream[i], 0) << i;
  // A small case by hand: [2, 1, 1] of 4 pairs is t h w t.
  const MRope small =
      MRope::Sections(Rope::Default(8), std::vector<int64_t>{2, 1, 1}, MropeSections::kInterleaved);
  EXPECT_EQ(small.pair_stream, (std::vector<int64_t>{0, 1, 2, 0}));
  // Qwen2-VL's [16, 24, 24] interleaved, as the reference's rule takes it: height keeps pairs
  // 1, 4, ..., 61 (21 of them, all below 72), width 2, 5, ..., 62, time the other 22.
  const MRope uneven = MRope::Sections(Rope::Default(128), std::vector<int64_t>{16, 24, 24},
                                       MropeSections::kInterleaved);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(uneven.pair_stream[i], i % 3) << i;
}

TEST(MRopeVision, BuildersSplitTheFrequenciesBetweenRowAndColumn) {
  // Qwen2-VL vision, head_dim 80: 20 pairs by row, 20 by column, both at 10000^(-2j/40).
  const MRope q = MRope::QwenVision(80);
  ASSERT_EQ(q.rope.inv_freq.size(), 40u);
  for (int64_t j = 0; j < 20; ++j) {
    const double f = std::pow(10000.0, -2.0 * j / 40.0);
    EXPECT_DOUBLE_EQ(q.rope.inv_freq[j], f);
    EXPECT_DOUBLE_EQ(q.rope.inv_freq[20 + j], f);
    EXPECT_EQ(q.pair_stream[j], 0);
    EXPECT_EQ(q.pair_stream[20 + j], 1);
  }
  EXPECT_EQ(q.rope.layout, RopeLayout::kHalfSplit);
  // Pixtral, head_dim 64: f_j = 10000^(-2j/64); rows take f_0, f_2, ..., columns f_1, f_3, ....
  const MRope p = MRope::Pixtral(64);
  for (int64_t j = 0; j < 16; ++j) {
    EXPECT_DOUBLE_EQ(p.rope.inv_freq[j], std::pow(10000.0, -2.0 * (2 * j) / 64.0));
    EXPECT_DOUBLE_EQ(p.rope.inv_freq[16 + j], std::pow(10000.0, -2.0 * (2 * j + 1) / 64.0));
  }
  // Llama 4 vision, head_dim 88: 44 interleaved pairs, 22 per stream at 10000^(-2j/44).
  const MRope l = MRope::Llama4Vision(88);
  EXPECT_EQ(l.rope.layout, RopeLayout::kInterleaved);
  ASSERT_EQ(l.rope.inv_freq.size(), 44u);
  EXPECT_DOUBLE_EQ(l.rope.inv_freq[21], std::pow(10000.0, -42.0 / 44.0));
  EXPECT_DOUBLE_EQ(l.rope.inv_freq[22], 1.0);
  EXPECT_EQ(l.pair_stream[21], 0);
  EXPECT_EQ(l.pair_stream[22], 1);
}

// With every stream equal, M-RoPE is 1-D RoPE bit for bit: same kernel path, same angles.
template <typename T>
void ExpectEqualStreamsAreOneD(MropeSections layout, RopeLayout pair_layout) {
  const int64_t tokens = 70, heads = 3, kv_heads = 2, head_dim = 96;
  Rope rope = Rope::Default(head_dim, 1e6, pair_layout, 80, 8);
  rope.attention_factor = 1.125;
  const MRope m = MRope::Sections(rope, std::vector<int64_t>{14, 13, 13}, layout);
  std::vector<int64_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    pos[t] = t < 50 ? 1000 + t : 5000000 + 7 * t;  // runs + jumps
  std::vector<int64_t> streams;
  for (int s = 0; s < 3; ++s) streams.insert(streams.end(), pos.begin(), pos.end());
  const std::vector<T> q0 = Stored<T>(RandomNormal(tokens * heads * head_dim, 1));
  const std::vector<T> k0 = Stored<T>(RandomNormal(tokens * kv_heads * head_dim, 2));
  for (const RopeDirection dir : {RopeDirection::kForward, RopeDirection::kInverse}) {
    std::vector<T> q1 = q0, k1 = k0, q2 = q0, k2 = k0;
    ApplyRope(rope, pos, Heads<T>::Dense(q1.data(), tokens, heads, head_dim),
              Heads<T>::Dense(k1.data(), tokens, kv_heads, head_dim), dir);
    ApplyMRope(m, PositionStreams::Dense(streams.data(), 3, tokens),
               Heads<T>::Dense(q2.data(), tokens, heads, head_dim),
               Heads<T>::Dense(k2.data(), tokens, kv_heads, head_dim), dir);
    ASSERT_EQ(std::memcmp(q1.data(), q2.data(), q1.size() * sizeof(T)), 0);
    ASSERT_EQ(std::memcmp(k1.data(), k2.data(), k1.size() * sizeof(T)), 0);
  }
}

TEST(MRope, EqualStreamsGiveOneDRopeBitForBitOnEveryTarget) {
  ForEachSimdTarget([](int64_t) {
    for (const MropeSections s : {MropeSections::kBlocks, MropeSections::kInterleaved}) {
      for (const RopeLayout l : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
        ExpectEqualStreamsAreOneD<float>(s, l);
        ExpectEqualStreamsAreOneD<BFloat16>(s, l);
        ExpectEqualStreamsAreOneD<Float16>(s, l);
        ExpectEqualStreamsAreOneD<double>(s, l);
      }
    }
  });
}

// The kernel against the double reference: float32 rounding of cos, sin and two FMAs relative to
// the pair's size (4 ulps), or one unit of the storage type.
template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, float>)
    return std::ldexp(1.0, -21);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return std::ldexp(1.0, -7);
  else
    return std::ldexp(1.0, -10);
}

template <typename T>
void ExpectKernelMatchesReference(int64_t head_dim, const MRope& m, const Streams& streams) {
  const int64_t tokens = streams.tokens, heads = 2;
  const std::vector<T> x0 = Stored<T>(RandomNormal(tokens * heads * head_dim, 7));
  for (const RopeDirection dir : {RopeDirection::kForward, RopeDirection::kInverse}) {
    std::vector<T> got(x0.size()), want(x0.size());
    const Heads<const T> in = Heads<const T>::Dense(x0.data(), tokens, heads, head_dim);
    ApplyMRope<T>(m, streams.View(), in, Heads<T>::Dense(got.data(), tokens, heads, head_dim), dir);
    ApplyMRopeReference<T>(m, streams.View(), in,
                           Heads<T>::Dense(want.data(), tokens, heads, head_dim), dir);
    for (size_t j = 0; j < x0.size(); ++j) {
      const double bound = Tolerance<T>() * (4.0 + std::abs(ToFloat(x0[j])) * 2);
      ASSERT_NEAR(ToFloat(got[j]), ToFloat(want[j]), bound) << j;
    }
  }
}

TEST(MRope, KernelMatchesTheDoubleReferenceOnEveryTarget) {
  Streams s = TextImageText();
  for (int64_t& p : s.data) p += 123456;  // far from 0, where float32 angles would fail
  ForEachSimdTarget([&](int64_t) {
    // Pair counts around every vector width, blocks and interleaved, both pair layouts.
    for (const int64_t pairs : {3, 8, 17, 33, 64}) {
      const std::vector<int64_t> sections{pairs - 2 * (pairs / 3), pairs / 3, pairs / 3};
      for (const MropeSections layout : {MropeSections::kBlocks, MropeSections::kInterleaved}) {
        for (const RopeLayout pl : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved}) {
          const MRope m = MRope::Sections(Rope::Default(2 * pairs + 4, 1e6, pl, 2 * pairs, 3),
                                          sections, layout);
          ExpectKernelMatchesReference<float>(2 * pairs + 4, m, s);
          ExpectKernelMatchesReference<BFloat16>(2 * pairs + 4, m, s);
          ExpectKernelMatchesReference<Float16>(2 * pairs + 4, m, s);
        }
      }
    }
  });
}

// Each stream steps by 0 or 1 at random, so the kernel advances angles pair by pair under every
// pattern of moved streams, switching patterns from token to token, for hundreds of tokens.
TEST(MRope, KernelMatchesTheReferenceWhenStreamsStepIndependently) {
  std::mt19937 gen(42);
  const int64_t tokens = 300;
  Streams s{std::vector<int64_t>(3 * tokens), tokens};
  int64_t pos[3] = {70000, 80000, 90000};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < 3; ++k) {
      pos[k] += t % 50 == 49 ? 7 : static_cast<int64_t>(gen() % 2);  // and a jump now and then
      s.data[k * tokens + t] = pos[k];
    }
  }
  ForEachSimdTarget([&](int64_t) {
    for (const MropeSections layout : {MropeSections::kBlocks, MropeSections::kInterleaved}) {
      const MRope m =
          MRope::Sections(Rope::Default(40, 1e6), std::vector<int64_t>{8, 6, 6}, layout);
      ExpectKernelMatchesReference<float>(40, m, s);
      ExpectKernelMatchesReference<BFloat16>(40, m, s);
    }
  });
}

TEST(MRope, StridedPositionsReadTheSameStreams) {
  // [tokens, 3] (stream_stride 1, token_stride 3) holds the same positions as [3, tokens].
  const Streams s = TextImageText();
  std::vector<int64_t> token_major(s.data.size());
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t k = 0; k < 3; ++k) token_major[t * 3 + k] = s.data[k * s.tokens + t];
  }
  const MRope m =
      MRope::Sections(Rope::Default(16), std::vector<int64_t>{2, 3, 3}, MropeSections::kBlocks);
  std::vector<float> a = RandomNormal(s.tokens * 16, 3), b = a;
  ApplyMRope(m, s.View(), Heads<float>::Dense(a.data(), s.tokens, 1, 16));
  ApplyMRope(m, PositionStreams{token_major.data(), 3, s.tokens, 1, 3},
             Heads<float>::Dense(b.data(), s.tokens, 1, 16));
  EXPECT_EQ(a, b);
}

// q . k after M-RoPE depends only on the per-stream differences: moving both tokens by the same
// (dt, dh, dw) leaves the score, and the norm of each row is kept (double storage: exact math).
TEST(MRope, ScoresDependOnlyOnPerStreamDifferencesAndNormsAreKept) {
  const MRope m = MRope::Sections(Rope::Default(32, 1e4), std::vector<int64_t>{4, 6, 6},
                                  MropeSections::kBlocks);
  const std::vector<float> qf = RandomNormal(32, 11), kf = RandomNormal(32, 12);
  auto score = [&](std::vector<int64_t> qpos, std::vector<int64_t> kpos) {
    std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end());
    ApplyMRope(m, PositionStreams{qpos.data(), 3, 1, 1, 1},
               Heads<double>::Dense(q.data(), 1, 1, 32));
    ApplyMRope(m, PositionStreams{kpos.data(), 3, 1, 1, 1},
               Heads<double>::Dense(k.data(), 1, 1, 32));
    double dot = 0, qn = 0, q0n = 0;
    for (int j = 0; j < 32; ++j)
      dot += q[j] * k[j], qn += q[j] * q[j], q0n += double{qf[j]} * qf[j];
    EXPECT_NEAR(qn, q0n, 1e-12 * q0n);
    return dot;
  };
  const double base = score({9, 12, 15}, {7, 5, 11});
  EXPECT_NEAR(score({109, 1012, 15}, {107, 1005, 11}), base, 1e-11);
  EXPECT_NEAR(score({1009, 112, 100015}, {1007, 105, 100011}), base, 1e-9);
  // A different per-stream difference changes it: the streams are not mixed.
  EXPECT_GT(std::abs(score({9, 12, 16}, {7, 5, 11}) - base), 1e-3);
}

TEST(MRope, InverseUndoesForward) {
  const Streams s = TextImageText();
  const MRope m = MRope::QwenVision(16);
  std::vector<int64_t> rows_cols(s.data.begin() + s.tokens,
                                 s.data.end());  // 2 streams
  const std::vector<float> x0 = RandomNormal(s.tokens * 16, 5);
  std::vector<float> x = x0;
  const PositionStreams p = PositionStreams::Dense(rows_cols.data(), 2, s.tokens);
  ApplyMRope(m, p, Heads<float>::Dense(x.data(), s.tokens, 1, 16));
  ApplyMRope(m, p, Heads<float>::Dense(x.data(), s.tokens, 1, 16), RopeDirection::kInverse);
  for (size_t j = 0; j < x.size(); ++j) EXPECT_NEAR(x[j], x0[j], 1e-6) << j;
}

TEST(MRopeErrors, BadSectionsAreRefusedWithTheRule) {
  const std::vector<int64_t> short_by_one{16, 24, 23};
  ExpectError([&] { MRope::Sections(Rope::Default(128), short_by_one, MropeSections::kBlocks); },
              "[mrope] sections must add up to the rotary pairs, rotary_dim / 2 = 64 "
              "(they add "
              "up to 63), got 63");
  const std::vector<int64_t> zero{64, 0};
  ExpectError([&] { MRope::Sections(Rope::Default(128), zero, MropeSections::kBlocks); },
              "[mrope] sections[1] must be in [1, rotary_dim / 2 = 64], got 0");
  const std::vector<int64_t> five{1, 1, 1, 1, 60};
  ExpectError([&] { MRope::Sections(Rope::Default(128), five, MropeSections::kBlocks); },
              "[mrope] sections.size() must be 1 to 4, got 5");
  ExpectError([] { MRope::QwenVision(78); },
              "[mrope] QwenVision head_dim must be a multiple of 4 in [4, "
              "2^20], got 78");
}

TEST(MRopeErrors, BadPositionsLeaveTheBuffersUntouched) {
  const MRope m =
      MRope::Sections(Rope::Default(16), std::vector<int64_t>{2, 3, 3}, MropeSections::kBlocks);
  const std::vector<float> q0 = RandomNormal(4 * 16, 1), k0 = RandomNormal(4 * 16, 2);
  std::vector<float> q = q0, k = k0;
  auto qv = Heads<float>::Dense(q.data(), 4, 1, 16), kv = Heads<float>::Dense(k.data(), 4, 1, 16);
  std::vector<int64_t> pos(12, 3);
  ExpectError([&] { ApplyMRope(m, PositionStreams::Dense(pos.data(), 2, 4), qv, kv); },
              "[mrope] positions.num_streams must equal the rotation's streams (3), "
              "got 2");
  ExpectError([&] { ApplyMRope(m, PositionStreams::Dense(pos.data(), 3, 3), qv, kv); },
              "[mrope] positions.tokens must equal the number of tokens (4), got 3");
  pos[9] = -1;  // stream 2, token 1
  ExpectError([&] { ApplyMRope(m, PositionStreams::Dense(pos.data(), 3, 4), qv, kv); },
              "[mrope] positions[2][1] must be >= 0, got -1");
  pos[9] = 3;
  auto wrong = Heads<float>::Dense(k.data(), 4, 1, 8);
  ExpectError([&] { ApplyMRope(m, PositionStreams::Dense(pos.data(), 3, 4), qv, wrong); },
              "[mrope] k.head_dim must equal rope.head_dim (16), got 8");
  MRope broken = m;
  broken.pair_stream[5] = 3;
  ExpectError([&] { ApplyMRope(broken, PositionStreams::Dense(pos.data(), 3, 4), qv, kv); },
              "[mrope] pair_stream[5] must be in [0, num_streams = 3), got 3");
  EXPECT_EQ(q, q0);
  EXPECT_EQ(k, k0);
}

}  // namespace
}  // namespace posenc
