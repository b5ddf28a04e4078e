// The batch axis (posenc/batch.h): every batched form against the double references run one
// element at a time, the whole-batch validation (nothing written when any element is bad), and
// the aliasing check across elements against brute force.
#include "posenc/batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "posenc/attention.h"
#include "posenc/attention_backward.h"
#include "posenc/mrope.h"
#include "posenc/rope.h"
#include "rows.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::ExpectError;
using testing_support::RandomNormal;

// Hugging Face's [batch, heads, seq, dim] tensor, read as [batch, seq, heads, dim]: its batch
// elements cannot fold into tokens, so the batch runs one element at a time.
constexpr int64_t kBatch = 2, kHeads = 3, kTokens = 4, kDim = 8;
constexpr int64_t kElement = kHeads * kTokens * kDim;

template <typename T>
Batched<Heads<T>> Transposed(T* data, int64_t heads = kHeads) {
  return {{data, kTokens, heads, kDim, /*token_stride=*/kDim, /*head_stride=*/kTokens * kDim},
          {kBatch},
          {heads * kTokens * kDim}};
}

// Per-element positions [batch, tokens].
const std::vector<int64_t> kPositions{0, 1, 2, 3, 7, 9, 11, 12};
BatchedPositions PerElement(std::span<const int64_t> all = kPositions) {
  return {all.first(kTokens), {kBatch}, {kTokens}};
}

TEST(Batch, RopeOverATransposedBatchMatchesTheReferencePerElement) {
  const Rope rope = Rope::Default(kDim);
  const std::vector<float> input = RandomNormal(kBatch * kElement, 1);
  std::vector<float> x = input, want(input.size());
  ApplyRope<float>(rope, PerElement(), Transposed(x.data()));
  for (int64_t b = 0; b < kBatch; ++b) {
    const auto element = [&](auto* data) { return Transposed(data).At(b); };
    ApplyRopeReference<float>(rope, std::span(kPositions).subspan(b * kTokens, kTokens),
                              element(input.data()), element(want.data()), RopeDirection::kForward);
  }
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], want[i], 2e-6f) << i;
}

TEST(Batch, RopeOverAContiguousBatchWithSharedPositionsMatchesTheReference) {
  // [batch, tokens, heads, dim], C-contiguous: folds into one call of batch x tokens.
  const Rope rope = Rope::Default(kDim, 500000.0, RopeLayout::kInterleaved);
  const std::vector<int64_t> positions{5, 6, 7, 8};
  const std::vector<float> input = RandomNormal(kBatch * kElement, 2);
  std::vector<float> x = input, want(input.size());
  const auto dense = [](float* data) {
    return Batched<Heads<float>>(Heads<float>::Dense(data, kTokens, kHeads, kDim), {kBatch},
                                 {kElement});
  };
  ApplyRope<float>(rope, BatchedPositions(positions), dense(x.data()));
  for (int64_t b = 0; b < kBatch; ++b) {
    ApplyRopeReference<float>(rope, positions,
                              Heads<const float>(dense(const_cast<float*>(input.data())).At(b)),
                              dense(want.data()).At(b), RopeDirection::kForward);
  }
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], want[i], 2e-6f) << i;
}

TEST(Batch, RopeOverAHuggingFaceBatchWithSharedPositionsMatchesTheReference) {
  // q [batch, 3 heads, seq, dim] and k [batch, 1 head, seq, dim] with one positions list: the
  // batch runs as more heads.
  const Rope rope = Rope::Default(kDim);
  const std::vector<int64_t> positions{3, 5, 8, 13};
  const std::vector<float> q_in = RandomNormal(kBatch * kElement, 12),
                           k_in = RandomNormal(kBatch * kTokens * kDim, 13);
  std::vector<float> q = q_in, k = k_in, want_q(q.size()), want_k(k.size());
  ApplyRope<float>(rope, BatchedPositions(positions), Transposed(q.data()),
                   Transposed(k.data(), 1));
  for (int64_t b = 0; b < kBatch; ++b) {
    ApplyRopeReference<float>(rope, positions,
                              Heads<const float>(Transposed(const_cast<float*>(q_in.data())).At(b)),
                              Transposed(want_q.data()).At(b), RopeDirection::kForward);
    ApplyRopeReference<float>(
        rope, positions, Heads<const float>(Transposed(const_cast<float*>(k_in.data()), 1).At(b)),
        Transposed(want_k.data(), 1).At(b), RopeDirection::kForward);
  }
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], want_q[i], 2e-6f) << i;
  for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], want_k[i], 2e-6f) << i;
}

TEST(Batch, MRopeStreamsOfEachElementMatchTheReference) {
  const std::vector<int64_t> sections{1, 1, 2};
  const MRope mrope = MRope::Sections(Rope::Default(kDim), sections, MropeSections::kBlocks);
  // Streams [3, batch, tokens]: each element's own t, h and w.
  const std::vector<int64_t> streams{0, 1, 2, 3, 4, 4, 5, 6,  //
                                     0, 0, 1, 1, 4, 5, 5, 6,  //
                                     0, 1, 0, 1, 4, 5, 4, 5};
  const Batched<PositionStreams> positions(
      {streams.data(), 3, kTokens, /*stream_stride=*/kBatch * kTokens, /*token_stride=*/1},
      {kBatch}, {kTokens});
  const std::vector<float> input = RandomNormal(kBatch * kElement, 3);
  std::vector<float> x = input, want(input.size());
  ApplyMRope<float>(mrope, positions, Transposed(x.data()));
  for (int64_t b = 0; b < kBatch; ++b) {
    ApplyMRopeReference<float>(
        mrope, positions.At(b),
        Heads<const float>(Transposed(const_cast<float*>(input.data())).At(b)),
        Transposed(want.data()).At(b), RopeDirection::kForward);
  }
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], want[i], 2e-6f) << i;
}

TEST(Batch, AttentionOfEachElementSeesOnlyItsOwnKeys) {
  AttentionOptions options;
  options.causal = true;
  options.rope = Rope::Default(kDim);
  options.alibi = Alibi{.num_heads = kHeads};
  const std::vector<float> q = RandomNormal(kBatch * kElement, 4),
                           k = RandomNormal(kBatch * kElement, 5),
                           v = RandomNormal(kBatch * kElement, 6);
  std::vector<float> out(kBatch * kElement), want(out.size());
  const auto in = [](const std::vector<float>& data) {
    return Batched<Heads<const float>>(Transposed(const_cast<float*>(data.data())));
  };
  Attention(options, in(q), in(k), in(v), PerElement(), PerElement(), Transposed(out.data()));
  for (int64_t b = 0; b < kBatch; ++b) {
    const auto positions = std::span(kPositions).subspan(b * kTokens, kTokens);
    AttentionReference(options, in(q).At(b), in(k).At(b), in(v).At(b), positions, positions,
                       Transposed(want.data()).At(b));
  }
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5f) << i;
}

TEST(Batch, BackwardSumsTheSinksGradientOverTheBatch) {
  AttentionOptions options;
  options.causal = true;
  options.rope = Rope::Default(kDim);
  const std::vector<float> sinks{0.5f, -1.0f, 2.0f};
  options.sinks = sinks;
  const std::vector<float> q = RandomNormal(kBatch * kElement, 7),
                           k = RandomNormal(kBatch * kElement, 8),
                           v = RandomNormal(kBatch * kElement, 9),
                           d_out = RandomNormal(kBatch * kElement, 10);
  const auto in = [](const std::vector<float>& data) {
    return Batched<Heads<const float>>(Transposed(const_cast<float*>(data.data())));
  };
  std::vector<float> out(kBatch * kElement), lse(kBatch * kTokens * kHeads);
  AttentionForward(options, in(q), in(k), in(v), PerElement(), PerElement(), Transposed(out.data()),
                   lse);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), d_sinks(sinks.size());
  AttentionBackward(
      options, in(q), in(k), in(v), PerElement(), PerElement(), in(out), lse, in(d_out),
      {Transposed(dq.data()), Transposed(dk.data()), Transposed(dv.data()), {}, d_sinks});
  std::vector<float> want_dq(q.size()), want_dk(k.size()), want_dv(v.size());
  std::vector<double> want_sinks(sinks.size(), 0.0);
  for (int64_t b = 0; b < kBatch; ++b) {
    const auto positions = std::span(kPositions).subspan(b * kTokens, kTokens);
    std::vector<float> element_sinks(sinks.size());
    AttentionBackwardReference(options, in(q).At(b), in(k).At(b), in(v).At(b), positions, positions,
                               in(d_out).At(b),
                               {Transposed(want_dq.data()).At(b),
                                Transposed(want_dk.data()).At(b),
                                Transposed(want_dv.data()).At(b),
                                {},
                                element_sinks});
    for (size_t h = 0; h < sinks.size(); ++h) want_sinks[h] += element_sinks[h];
  }
  for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], want_dq[i], 2e-5f) << i;
  for (size_t i = 0; i < dk.size(); ++i) ASSERT_NEAR(dk[i], want_dk[i], 2e-5f) << i;
  for (size_t i = 0; i < dv.size(); ++i) ASSERT_NEAR(dv[i], want_dv[i], 2e-5f) << i;
  for (size_t h = 0; h < sinks.size(); ++h) EXPECT_NEAR(d_sinks[h], want_sinks[h], 2e-5) << h;
}

TEST(Batch, ALaterElementsErrorNamesItAndNothingIsWritten) {
  const Rope rope = Rope::Default(kDim);
  std::vector<int64_t> positions = kPositions;
  positions[kTokens + 2] = -5;
  std::vector<float> x(kBatch * kElement, 7.0f);
  ExpectError([&] { ApplyRope<float>(rope, PerElement(positions), Transposed(x.data())); },
              "[rope] positions[2] must be >= 0, got -5 (in batch element 1)");
  for (float value : x) ASSERT_EQ(value, 7.0f);
}

TEST(Batch, MemorySharedAcrossElementsIsRefusedBeforeAnyWrite) {
  const Rope rope = Rope::Default(kDim);
  std::vector<float> x(kBatch * kElement, 7.0f);
  // Every element is the same memory: a writeable broadcast.
  Batched<Heads<float>> broadcast = Transposed(x.data());
  broadcast.batch_strides = {0};
  ExpectError([&] { ApplyRope<float>(rope, PerElement(), broadcast); },
              "[rope] x must not have batch elements that share memory, got strides (0, 32, 128, "
              "4)");
  // Out of place, the output of element 0 is the input of element 1 (the batch reversed):
  // each element alone is fine.
  Batched<Heads<const float>> reversed = Transposed<const float>(x.data() + kElement);
  reversed.batch_strides = {-kElement};
  ExpectError([&] { ApplyRope<float>(rope, PerElement(), reversed, Transposed(x.data())); },
              "[rope] x_out must not share memory with x_in, got overlapping views");
  for (float value : x) ASSERT_EQ(value, 7.0f);
}

TEST(Batch, PositionsWithAnotherBatchShapeAreRefused) {
  const Rope rope = Rope::Default(kDim);
  std::vector<float> x(kBatch * kElement);
  const BatchedPositions three(std::span<const int64_t>(kPositions).first(kTokens), {3}, {0});
  ExpectError([&] { ApplyRope<float>(rope, three, Transposed(x.data())); },
              "[rope] positions.batch_shape must equal x.batch_shape (2,), got (3,)");
}

// The aliasing check across a batch is exact: against every pair of rows, on random batched
// views of one small buffer.
TEST(Batch, ShareRowsAgreesWithBruteForceOnRandomBatchedViews) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> count(1, 3), stride(0, 24), offset(0, 40);
  constexpr int64_t kRow = 4;  // bytes
  const auto random_set = [&] {
    std::vector<internal::RowSet::Dim> dims;
    for (int d = 0; d < 3; ++d) dims.push_back({count(rng), stride(rng)});
    return std::pair{offset(rng), dims};
  };
  const auto rows_of = [](int64_t base, const std::vector<internal::RowSet::Dim>& dims) {
    std::vector<int64_t> starts{base};
    for (const auto& dim : dims) {
      std::vector<int64_t> next;
      for (int64_t s : starts)
        for (int64_t i = 0; i < dim.count; ++i) next.push_back(s + i * dim.stride);
      starts = next;
    }
    return starts;
  };
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const auto [base_a, dims_a] = random_set();
    const auto [base_b, dims_b] = random_set();
    const internal::RowSet a(base_a, dims_a, kRow), b(base_b, dims_b, kRow);
    if (!a.Nested() && !b.Nested()) continue;  // the check's precondition
    bool brute = false;
    for (int64_t ra : rows_of(base_a, dims_a))
      for (int64_t rb : rows_of(base_b, dims_b))
        brute = brute || (ra < rb + kRow && rb < ra + kRow);
    ASSERT_EQ(internal::ShareRows(a, b), brute) << "trial " << trial;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace posenc
