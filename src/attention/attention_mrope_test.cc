// Attention with multi-stream RoPE (AttentionOptions::mrope): q and k turn by their position
// streams while the mask follows the token order; a decode step after an image continues from the
// streams' offset (Hugging Face's rope_deltas).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::ForEachSimdTarget;
using testing_support::RandomNormal;

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 32;

MRope QwenLike() {
  return MRope::Sections(Rope::Default(kDim, 1e6), std::vector<int64_t>{4, 6, 6},
                         MropeSections::kBlocks);
}

// Qwen2-VL's numbering of 3 text tokens, a 2 x 3 image and 4 text tokens: text 0, 1, 2; image (3, 3
// + row, 3 + col); text from 3 + max(1, 2, 3) = 6. Token order 0 .. 12.
struct Sequence {
  std::vector<int64_t> streams;  // [3, tokens]
  std::vector<int64_t> order;    // 0 .. tokens - 1
  int64_t tokens = 0;
};
Sequence TextImageText() {
  std::vector<int64_t> t, h, w;
  for (int64_t p = 0; p < 3; ++p) t.push_back(p), h.push_back(p), w.push_back(p);
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t col = 0; col < 3; ++col) {
      t.push_back(3), h.push_back(3 + row), w.push_back(3 + col);
    }
  }
  for (int64_t p = 6; p < 10; ++p) t.push_back(p), h.push_back(p), w.push_back(p);
  Sequence s;
  s.tokens = static_cast<int64_t>(t.size());
  s.streams = t;
  s.streams.insert(s.streams.end(), h.begin(), h.end());
  s.streams.insert(s.streams.end(), w.begin(), w.end());
  for (int64_t i = 0; i < s.tokens; ++i) s.order.push_back(i);
  return s;
}

TEST(AttentionMRope, EqualsRotatingQAndKFirstOnEveryTarget) {
  const Sequence s = TextImageText();
  const int64_t T = s.tokens;
  const std::vector<float> q = RandomNormal(T * kHeads * kDim, 1),
                           k = RandomNormal(T * kKvHeads * kDim, 2),
                           v = RandomNormal(T * kKvHeads * kDim, 3);
  AttentionOptions options;
  options.causal = true;
  options.mrope = QwenLike();
  options.mrope_query_pos = options.mrope_key_pos = PositionStreams::Dense(s.streams.data(), 3, T);
  ForEachSimdTarget([&](int64_t) {
    std::vector<float> fused(T * kHeads * kDim), composed(fused.size());
    Attention(options, Heads<const float>::Dense(q.data(), T, kHeads, kDim),
              Heads<const float>::Dense(k.data(), T, kKvHeads, kDim),
              Heads<const float>::Dense(v.data(), T, kKvHeads, kDim), s.order, s.order,
              Heads<float>::Dense(fused.data(), T, kHeads, kDim));
    std::vector<float> qr = q, kr = k;
    ApplyMRope(*options.mrope, options.mrope_query_pos,
               Heads<float>::Dense(qr.data(), T, kHeads, kDim),
               Heads<float>::Dense(kr.data(), T, kKvHeads, kDim));
    AttentionOptions plain;
    plain.causal = true;
    Attention(plain, Heads<const float>::Dense(qr.data(), T, kHeads, kDim),
              Heads<const float>::Dense(kr.data(), T, kKvHeads, kDim),
              Heads<const float>::Dense(v.data(), T, kKvHeads, kDim), s.order, s.order,
              Heads<float>::Dense(composed.data(), T, kHeads, kDim));
    EXPECT_EQ(fused, composed);
    // And the double reference agrees to float32 rounding.
    std::vector<float> reference(fused.size());
    AttentionReference(options, Heads<const float>::Dense(q.data(), T, kHeads, kDim),
                       Heads<const float>::Dense(k.data(), T, kKvHeads, kDim),
                       Heads<const float>::Dense(v.data(), T, kKvHeads, kDim), s.order, s.order,
                       Heads<float>::Dense(reference.data(), T, kHeads, kDim));
    for (size_t j = 0; j < fused.size(); ++j) EXPECT_NEAR(fused[j], reference[j], 2e-5) << j;
  });
}

// The causal mask follows the token order, not the time stream: the image's first token (order 3)
// sees keys 0-3 only, although all six image tokens share time position 3.
TEST(AttentionMRope, CausalMaskFollowsTokenOrderNotStreams) {
  const Sequence s = TextImageText();
  const int64_t T = s.tokens;
  const std::vector<float> q = RandomNormal(T * kHeads * kDim, 4),
                           k = RandomNormal(T * kKvHeads * kDim, 5);
  std::vector<float> v(T * kKvHeads * kDim, 0.0f);
  for (int64_t j = 0; j < T; ++j) {
    for (int64_t g = 0; g < kKvHeads; ++g) v[(j * kKvHeads + g) * kDim] = j >= 4 ? 1.0f : 0.0f;
  }
  AttentionOptions options;
  options.causal = true;
  options.mrope = QwenLike();
  options.mrope_query_pos = options.mrope_key_pos = PositionStreams::Dense(s.streams.data(), 3, T);
  std::vector<float> out(T * kHeads * kDim);
  Attention(options, Heads<const float>::Dense(q.data(), T, kHeads, kDim),
            Heads<const float>::Dense(k.data(), T, kKvHeads, kDim),
            Heads<const float>::Dense(v.data(), T, kKvHeads, kDim), s.order, s.order,
            Heads<float>::Dense(out.data(), T, kHeads, kDim));
  // Feature 0 of a query's output is the weight it puts on keys 4 and later.
  for (int64_t h = 0; h < kHeads; ++h) {
    EXPECT_EQ(out[(3 * kHeads + h) * kDim], 0.0f) << h;
    EXPECT_GT(out[(4 * kHeads + h) * kDim], 0.0f) << h;
  }
}

// Generation after an image: the next token is text at token order T with all three streams at T +
// delta, delta = (largest position + 1) - T (Hugging Face's rope_deltas). One decode query against
// the cache equals the last row of the prefill that includes it.
TEST(AttentionMRope, DecodeAfterAnImageContinuesFromTheDelta) {
  Sequence s = TextImageText();
  const int64_t T = s.tokens;  // 13 tokens, largest position 9: delta = 10 - 13 = -3
  const int64_t delta = 10 - T;
  // The prefill of T + 1 tokens: the decoded token appended at position T + delta everywhere.
  std::vector<int64_t> streams;
  for (int64_t k = 0; k < 3; ++k) {
    streams.insert(streams.end(), s.streams.begin() + k * T, s.streams.begin() + (k + 1) * T);
    streams.push_back(T + delta);
  }
  std::vector<int64_t> order = s.order;
  order.push_back(T);
  const int64_t N = T + 1;
  const std::vector<float> q = RandomNormal(N * kHeads * kDim, 7),
                           k = RandomNormal(N * kKvHeads * kDim, 8),
                           v = RandomNormal(N * kKvHeads * kDim, 9);
  AttentionOptions options;
  options.causal = true;
  options.mrope = QwenLike();
  options.mrope_query_pos = options.mrope_key_pos = PositionStreams::Dense(streams.data(), 3, N);
  std::vector<float> prefill(N * kHeads * kDim);
  Attention(options, Heads<const float>::Dense(q.data(), N, kHeads, kDim),
            Heads<const float>::Dense(k.data(), N, kKvHeads, kDim),
            Heads<const float>::Dense(v.data(), N, kKvHeads, kDim), order, order,
            Heads<float>::Dense(prefill.data(), N, kHeads, kDim));

  const std::vector<int64_t> step_streams(3, T + delta);  // [3, 1]
  const std::vector<int64_t> step_order{T};
  options.mrope_query_pos = PositionStreams::Dense(step_streams.data(), 3, 1);
  std::vector<float> step(kHeads * kDim);
  Attention(options, Heads<const float>::Dense(q.data() + T * kHeads * kDim, 1, kHeads, kDim),
            Heads<const float>::Dense(k.data(), N, kKvHeads, kDim),
            Heads<const float>::Dense(v.data(), N, kKvHeads, kDim), step_order, order,
            Heads<float>::Dense(step.data(), 1, kHeads, kDim));
  for (int64_t j = 0; j < kHeads * kDim; ++j) {
    EXPECT_NEAR(step[j], prefill[T * kHeads * kDim + j], 1e-6) << j;
  }
}

TEST(AttentionMRope, BadOptionsAreRefusedBeforeWriting) {
  const Sequence s = TextImageText();
  const int64_t T = s.tokens;
  const std::vector<float> q = RandomNormal(T * kHeads * kDim, 1),
                           k = RandomNormal(T * kKvHeads * kDim, 2);
  std::vector<float> out(T * kHeads * kDim, 5.0f);
  auto run = [&](const AttentionOptions& options) {
    Attention(options, Heads<const float>::Dense(q.data(), T, kHeads, kDim),
              Heads<const float>::Dense(k.data(), T, kKvHeads, kDim),
              Heads<const float>::Dense(k.data(), T, kKvHeads, kDim), s.order, s.order,
              Heads<float>::Dense(out.data(), T, kHeads, kDim));
  };
  AttentionOptions options;
  options.mrope = QwenLike();
  options.mrope_query_pos = options.mrope_key_pos = PositionStreams::Dense(s.streams.data(), 3, T);
  options.rope = Rope::Default(kDim);
  ExpectError([&] { run(options); },
              "[attention] mrope must not be given with rope (each is a rotation), got both");
  options.rope.reset();
  options.mrope_key_pos = PositionStreams::Dense(s.streams.data(), 3, T - 1);
  ExpectError([&] { run(options); },
              "[attention] mrope_key_pos.tokens must equal the number of tokens (13), got 12");
  options.mrope_key_pos = PositionStreams::Dense(s.streams.data(), 2, T);
  ExpectError([&] { run(options); },
              "[attention] mrope_key_pos.num_streams must equal the rotation's streams (3), got 2");
  options.mrope_key_pos = options.mrope_query_pos;
  options.mrope = MRope::QwenVision(16);
  ExpectError([&] { run(options); },
              "[attention] mrope.rope.head_dim must equal q.head_dim (32), got 16");
  EXPECT_EQ(out, std::vector<float>(T * kHeads * kDim, 5.0f));
}

}  // namespace
}  // namespace posenc
