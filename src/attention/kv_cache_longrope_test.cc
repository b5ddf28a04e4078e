// A LongRoPE KV cache across original_max_position_embeddings, against transformers 5.23.0's own
// Phi-3 (tests/golden/longrope_kv_cache/): generate(), which drops its cache at the crossing and
// recomputes the sequence with the long factors (crossing kRecompute), and a plain forward loop,
// whose cached keys keep the short factors (kKeepRotation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/kv_cache.h"
#include "posenc/model_positions.h"
#include "posenc/rope.h"

namespace posenc {
namespace {

using Json = nlohmann::json;

const Json& Golden() {
  static const Json golden = [] {
    std::ifstream in(std::string(POSENC_GOLDEN_DIR) + "/longrope_kv_cache/phi3.5-mini-shrunk.json");
    return Json::parse(in);
  }();
  return golden;
}

// [n][heads][dim] from the golden file, flattened.
std::vector<float> Flat(const Json& tensor) {
  std::vector<float> out;
  for (const Json& token : tensor) {
    for (const Json& head : token) {
      for (const Json& x : head) out.push_back(x.get<float>());
    }
  }
  return out;
}

constexpr int64_t kHeads = 2, kKvHeads = 1, kDim = 96, kL0 = 16;

// The cache as the model's config gives it: short factors at L0, long ones past it.
KvCacheOptions Options(LongRopeCrossing crossing, bool long_rope = true) {
  const ModelPositions model = DescribeModel(Golden()["config"].dump());
  const RopeScheme& scheme = std::get<RopeScheme>(model.scheme);
  const RopeLayerScheme& layer = scheme.layers.front();
  KvCacheOptions o{.capacity = 32, .kv_heads = kKvHeads, .head_dim = kDim};
  o.rope = MakeRope(scheme, layer, {.seq_len = kL0});
  if (long_rope) {
    o.long_rope = MakeRope(scheme, layer, {.seq_len = kL0 + 1});
    o.long_rope_threshold = kL0;
  }
  o.crossing = crossing;
  return o;
}

struct Step {
  std::vector<int64_t> positions;
  std::vector<float> q, k, v, out;
  int64_t n() const { return static_cast<int64_t>(positions.size()); }
};

Step Read(const Json& step) {
  return {step["positions"].get<std::vector<int64_t>>(), Flat(step["q"]), Flat(step["k"]),
          Flat(step["v"]), Flat(step["out"])};
}

// The largest difference from Hugging Face's attention output of this step.
double Attend(const KvCache<float>& cache, const Step& s) {
  std::vector<float> out(s.out.size());
  AttentionOptions options;
  options.causal = true;
  cache.Attend(options, Heads<const float>::Dense(s.q.data(), s.n(), kHeads, kDim), s.positions,
               Heads<float>::Dense(out.data(), s.n(), kHeads, kDim));
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - s.out[i]));
  }
  return worst;
}

void Append(KvCache<float>& cache, const Step& s) {
  cache.Append(s.positions, Heads<const float>::Dense(s.k.data(), s.n(), kKvHeads, kDim),
               Heads<const float>::Dense(s.v.data(), s.n(), kKvHeads, kDim));
}

constexpr double kTolerance = 2e-6;  // float32 attention of values below 1 over 24 keys

TEST(KvCacheLongRope, GenerateRecomputesAtTheCrossingAsPhi3Does) {
  KvCache<float> cache(Options(LongRopeCrossing::kRecompute));
  int recomputed = 0;
  for (const Json& json : Golden()["runs"]["generate"]) {
    const Step s = Read(json);
    if (s.positions.front() == 0 && cache.size() > 0) {
      // Hugging Face recomputed here: appending the new token alone is refused, untouched.
      ASSERT_EQ(cache.size(), kL0);
      const int64_t last = s.n() - 1;
      Step alone{{s.positions[last]},
                 {},
                 {s.k.begin() + last * kDim, s.k.end()},
                 {s.v.begin() + last * kDim, s.v.end()},
                 {}};
      try {
        Append(cache, alone);
        ADD_FAILURE() << "the crossing was not refused";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "[kv_cache] k.tokens must keep a LongRoPE cache of size 16 within "
                  "original_max_position_embeddings (16): there Phi-3's generate() drops its "
                  "cache and recomputes the whole sequence with the long factors; Clear() and "
                  "append every token's recomputed k and v (crossing kKeepRotation keeps the "
                  "cached keys as a plain forward does), got 1");
      }
      EXPECT_EQ(cache.size(), kL0);
      cache.Clear();
      ++recomputed;
    }
    Append(cache, s);
    EXPECT_LE(Attend(cache, s), kTolerance) << "positions from " << s.positions.front();
  }
  EXPECT_EQ(recomputed, 1);
  EXPECT_EQ(cache.size(), 23);
}

TEST(KvCacheLongRope, AForwardLoopKeepsTheCachedKeysRotation) {
  KvCache<float> cache(Options(LongRopeCrossing::kKeepRotation));
  int crossed = 0;
  for (const Json& json : Golden()["runs"]["forward"]) {
    const Step s = Read(json);
    Append(cache, s);
    EXPECT_LE(Attend(cache, s), kTolerance) << "positions from " << s.positions.front();
    crossed += s.positions.back() >= kL0;
  }
  EXPECT_EQ(crossed, 8);
}

TEST(KvCacheLongRope, ShortFactorsAloneSplitFromHuggingFaceAtTheCrossing) {
  // Without long_rope (the cache before LongRoPE support): exact up to L0, wrong past it.
  KvCache<float> cache(Options(LongRopeCrossing::kKeepRotation, /*long_rope=*/false));
  for (const Json& json : Golden()["runs"]["forward"]) {
    const Step s = Read(json);
    Append(cache, s);
    if (s.positions.back() < kL0) {
      EXPECT_LE(Attend(cache, s), kTolerance);
    } else {
      EXPECT_GT(Attend(cache, s), 1e-3) << "positions from " << s.positions.front();
    }
  }
}

TEST(KvCacheLongRope, BadOptionsAndShiftsAreRefused) {
  KvCacheOptions o = Options(LongRopeCrossing::kRecompute);
  o.long_rope_threshold = 0;
  EXPECT_THROW(KvCache<float>{o}, Error);
  o = Options(LongRopeCrossing::kRecompute);
  o.long_rope->rotary_dim = 64;
  o.long_rope->inv_freq.resize(32);
  EXPECT_THROW(KvCache<float>{o}, Error);
  o = Options(LongRopeCrossing::kRecompute);
  o.rope.reset();
  EXPECT_THROW(KvCache<float>{o}, Error);
  o = Options(static_cast<LongRopeCrossing>(5));
  EXPECT_THROW(KvCache<float>{o}, Error);
  KvCache<float> cache(Options(LongRopeCrossing::kKeepRotation));
  Append(cache, Read(Golden()["runs"]["forward"][0]));
  EXPECT_THROW(cache.ContextShift(2, 3), Error);
  EXPECT_THROW(cache.ShiftPositions(0, 4, 1), Error);
  EXPECT_EQ(cache.size(), 12);
  EXPECT_EQ(cache.Positions()[11], 11);
}

}  // namespace
}  // namespace posenc
