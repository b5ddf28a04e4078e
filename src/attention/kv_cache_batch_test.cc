// KvCacheBatch (posenc/kv_cache.h): a batch of sequences of different lengths, left-padded as
// Hugging Face's batched generate() pads them, equals each sequence run alone through its own
// KvCache (an identity, to the bit: the same kernels on the same values), prefill and decode;
// bad input is refused naming the row, with no row changed.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/kv_cache.h"
#include "posenc/rope.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::RandomNormal;

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 32;

KvCacheOptions Options() {
  return {
      .capacity = 16, .kv_heads = kKvHeads, .head_dim = kDim, .rope = Rope::Default(kDim, 10000.0)};
}

// One step of a batch: [batch * n] tokens, row b's real tokens the last lengths[b] of its n (left
// padding), at positions start[b] + 0, 1, ...; pads at position 1, as Hugging Face numbers them
// (never read).
struct Step {
  int64_t batch, n;
  std::vector<int64_t> positions;
  std::vector<uint8_t> mask;
  std::vector<float> q, k, v;
};

Step MakeStep(const std::vector<int64_t>& lengths, const std::vector<int64_t>& start, int64_t n,
              uint64_t seed) {
  const auto batch = static_cast<int64_t>(lengths.size());
  Step s{batch,
         n,
         {},
         {},
         RandomNormal(batch * n * kHeads * kDim, seed),
         RandomNormal(batch * n * kKvHeads * kDim, seed + 1),
         RandomNormal(batch * n * kKvHeads * kDim, seed + 2)};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < n; ++t) {
      const bool real = t >= n - lengths[b];
      s.mask.push_back(real);
      s.positions.push_back(real ? start[b] + t - (n - lengths[b]) : 1);
    }
  }
  return s;
}

template <typename T>
Heads<const T> View(const std::vector<T>& x, int64_t tokens, int64_t heads, int64_t first = 0) {
  return Heads<const T>::Dense(x.data() + first * heads * kDim, tokens, heads, kDim);
}

// The step through the batch, and row by row through single caches; the outputs must be equal.
void ExpectBatchEqualsRows(KvCacheBatch<float>& batch, std::vector<KvCache<float>>& alone,
                           const Step& s) {
  const int64_t tokens = s.batch * s.n;
  batch.Append(s.positions, s.mask, View(s.k, tokens, kKvHeads), View(s.v, tokens, kKvHeads));
  std::vector<float> out(tokens * kHeads * kDim, -7.0f);
  AttentionOptions options;
  options.causal = true;
  batch.Attend(options, View(s.q, tokens, kHeads), s.positions, s.mask,
               Heads<float>::Dense(out.data(), tokens, kHeads, kDim));
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t first = 0;
    while (first < s.n && !s.mask[b * s.n + first]) ++first;
    const int64_t count = s.n - first, at = b * s.n + first;
    const std::span<const int64_t> pos(s.positions.data() + at, count);
    alone[b].Append(pos, View(s.k, count, kKvHeads, at), View(s.v, count, kKvHeads, at));
    std::vector<float> expected(count * kHeads * kDim);
    alone[b].Attend(options, View(s.q, count, kHeads, at), pos,
                    Heads<float>::Dense(expected.data(), count, kHeads, kDim));
    for (int64_t t = 0; t < s.n; ++t) {
      for (int64_t j = 0; j < kHeads * kDim; ++j) {
        const float got = out[((b * s.n) + t) * kHeads * kDim + j];
        if (t < first) {
          ASSERT_EQ(got, 0.0f) << "pad of row " << b;
        } else {
          ASSERT_EQ(got, expected[(t - first) * kHeads * kDim + j]) << "row " << b << " t " << t;
        }
      }
    }
    ASSERT_EQ(batch.Row(b).size(), alone[b].size());
    ASSERT_EQ(
        std::vector<int64_t>(batch.Row(b).Positions().begin(), batch.Row(b).Positions().end()),
        std::vector<int64_t>(alone[b].Positions().begin(), alone[b].Positions().end()));
  }
}

TEST(KvCacheBatch, LeftPaddedPrefillAndDecodeEqualEachSequenceAlone) {
  const std::vector<int64_t> lengths = {5, 9, 2};
  KvCacheBatch<float> batch(3, Options());
  std::vector<KvCache<float>> alone(3, KvCache<float>(Options()));
  ExpectBatchEqualsRows(batch, alone, MakeStep(lengths, {0, 0, 0}, 9, 10));
  std::vector<int64_t> next = lengths;
  for (int step = 0; step < 4; ++step) {  // decode: one token per row at its own position
    ExpectBatchEqualsRows(batch, alone, MakeStep({1, 1, 1}, next, 1, 100 + 10 * step));
    for (int64_t& p : next) ++p;
  }
  EXPECT_EQ(batch.Row(0).size(), 9);
  EXPECT_EQ(batch.Row(1).size(), 13);
  EXPECT_EQ(batch.Row(2).size(), 6);
  // A row that takes no part in a step (finished): unchanged, its outputs zero.
  ExpectBatchEqualsRows(batch, alone, MakeStep({1, 0, 1}, next, 1, 200));
  EXPECT_EQ(batch.Row(1).size(), 13);
}

TEST(KvCacheBatch, BadInputNamesTheRowAndChangesNoRow) {
  KvCacheBatch<float> batch(2, Options());
  const Step prefill = MakeStep({3, 14}, {0, 0}, 14, 1);
  batch.Append(prefill.positions, prefill.mask, View(prefill.k, 28, kKvHeads),
               View(prefill.v, 28, kKvHeads));
  // Row 1 has 2 free slots: 3 tokens for each row overflow row 1 only, and row 0 stays as it was.
  const Step over = MakeStep({3, 3}, {3, 14}, 3, 2);
  try {
    batch.Append(over.positions, over.mask, View(over.k, 6, kKvHeads), View(over.v, 6, kKvHeads));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[kv_cache] k.tokens must fit the free slots (capacity 16 - size 14 = 2), got 3 "
              "(row 1)");
  }
  EXPECT_EQ(batch.Row(0).size(), 3);
  EXPECT_EQ(batch.Row(1).size(), 14);
  // A mask with a hole.
  Step holes = MakeStep({2, 1}, {3, 14}, 3, 3);
  holes.mask = {1, 0, 1, 0, 0, 1};
  try {
    batch.Append(holes.positions, holes.mask, View(holes.k, 6, kKvHeads),
                 View(holes.v, 6, kKvHeads));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[kv_cache_batch] mask[0] must hold one run of real tokens (left or right padding, "
              "no holes), got a real token at 2 after a pad at 1");
  }
  EXPECT_EQ(batch.Row(0).size(), 3);
  // Tokens not a multiple of the batch; a short mask; a bad batch; mrope.
  const Step odd = MakeStep({1}, {3}, 3, 4);
  EXPECT_THROW(
      batch.Append(odd.positions, odd.mask, View(odd.k, 3, kKvHeads), View(odd.v, 3, kKvHeads)),
      Error);
  const Step one = MakeStep({1, 1}, {3, 14}, 1, 5);
  EXPECT_THROW(batch.Append(one.positions, std::span(one.mask).first(1), View(one.k, 2, kKvHeads),
                            View(one.v, 2, kKvHeads)),
               Error);
  EXPECT_THROW(KvCacheBatch<float>(0, Options()), Error);
  KvCacheOptions m = Options();
  m.rope.reset();
  m.mrope = MRope::OneStream(Rope::Default(kDim));
  EXPECT_THROW(KvCacheBatch<float>(2, m), Error);
  EXPECT_THROW(batch.Row(2), Error);
  // Query positions of a later row are checked before an earlier row writes out.
  std::vector<float> out(2 * kHeads * kDim, -7.0f);
  std::vector<int64_t> bad_pos = {3, -1};
  AttentionOptions options;
  EXPECT_THROW(batch.Attend(options, View(one.q, 2, kHeads), bad_pos, one.mask,
                            Heads<float>::Dense(out.data(), 2, kHeads, kDim)),
               Error);
  EXPECT_EQ(out[0], -7.0f);
  EXPECT_EQ(batch.Row(0).size(), 3);
  EXPECT_EQ(batch.Row(1).size(), 14);
}

}  // namespace
}  // namespace posenc
