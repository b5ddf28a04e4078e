// The SIMD RoPE kernel (behind ApplyRope) against its scalar twin ApplyRopeReference, on every
// compiled SIMD target, and the precision of its cos and sin against long double.
#include "rope_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "posenc/heads.h"
#include "posenc/rope.h"
#include "posenc/storage.h"
#include "simd/simd_targets_for_test.h"

namespace posenc {
namespace {

using testing_support::ForEachSimdTarget;

constexpr RopeLayout kLayouts[] = {RopeLayout::kHalfSplit, RopeLayout::kInterleaved};
constexpr RopeDirection kDirections[] = {RopeDirection::kForward, RopeDirection::kInverse};

// The largest float vector of any target has 16 lanes (AVX-512); pair counts 1 .. 2 * 16 + 1
// cover no full vector, one, two and every tail length.
constexpr int64_t kMaxLanes = 16;

// How far the kernel (float32 arithmetic, float32 cos/sin) may be from the twin (double
// arithmetic), relative to |x0| + |x1| of the pair: float32 rounding of cos, sin and two FMAs,
// or one unit in the last place of the storage type when the two round to neighbours. float16
// adds an absolute floor for its subnormals.
struct Tolerance {
  double relative;
  double absolute;
};
template <typename T>
constexpr Tolerance kTolerance = {std::ldexp(1.0, -21), 0.0};  // float32: 4 ulps
template <>
constexpr Tolerance kTolerance<BFloat16> = {std::ldexp(1.0, -7), 0.0};  // 1 bfloat16 ulp
template <>
constexpr Tolerance kTolerance<Float16> = {std::ldexp(1.0, -10), std::ldexp(1.0, -24)};

// A buffer of T with `pad` elements before the data (to misalign it) and a sentinel everywhere,
// so that writes outside a view are detected.
template <typename T>
struct Buffer {
  std::vector<T> storage;
  T* data;
  Buffer(size_t size, size_t pad) : storage(size + pad + 1, FromFloat<T>(-777.0f)) {
    data = storage.data() + pad;
  }
};

template <typename T>
std::vector<float> Floats(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = ToFloat(v[i]);
  return f;
}

struct Shape {
  int64_t tokens, heads, kv_heads, head_dim, rotary_dim;
  int64_t rotary_offset;  // features before the rotated block (DeepSeek MLA: 128 of 192)
  bool heads_outer;       // [heads, tokens] order (Hugging Face's [batch, heads, seq, dim])
  int64_t gap;            // extra elements between rows: a strided view
  size_t pad;             // elements before the data: a misaligned pointer
};

// A view of `shape` over buf, [tokens, heads] or [heads, tokens] with row gaps.
template <typename T>
Heads<T> View(T* data, const Shape& s, int64_t heads) {
  const int64_t row = s.head_dim + s.gap;
  Heads<T> v{data, s.tokens, heads, s.head_dim, heads * row, row};
  if (s.heads_outer) v.token_stride = row, v.head_stride = s.tokens * row;
  return v;
}

template <typename T>
void ExpectNearTwin(const std::vector<T>& got, const std::vector<T>& want,
                    const std::vector<T>& input, const Heads<const T>& view, const Rope& rope,
                    const std::string& what) {
  const Tolerance tol = kTolerance<T>;
  const int64_t half = rope.rotary_dim / 2;
  const bool interleaved = rope.layout == RopeLayout::kInterleaved;
  const size_t base = static_cast<size_t>(view.data - input.data());
  for (int64_t t = 0; t < view.tokens; ++t) {
    for (int64_t h = 0; h < view.num_heads; ++h) {
      const size_t row = base + static_cast<size_t>(t * view.token_stride + h * view.head_stride);
      for (int64_t i = 0; i < half; ++i) {
        const size_t j0 = row + static_cast<size_t>(rope.rotary_offset) + (interleaved ? 2 * i : i);
        const size_t j1 = j0 + (interleaved ? 1 : half);
        const double scale = std::abs(ToFloat(input[j0])) + std::abs(ToFloat(input[j1]));
        const double bound = tol.relative * scale * rope.attention_factor + tol.absolute;
        for (const size_t j : {j0, j1}) {
          ASSERT_NEAR(ToFloat(got[j]), ToFloat(want[j]), bound)
              << what << " token " << t << " head " << h << " pair " << i;
        }
      }
    }
  }
}

// Runs one shape through the in-place q+k and out-of-place q+k ApplyRope and the twin.
template <typename T>
void CheckShape(const Shape& s, RopeLayout layout, RopeDirection direction, uint32_t seed) {
  Rope rope = Rope::Default(s.head_dim, 10000.0, layout, s.rotary_dim, s.rotary_offset);
  rope.attention_factor = seed % 3 == 0 ? 1.25 : 1.0;
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> pos_dist(0, int64_t{1} << 24);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int64_t> positions(s.tokens);
  for (auto& p : positions) p = pos_dist(gen);
  positions[0] = int64_t{1} << 24;

  const int64_t row = s.head_dim + s.gap;
  const size_t q_size = static_cast<size_t>(s.tokens * s.heads * row);
  const size_t k_size = static_cast<size_t>(s.tokens * s.kv_heads * row);
  Buffer<T> q(q_size, s.pad), k(k_size, s.pad);
  for (size_t j = 0; j < q_size; ++j) q.data[j] = FromFloat<T>(normal(gen));
  for (size_t j = 0; j < k_size; ++j) k.data[j] = FromFloat<T>(normal(gen));
  const Heads<T> qv = View(q.data, s, s.heads), kv = View(k.data, s, s.kv_heads);

  // The twin, out of place into copies of the buffers (so gaps keep their input values).
  Buffer<T> q_want = q, k_want = k;
  q_want.data = q_want.storage.data() + s.pad;
  k_want.data = k_want.storage.data() + s.pad;
  ApplyRopeReference(rope, positions, Heads<const T>(qv), View(q_want.data, s, s.heads), direction);
  ApplyRopeReference(rope, positions, Heads<const T>(kv), View(k_want.data, s, s.kv_heads),
                     direction);

  // In place, q and k in one call.
  Buffer<T> q_in_place = q, k_in_place = k;
  q_in_place.data = q_in_place.storage.data() + s.pad;
  k_in_place.data = k_in_place.storage.data() + s.pad;
  ApplyRope(rope, positions, View(q_in_place.data, s, s.heads),
            View(k_in_place.data, s, s.kv_heads), direction);

  // Out of place, q and k in one call, into buffers that start as copies of the input.
  Buffer<T> q_out = q, k_out = k;
  q_out.data = q_out.storage.data() + s.pad;
  k_out.data = k_out.storage.data() + s.pad;
  ApplyRope(rope, positions, Heads<const T>(qv), View(q_out.data, s, s.heads), Heads<const T>(kv),
            View(k_out.data, s, s.kv_heads), direction);

  for (const auto* got : {&q_in_place, &q_out}) {
    ExpectNearTwin(got->storage, q_want.storage, q.storage,
                   Heads<const T>(View(q.data, s, s.heads)), rope, "q");
  }
  for (const auto* got : {&k_in_place, &k_out}) {
    ExpectNearTwin(got->storage, k_want.storage, k.storage,
                   Heads<const T>(View(k.data, s, s.kv_heads)), rope, "k");
  }
  // Whatever the twin left alone (pass-through features, gaps between rows, the padding and the
  // sentinel) the kernel leaves alone too: equal bits outside the rotated features.
  auto rotated = [&](size_t j, int64_t heads) {
    if (j < s.pad) return false;
    const int64_t e = static_cast<int64_t>(j - s.pad);
    if (e >= s.tokens * heads * row) return false;
    return e % row >= s.rotary_offset && e % row < s.rotary_offset + s.rotary_dim;
  };
  for (size_t j = 0; j < q.storage.size(); ++j) {
    if (rotated(j, s.heads)) continue;
    ASSERT_EQ(std::memcmp(&q_in_place.storage[j], &q_want.storage[j], sizeof(T)), 0) << j;
    ASSERT_EQ(std::memcmp(&q_out.storage[j], &q_want.storage[j], sizeof(T)), 0) << j;
  }
  for (size_t j = 0; j < k.storage.size(); ++j) {
    if (rotated(j, s.kv_heads)) continue;
    ASSERT_EQ(std::memcmp(&k_in_place.storage[j], &k_want.storage[j], sizeof(T)), 0) << j;
    ASSERT_EQ(std::memcmp(&k_out.storage[j], &k_want.storage[j], sizeof(T)), 0) << j;
  }
}

template <typename T>
void CheckAllShapes() {
  ForEachSimdTarget([](int64_t) {
    uint32_t seed = 1;
    for (const RopeLayout layout : kLayouts) {
      for (int64_t pairs = 1; pairs <= 2 * kMaxLanes + 1; ++pairs) {
        const RopeDirection direction = kDirections[pairs % 2];
        const int64_t rotary_dim = 2 * pairs;
        // Features before the rotated block: none, odd counts (the block starts misaligned)
        // and a whole vector's worth.
        constexpr int64_t kOffsets[] = {0, 1, 3, 8};
        const int64_t rotary_offset = kOffsets[(pairs / 2) % 4];
        const int64_t head_dim = rotary_offset + rotary_dim + (pairs % 3 == 0 ? 3 : 0);
        const Shape shape{1 + pairs % 4,
                          1 + pairs % 3,
                          1 + pairs % 2,
                          head_dim,
                          rotary_dim,
                          rotary_offset,
                          pairs % 4 == 1,
                          pairs % 5 == 0 ? 5 : 0,
                          static_cast<size_t>(pairs % 3)};
        SCOPED_TRACE("pairs " + std::to_string(pairs) + " layout " +
                     std::to_string(static_cast<int>(layout)));
        CheckShape<T>(shape, layout, direction, seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // A large call, which takes the threaded path.
    CheckShape<T>({300, 8, 2, 128, 128, 0, false, 0, 1}, RopeLayout::kHalfSplit,
                  RopeDirection::kForward, 99);
    CheckShape<T>({300, 8, 2, 96, 64, 0, true, 3, 0}, RopeLayout::kInterleaved,
                  RopeDirection::kInverse, 98);
    // DeepSeek V2/V3 MLA: 128 unrotated features, then 64 rotated, in a head of 192.
    CheckShape<T>({300, 8, 2, 192, 64, 128, false, 0, 1}, RopeLayout::kInterleaved,
                  RopeDirection::kForward, 97);
  });
}

TEST(RopeKernel, Float32MatchesTheTwinOnEveryTarget) { CheckAllShapes<float>(); }
TEST(RopeKernel, BFloat16MatchesTheTwinOnEveryTarget) { CheckAllShapes<BFloat16>(); }
TEST(RopeKernel, Float16MatchesTheTwinOnEveryTarget) { CheckAllShapes<Float16>(); }

TEST(RopeKernel, DispatchFollowsTheSelectedTarget) {
  ForEachSimdTarget(
      [](int64_t target) { EXPECT_STREQ(internal::KernelTargetName(), hwy::TargetName(target)); });
}

// ---------------------------------------------------------------------------------------------
// Precision: rotating the unit vector e0 = (1, 0) of each pair yields (cos, sin) exactly as the
// kernel uses them (1 * c - 0 * s = c in float32), so the kernel's cos and sin can be held to
// the exact values: cos and sin of pos * inv_freq in long double (64-bit mantissa: the product
// is within 2^-40 rad of exact below 2^24).

// Units in the last place of a float32 near x, with a floor: values below 2^-16 count in ulps of
// 2^-16 (2^-39), since no float32 computation is asked to resolve an angle to better than that.
double Float32Ulp(long double x) {
  const double ax = std::max(static_cast<double>(std::fabs(x)), std::ldexp(1.0, -16));
  int exponent;
  std::frexp(ax, &exponent);
  return std::ldexp(1.0, exponent - 24);
}

std::vector<double> GoldenInvFreq(const std::string& name) {
  std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/hf_rope/" + name + ".json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return j.at("inv_freq_hf_f32").get<std::vector<double>>();
}

// The largest error of the kernel's cos and sin, in float32 ulps, over the given positions.
double MaxUlpError(const std::vector<double>& inv_freq, const std::vector<int64_t>& positions) {
  const int64_t pairs = static_cast<int64_t>(inv_freq.size());
  Rope rope;
  rope.head_dim = rope.rotary_dim = 2 * pairs;
  rope.inv_freq = inv_freq;
  const int64_t tokens = static_cast<int64_t>(positions.size());
  std::vector<float> x(static_cast<size_t>(tokens * 2 * pairs), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < pairs; ++i) x[t * 2 * pairs + i] = 1.0f;  // half-split: (1, 0)
  }
  ApplyRope(rope, positions, Heads<float>::Dense(x.data(), tokens, 1, 2 * pairs));
  double worst = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < pairs; ++i) {
      const long double angle = static_cast<long double>(positions[t]) * inv_freq[i];
      const long double c = cosl(angle), s = sinl(angle);
      const float got_c = x[t * 2 * pairs + i], got_s = x[t * 2 * pairs + pairs + i];
      worst = std::max(worst, static_cast<double>(std::fabs(got_c - c)) / Float32Ulp(c));
      worst = std::max(worst, static_cast<double>(std::fabs(got_s - s)) / Float32Ulp(s));
    }
  }
  return worst;
}

TEST(RopeKernel, CosAndSinWithinTwoFloat32UlpsUpTo2To24) {
  std::vector<int64_t> positions;
  std::mt19937_64 gen(2024);
  std::uniform_int_distribution<int64_t> pos_dist(0, int64_t{1} << 24);
  for (int i = 0; i < 2000; ++i) positions.push_back(pos_dist(gen));
  for (int64_t p : {0LL, 1LL, 131071LL, 1000000LL, (1LL << 24) - 1, 1LL << 24}) {
    positions.push_back(p);
  }
  // Runs of consecutive positions, which the kernel advances by rotation steps between exact
  // restarts: at the start, in the middle and at the end of the range.
  for (int64_t start : {0LL, 5000000LL, (1LL << 24) - 299}) {
    for (int64_t p = start; p < start + 300; ++p) positions.push_back(p);
  }
  const std::vector<std::pair<std::string, std::vector<double>>> frequency_sets = {
      {"default base 1e4, rotary_dim 128", DefaultInvFreq(10000.0, 128)},
      {"base 5e5, rotary_dim 128", DefaultInvFreq(500000.0, 128)},
      {"base 1e6, rotary_dim 64", DefaultInvFreq(1e6, 64)},
      {"llama3_1_8b inv_freq_hf_f32", GoldenInvFreq("llama3_1_8b")},
      {"qwen2_5_7b_instruct_yarn4 inv_freq_hf_f32", GoldenInvFreq("qwen2_5_7b_instruct_yarn4")},
      {"deepseek_v3_yarn inv_freq_hf_f32", GoldenInvFreq("deepseek_v3_yarn")},
      {"gpt_neox_20b inv_freq_hf_f32", GoldenInvFreq("gpt_neox_20b")},
  };
  ForEachSimdTarget([&](int64_t) {
    for (const auto& [name, inv_freq] : frequency_sets) {
      EXPECT_LE(MaxUlpError(inv_freq, positions), 2.0) << name;
    }
  });
}

}  // namespace
}  // namespace posenc
