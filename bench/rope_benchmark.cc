// Google Benchmark suite: the same shapes as `posenc bench`, for profiling one case at a time
// (--benchmark_filter) and for Google Benchmark's statistics. bytes_per_second is bytes moved:
// every element of q and k read once and written once.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "posenc/heads.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/sinusoidal.h"
#include "posenc/storage.h"
#include "stream.h"

namespace posenc {
namespace {

constexpr int64_t kTokens = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int64_t kElements = kTokens * (kHeads + kKvHeads) * kHeadDim;

void BM_StreamCopy(benchmark::State& state) {
  std::vector<float> a(kElements, 1.0f), b(kElements);
  for (auto _ : state) bench::StreamCopy(a.data(), b.data(), a.size());
  state.SetBytesProcessed(state.iterations() * 2 * kElements * int64_t{sizeof(float)});
}
BENCHMARK(BM_StreamCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_StreamReadModifyWrite(benchmark::State& state) {
  std::vector<float> a(kElements, 1.0f);
  for (auto _ : state) bench::StreamScaleInPlace(a.data(), a.size(), 0.999f);
  state.SetBytesProcessed(state.iterations() * 2 * kElements * int64_t{sizeof(float)});
}
BENCHMARK(BM_StreamReadModifyWrite)->UseRealTime()->Unit(benchmark::kMillisecond);

// state.range(0): 0 half-split, 1 interleaved; range(1): 1 in place, 0 out of place.
template <typename T>
void BM_Rope(benchmark::State& state) {
  const Rope rope = Rope::Default(
      kHeadDim, 10000.0, state.range(0) ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit);
  const std::vector<int64_t> positions = PositionRange(0, kTokens);
  std::vector<T> q(kTokens * kHeads * kHeadDim, FromFloat<T>(0.5f));
  std::vector<T> k(kTokens * kKvHeads * kHeadDim, FromFloat<T>(0.25f));
  std::vector<T> q_out(q.size()), k_out(k.size());
  auto qv = Heads<T>::Dense(q.data(), kTokens, kHeads, kHeadDim);
  auto kv = Heads<T>::Dense(k.data(), kTokens, kKvHeads, kHeadDim);
  for (auto _ : state) {
    if (state.range(1)) {
      ApplyRope(rope, positions, qv, kv);
    } else {
      ApplyRope(rope, positions, Heads<const T>(qv),
                Heads<T>::Dense(q_out.data(), kTokens, kHeads, kHeadDim), Heads<const T>(kv),
                Heads<T>::Dense(k_out.data(), kTokens, kKvHeads, kHeadDim));
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * kElements * int64_t{sizeof(T)});
}
BENCHMARK(BM_Rope<float>)
    ->ArgsProduct({{0, 1}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Rope<BFloat16>)
    ->ArgsProduct({{0, 1}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_RopeReference(benchmark::State& state) {
  const Rope rope = Rope::Default(
      kHeadDim, 10000.0, state.range(0) ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit);
  const std::vector<int64_t> positions = PositionRange(0, kTokens);
  std::vector<float> q(kTokens * kHeads * kHeadDim, 0.5f), k(kTokens * kKvHeads * kHeadDim, 0.25f);
  auto qv = Heads<float>::Dense(q.data(), kTokens, kHeads, kHeadDim);
  auto kv = Heads<float>::Dense(k.data(), kTokens, kKvHeads, kHeadDim);
  for (auto _ : state) {
    ApplyRopeReference(rope, positions, qv, qv, RopeDirection::kForward);
    ApplyRopeReference(rope, positions, kv, kv, RopeDirection::kForward);
  }
  state.SetBytesProcessed(state.iterations() * 2 * kElements * int64_t{sizeof(float)});
}
BENCHMARK(BM_RopeReference)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_RopeDecodeStep(benchmark::State& state) {
  const Rope rope = Rope::Default(kHeadDim);
  const std::vector<int64_t> position = {kTokens - 1};
  std::vector<float> q(kHeads * kHeadDim, 0.5f), k(kKvHeads * kHeadDim, 0.25f);
  for (auto _ : state) {
    ApplyRope(rope, position, Heads<float>::Dense(q.data(), 1, kHeads, kHeadDim),
              Heads<float>::Dense(k.data(), 1, kKvHeads, kHeadDim));
    benchmark::DoNotOptimize(q.data());
  }
}
BENCHMARK(BM_RopeDecodeStep)->Unit(benchmark::kNanosecond);

void BM_SinusoidalTable(benchmark::State& state) {
  const int64_t tokens = 131072, dim = 1024;
  std::vector<float> table(tokens * dim);
  for (auto _ : state) FillSinusoidalTable(Sinusoidal{.dim = dim}, tokens, table);
  state.SetBytesProcessed(state.iterations() * tokens * dim * int64_t{sizeof(float)});
}
BENCHMARK(BM_SinusoidalTable)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace posenc

BENCHMARK_MAIN();
