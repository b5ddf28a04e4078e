// The scratch pool (scratch_memory.h): a freed block comes back to the next call that fits it,
// aligned, within the pool's limits, from any thread; ScratchVector holds what it is given; and
// Attention's large buffers come back to its next call.
#include "simd/scratch_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "posenc/attention.h"
#include "posenc/heads.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/runtime.h"

namespace posenc::internal {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kScratchAlignment == 0; }

TEST(ScratchMemory, AFreedBlockServesTheNextCallThatFitsIt) {
  FreeKeptScratch();
  void* first = AcquireScratch(4 * kMiB);
  ReleaseScratch(first, 4 * kMiB);
  EXPECT_GE(KeptScratchBytes(), 4 * kMiB);
  void* again = AcquireScratch(4 * kMiB);
  EXPECT_EQ(again, first);
  EXPECT_EQ(KeptScratchBytes(), 0u);
  ReleaseScratch(again, 4 * kMiB);
  // A size a little larger (a decode step one token longer) fits the same block: blocks reach
  // past their size to the next eighth of its power of two.
  void* longer = AcquireScratch(4 * kMiB + 64 * 1024);
  EXPECT_EQ(longer, first);
  ReleaseScratch(longer, 4 * kMiB + 64 * 1024);
  // A block more than twice the size asked for is not handed out: a new one is made.
  void* small = AcquireScratch(kMiB);
  EXPECT_NE(small, first);
  ReleaseScratch(small, kMiB);
  FreeKeptScratch();
  EXPECT_EQ(KeptScratchBytes(), 0u);
}

TEST(ScratchMemory, BlocksAreAlignedForEverySimdTarget) {
  FreeKeptScratch();
  for (const size_t bytes : {size_t{1}, size_t{100}, size_t{4096} + 4, kMiB - 1, kMiB, 3 * kMiB}) {
    void* block = AcquireScratch(bytes);
    EXPECT_TRUE(Aligned(block)) << bytes << " bytes at " << block;
    ReleaseScratch(block, bytes);
  }
  // Below kScratchPoolMinBytes blocks are malloc's and never kept.
  void* small = AcquireScratch(kScratchPoolMinBytes - 1);
  ReleaseScratch(small, kScratchPoolMinBytes - 1);
  FreeKeptScratch();
  void* tiny = AcquireScratch(1000);
  ReleaseScratch(tiny, 1000);
  EXPECT_EQ(KeptScratchBytes(), 0u);
}

TEST(ScratchMemory, KeepsAtMostItsBlocksAndBytes) {
  FreeKeptScratch();
  std::vector<void*> blocks;
  for (size_t i = 0; i < kScratchPoolBlocks + 3; ++i) blocks.push_back(AcquireScratch(2 * kMiB));
  for (void* block : blocks) ReleaseScratch(block, 2 * kMiB);
  EXPECT_GT(KeptScratchBytes(), kScratchPoolBlocks * 2 * kMiB);  // 8 blocks of 2.25 MiB
  EXPECT_LE(KeptScratchBytes(), kScratchPoolBlocks * 5 * kMiB / 2);
  // The newest are kept: the last released block is the first handed out again.
  void* again = AcquireScratch(2 * kMiB);
  bool among_newest = false;
  for (size_t i = 3; i < blocks.size(); ++i) among_newest |= again == blocks[i];
  EXPECT_TRUE(among_newest);
  ReleaseScratch(again, 2 * kMiB);
  // A block larger than the pool's byte limit is freed, not kept (never touched: no memory used).
  const size_t huge = kScratchPoolMaxBytes + kMiB;
  void* block = AcquireScratch(huge);
  const size_t kept = KeptScratchBytes();
  ReleaseScratch(block, huge);
  EXPECT_EQ(KeptScratchBytes(), kept);
  FreeKeptScratch();
}

TEST(ScratchMemory, ThreadsShareThePoolSafely) {
  FreeKeptScratch();
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < 400; ++i) {
    const size_t bytes = (1 + i % 5) * kMiB;
    auto* block = static_cast<unsigned char*>(AcquireScratch(bytes));
    block[0] = block[bytes - 1] = static_cast<unsigned char>(i);
    ReleaseScratch(block, bytes);
  }
  EXPECT_LE(KeptScratchBytes(), kScratchPoolBlocks * 6 * kMiB);
  FreeKeptScratch();
  EXPECT_EQ(KeptScratchBytes(), 0u);
}

TEST(ScratchMemory, ScratchVectorHoldsWhatItIsGiven) {
  FreeKeptScratch();
  ScratchVector<float> v(kMiB, 1.5f);  // 4 MiB: from the pool
  EXPECT_TRUE(Aligned(v.data()));
  for (const float x : v) ASSERT_EQ(x, 1.5f);
  v.resize(2 * kMiB);  // new elements default-initialized: written before they are read
  v[2 * kMiB - 1] = 2.0f;
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v.back(), 2.0f);
  const void* data = v.data();
  v = ScratchVector<float>();
  ScratchVector<float> w(2 * kMiB);
  EXPECT_EQ(static_cast<const void*>(w.data()), data);  // the freed block, reused
  FreeKeptScratch();
}

TEST(ScratchMemory, AttentionKeepsItsLargeBuffersForTheNextCall) {
  // A prefill with RoPE: q and k rotated into 2 MiB copies, key tiles packed into 4 MiB.
  FreeKeptScratch();
  constexpr int64_t kTokens = 512, kHeads = 8, kDim = 128;
  const std::vector<float> x(kTokens * kHeads * kDim, 0.25f);
  std::vector<float> out(x.size());
  const std::vector<int64_t> pos = PositionRange(0, kTokens);
  AttentionOptions options{.causal = true};
  options.rope = Rope::Default(kDim);
  const auto view = Heads<const float>::Dense(x.data(), kTokens, kHeads, kDim);
  const auto call = [&] {
    Attention(options, view, view, view, pos, pos,
              Heads<float>::Dense(out.data(), kTokens, kHeads, kDim));
  };
  call();
  const size_t kept = KeptScratchBytes();
  EXPECT_GE(kept, 2 * 2 * kMiB + 4 * kMiB);
  call();  // the same blocks again: nothing new kept
  EXPECT_EQ(KeptScratchBytes(), kept);
  FreeKeptScratch();
  EXPECT_EQ(KeptScratchBytes(), 0u);
}

}  // namespace
}  // namespace posenc::internal
