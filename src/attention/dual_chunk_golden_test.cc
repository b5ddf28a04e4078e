// Dual chunk attention (posenc/dual_chunk.h) against vLLM's own code (tests/golden/dca_vllm/,
// README.md there): the rotation positions of DualChunkRotaryEmbedding at the published
// Qwen2.5-7B-Instruct-1M values, its rotated q and k, and the output of the dual-chunk attention
// backend's prefill and decode paths, on the published geometry shrunk in length and two more.
//
// vLLM forms angles as float32 products and merges its parts with float32 log-sum-exp weights;
// posenc's reference works in double. The outputs may differ by that float32 rounding (about 1e-6
// on these inputs, values of size about 1); positions are integers and must agree exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "posenc/attention.h"
#include "posenc/dual_chunk.h"
#include "posenc/heads.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "simd/simd_targets_for_test.h"
#include "test_support.h"

namespace posenc {
namespace {

using nlohmann::json;
using testing_support::ForEachSimdTarget;
using testing_support::GoldenJson;

// vLLM's float32 angles and merge against posenc's double reference; the fused kernel adds its
// own float32 rounding (kTolerance of dual_chunk_test.cc).
constexpr double kGoldenTolerance = 2e-5;
constexpr double kKernelGoldenTolerance = 4e-5;
// vLLM's rotated values: float32 cos and sin of a float32 angle (position * inv_freq, positions
// below 2^7 here), times values below 2 in size.
constexpr double kRopeTolerance = 1e-5;

// The golden inputs: x[t, h, d] = ((131 t + 71 h + 29 d + 17 salt) mod 251 - 125) / 64, exact in
// float32 (README.md), over [tokens, heads, dim].
std::vector<float> GoldenInput(int64_t tokens, int64_t heads, int64_t dim, int64_t salt) {
  std::vector<float> x(static_cast<size_t>(tokens * heads * dim));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        const int64_t r = (t * 131 + h * 71 + d * 29 + salt * 17) % 251;
        x[static_cast<size_t>((t * heads + h) * dim + d)] = static_cast<float>(r - 125) / 64.0f;
      }
    }
  }
  return x;
}

DualChunk DualChunkOf(const json& c) {
  return {.chunk_size = c["chunk_size"].get<int64_t>(),
          .local_size = c["local_size"].get<int64_t>(),
          .original_max_position_embeddings = c["original_max_position_embeddings"].get<int64_t>()};
}

AttentionOptions OptionsOf(const json& c) {
  AttentionOptions options;
  options.causal = true;
  options.rope = Rope::Default(c["head_dim"].get<int64_t>(), c["rope_theta"].get<double>());
  return options;
}

void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want, double tolerance,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << what << ", element " << i;
  }
}

// One golden case's inputs, ready for the attention calls: q of `q_tokens` rows from token
// `first_query`, k and v of `kv_tokens` rows, at positions equal to their token indices.
struct GoldenCase {
  json c;
  DualChunk dca;
  AttentionOptions options;
  int64_t heads, kv_heads, dim, q_tokens, kv_tokens, first_query;
  std::vector<float> q, k, v;
  std::vector<int64_t> query_pos, key_pos;

  GoldenCase(const std::string& file, int64_t first_query_token, int64_t queries, int64_t keys)
      : c(GoldenJson("dca_vllm/" + file)),
        dca(DualChunkOf(c)),
        options(OptionsOf(c)),
        heads(c["num_heads"].get<int64_t>()),
        kv_heads(c["num_kv_heads"].get<int64_t>()),
        dim(c["head_dim"].get<int64_t>()),
        q_tokens(queries),
        kv_tokens(keys),
        first_query(first_query_token) {
    const std::vector<float> all_q = GoldenInput(keys, heads, dim, 1);
    q.assign(all_q.begin() + first_query * heads * dim, all_q.end());
    k = GoldenInput(keys, kv_heads, dim, 2);
    v = GoldenInput(keys, kv_heads, dim, 3);
    query_pos = PositionRange(first_query, queries);
    key_pos = PositionRange(0, keys);
  }
  Heads<const float> Q() const { return Heads<const float>::Dense(q.data(), q_tokens, heads, dim); }
  Heads<const float> K() const {
    return Heads<const float>::Dense(k.data(), kv_tokens, kv_heads, dim);
  }
  Heads<const float> V() const {
    return Heads<const float>::Dense(v.data(), kv_tokens, kv_heads, dim);
  }
  std::vector<float> Reference() const {
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
    DualChunkAttentionReference(options, dca, Q(), K(), V(), query_pos, key_pos,
                                Heads<float>::Dense(out.data(), q_tokens, heads, dim));
    return out;
  }
  std::vector<float> Fused() const {
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
    DualChunkAttention(options, dca, Q(), K(), V(), query_pos, key_pos,
                       Heads<float>::Dense(out.data(), q_tokens, heads, dim));
    return out;
  }
};

// The published values (chunk_size 262144, local_size 8192): the positions at which vLLM's caches
// rotate keys and the three query variants that reach the output, for positions across four
// chunks of 253952, and the length scaling of its metadata.
TEST(DualChunkGolden, PublishedRotationPositionsMatchVllm) {
  const json c = GoldenJson("dca_vllm/positions_qwen_1m.json");
  const DualChunk dca = DualChunkOf(c);
  ASSERT_EQ(dca.ChunkLength(), 253952);
  const std::vector<int64_t> positions = c["positions"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    SCOPED_TRACE("position " + std::to_string(p));
    EXPECT_EQ(dca.KeyPosition(p), c["key"][i].get<int64_t>());
    EXPECT_EQ(dca.QueryPosition(DualChunkPart::kIntra, p), c["q"][i].get<int64_t>());
    EXPECT_EQ(dca.QueryPosition(DualChunkPart::kSuccessive, p), c["q_succ"][i].get<int64_t>());
    EXPECT_EQ(dca.QueryPosition(DualChunkPart::kInter, p), c["q_inter"][i].get<int64_t>());
  }
  const std::vector<int64_t> lengths = c["scaling_factor_lengths"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < lengths.size(); ++i) {
    // vLLM: float32 log of an int32 / int tensor division.
    EXPECT_NEAR(dca.LengthScaling(lengths[i]), c["scaling_factor_float32"][i].get<double>(), 2e-7)
        << "length " << lengths[i];
  }
}

// vLLM's rotated q (the variants the output uses) and k against ApplyRopeReference at posenc's
// rotation positions, on the shrunk Qwen geometry.
TEST(DualChunkGolden, RotatedQueriesAndKeysMatchVllm) {
  for (const std::string file : {"prefill_qwen_1m_shrunk.json", "prefill_chunk24_local8.json",
                                 "prefill_chunk20_local12.json"}) {
    SCOPED_TRACE(file);
    const json c = GoldenJson("dca_vllm/" + file);
    const DualChunk dca = DualChunkOf(c);
    const AttentionOptions options = OptionsOf(c);
    const int64_t heads = c["num_heads"], kv_heads = c["num_kv_heads"], dim = c["head_dim"];
    const int64_t tokens = c["tokens"];
    const std::vector<int64_t> rope_tokens = c["rope_tokens"].get<std::vector<int64_t>>();
    const int64_t n = static_cast<int64_t>(rope_tokens.size());
    const std::vector<float> q_all = GoldenInput(tokens, heads, dim, 1);
    const std::vector<float> k_all = GoldenInput(tokens, kv_heads, dim, 2);
    const auto rows = [&](const std::vector<float>& all, int64_t h) {
      std::vector<float> picked;
      for (const int64_t t : rope_tokens) {
        picked.insert(picked.end(), all.begin() + t * h * dim, all.begin() + (t + 1) * h * dim);
      }
      return picked;
    };
    const std::vector<float> q = rows(q_all, heads), k = rows(k_all, kv_heads);
    const auto rotated = [&](const std::vector<float>& x, int64_t h,
                             const std::vector<int64_t>& at) {
      std::vector<float> out(x.size());
      ApplyRopeReference(*options.rope, at, Heads<const float>::Dense(x.data(), n, h, dim),
                         Heads<float>::Dense(out.data(), n, h, dim), RopeDirection::kForward);
      return out;
    };
    std::vector<int64_t> key_at;
    for (const int64_t t : rope_tokens) key_at.push_back(dca.KeyPosition(t));
    ExpectAllNear(rotated(k, kv_heads, key_at), c["rope_key_float32"].get<std::vector<double>>(),
                  kRopeTolerance, "k");
    const std::pair<DualChunkPart, std::string> parts[] = {{DualChunkPart::kIntra, "q"},
                                                           {DualChunkPart::kSuccessive, "q_succ"},
                                                           {DualChunkPart::kInter, "q_inter"}};
    for (const auto& [part, name] : parts) {
      std::vector<int64_t> at;
      for (const int64_t t : rope_tokens) at.push_back(dca.QueryPosition(part, t));
      ExpectAllNear(rotated(q, heads, at), c["rope_float32"][name].get<std::vector<double>>(),
                    kRopeTolerance, name);
    }
  }
}

// The prefill: every row of vLLM's output (intra, successive and inter parts merged), against the
// reference and against the fused kernel on every SIMD target.
TEST(DualChunkGolden, PrefillMatchesVllm) {
  for (const std::string file : {"prefill_qwen_1m_shrunk.json", "prefill_chunk24_local8.json",
                                 "prefill_chunk20_local12.json"}) {
    SCOPED_TRACE(file);
    const int64_t tokens = GoldenJson("dca_vllm/" + file)["tokens"];
    const GoldenCase g(file, 0, tokens, tokens);
    const std::vector<double> want = g.c["out"].get<std::vector<double>>();
    ExpectAllNear(g.Reference(), want, kGoldenTolerance, "reference");
    ForEachSimdTarget(
        [&](int64_t) { ExpectAllNear(g.Fused(), want, kKernelGoldenTolerance, "kernel"); });
  }
}

// A decode step through vLLM's decode path (paged cache, intra/succ/inter block tables): token 72
// against the 73 cached keys.
TEST(DualChunkGolden, DecodeMatchesVllm) {
  const json c = GoldenJson("dca_vllm/decode_qwen_1m_shrunk.json");
  const int64_t query = c["query_position"];
  const GoldenCase g("decode_qwen_1m_shrunk.json", query, 1, query + 1);
  const std::vector<double> want = c["out"].get<std::vector<double>>();
  ExpectAllNear(g.Reference(), want, kGoldenTolerance, "reference");
  ForEachSimdTarget(
      [&](int64_t) { ExpectAllNear(g.Fused(), want, kKernelGoldenTolerance, "kernel"); });
}

}  // namespace
}  // namespace posenc
