// The study's autograd functions against plain torch formulas (forward and gradient), the
// model's causality, and the stretched frequencies against their definitions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "arms.h"
#include "distance_bias.h"
#include "fire.h"
#include "long_context.h"
#include "model.h"
#include "posenc/alibi.h"
#include "posenc/relative_bias.h"
#include "positions_autograd.h"
#include "progress.h"
#include "random_positions.h"
#include "xpos.h"

namespace posenc::study {
namespace {

// Half-split RoPE in torch ops (the rotate_half form of Hugging Face's Llama), in double.
torch::Tensor RotateHalfReference(const torch::Tensor& x, const torch::Tensor& positions,
                                  const Rope& rope) {
  const torch::Tensor inv_freq = torch::tensor(rope.inv_freq, torch::kFloat64);
  const torch::Tensor angles = positions.to(torch::kFloat64).unsqueeze(1) * inv_freq.unsqueeze(0);
  const torch::Tensor emb = torch::cat({angles, angles}, -1);  // [tokens, head_dim]
  const torch::Tensor cos = (emb.cos() * rope.attention_factor).unsqueeze(1);
  const torch::Tensor sin = (emb.sin() * rope.attention_factor).unsqueeze(1);
  const int64_t half = x.size(3) / 2;
  const torch::Tensor rotated = torch::cat({-x.slice(3, half), x.slice(3, 0, half)}, -1);
  return x * cos + rotated * sin;
}

TEST(StudyAutograd, RopeMatchesRotateHalfForwardAndBackward) {
  torch::manual_seed(0);
  Rope rope = Rope::Default(16);
  rope.attention_factor = 1.25;
  const torch::Tensor positions = torch::tensor({0, 1, 7, 1000, 123456}, torch::kInt64);
  const torch::Tensor x = torch::randn({3, 5, 2, 16}, torch::kFloat32).requires_grad_();
  const torch::Tensor x64 = x.detach().to(torch::kFloat64).requires_grad_();
  const torch::Tensor weights = torch::randn({3, 5, 2, 16}, torch::kFloat64);

  const torch::Tensor out = ApplyRopeAutograd(x, positions, rope);
  const torch::Tensor expected = RotateHalfReference(x64, positions, rope);
  EXPECT_LT((out.to(torch::kFloat64) - expected).abs().max().item<double>(), 2e-6);

  (out.to(torch::kFloat64) * weights).sum().backward();
  (expected * weights).sum().backward();
  EXPECT_LT((x.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 2e-6);
}

TEST(StudyAutograd, RopeKeepsNormsAndScoresDependOnDistanceOnly) {
  torch::manual_seed(1);
  const Rope rope = Rope::Default(32);
  const torch::Tensor q = torch::randn({1, 1, 1, 32}), k = torch::randn({1, 1, 1, 32});
  const auto score = [&](int64_t m, int64_t n) {
    const torch::Tensor qm = ApplyRopeAutograd(q, torch::tensor({m}, torch::kInt64), rope);
    const torch::Tensor kn = ApplyRopeAutograd(k, torch::tensor({n}, torch::kInt64), rope);
    EXPECT_NEAR(qm.norm().item<double>(), q.norm().item<double>(), 1e-5);
    return (qm * kn).sum().item<double>();
  };
  EXPECT_NEAR(score(10, 3), score(1007, 1000), 1e-4);
  EXPECT_NEAR(score(3, 10), score(2000003, 2000010), 1e-4);
}

TEST(StudyAutograd, LearnedLookupGathersRowsAndSumsRepeatedGradients) {
  const torch::Tensor table = torch::arange(12, torch::kFloat32).view({4, 3}).requires_grad_();
  const torch::Tensor positions = torch::tensor({3, 0, 3}, torch::kInt64);
  const torch::Tensor out = LookupLearnedAutograd(table, positions);
  EXPECT_TRUE(torch::equal(
      out, torch::tensor({9.f, 10.f, 11.f, 0.f, 1.f, 2.f, 9.f, 10.f, 11.f}).view({3, 3})));
  (out * torch::tensor({1.f, 2.f, 3.f}).view({3, 1})).sum().backward();
  // Row 3 is read by tokens 0 and 2 (weights 1 and 3), row 0 by token 1 (weight 2).
  const torch::Tensor expected =
      torch::tensor({2.f, 2.f, 2.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 4.f, 4.f, 4.f}).view({4, 3});
  EXPECT_TRUE(torch::equal(table.grad(), expected));
}

TEST(StudyAutograd, SinusoidalTableIsTheTransformerFormula) {
  const torch::Tensor table = SinusoidalTable(torch::tensor({0, 1, 5}, torch::kInt64), 4);
  EXPECT_FLOAT_EQ(table[1][0].item<float>(), static_cast<float>(std::sin(1.0)));
  EXPECT_FLOAT_EQ(table[1][1].item<float>(), static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(table[2][2].item<float>(), static_cast<float>(std::sin(5.0 / 100.0)));
  EXPECT_FLOAT_EQ(table[0][3].item<float>(), 1.0f);
}

TEST(StudyModel, EveryMethodIsCausal) {
  for (PositionMethod method :
       {PositionMethod::kLearned, PositionMethod::kSinusoidal, PositionMethod::kRope,
        PositionMethod::kAlibi, PositionMethod::kNone, PositionMethod::kT5, PositionMethod::kXpos,
        PositionMethod::kKerple, PositionMethod::kFire, PositionMethod::kRandomized}) {
    torch::manual_seed(2);
    CharModel model(
        ModelShape{.vocab = 11, .d_model = 32, .heads = 2, .layers = 2, .learned_rows = 64},
        method);
    torch::NoGradGuard no_grad;
    const Rope rope = Rope::Default(16);
    const torch::Tensor positions = method == PositionMethod::kRandomized
                                        ? RandomOrderedPositionRows(1, 20, 320, 7)
                                        : torch::Tensor();
    torch::Tensor ids = torch::randint(0, 11, {1, 20}, torch::kInt64);
    const torch::Tensor before = model->forward(ids, rope, {}, positions);
    ids[0][15] = (ids[0][15].item<int64_t>() + 1) % 11;  // change a later token
    const torch::Tensor after = model->forward(ids, rope, {}, positions);
    EXPECT_TRUE(torch::allclose(before.slice(1, 0, 15), after.slice(1, 0, 15)))
        << MethodName(method) << ": an earlier position saw a later token";
    EXPECT_FALSE(torch::allclose(before.slice(1, 15), after.slice(1, 15))) << MethodName(method);
  }
}

// The model's logits with attention composed in torch ops from the model's own parameters
// (matmul, bias, causal mask, softmax, matmul; RoPE by ApplyRopeAutograd), as the model computed
// them before it trained through posenc's attention. Each bias is written from its formula here:
// ALiBi's -slope (i - j), T5's table at posenc's bucket of j - i, KERPLE's -r1 log(1 + r2 (i - j)),
// FIRE's f(psi(i - j) / psi(max(L, i))); xPos scales q and k by zeta^(+-(t - c) / B).
// positions: int64 [batch, tokens] for randomized positions, else undefined (0 .. tokens - 1).
torch::Tensor ComposedLogits(CharModel& model, const torch::Tensor& ids, const Rope& rope,
                             const torch::Tensor& random_positions = torch::Tensor()) {
  namespace F = torch::nn::functional;
  using M = PositionMethod;
  const auto p = model->named_parameters();
  const ModelShape& shape = model->shape();
  const int64_t batch = ids.size(0), n = ids.size(1), h = shape.heads, d = shape.d_model;
  const int64_t dh = model->head_dim();
  const PositionMethod method = model->method();
  const torch::Tensor positions = torch::arange(n, torch::kInt64);
  const auto norm = [&](const std::string& name, const torch::Tensor& x) {
    return F::layer_norm(
        x, F::LayerNormFuncOptions({d}).weight(p[name + ".weight"]).bias(p[name + ".bias"]));
  };
  const auto linear = [&](const std::string& name, const torch::Tensor& x) {
    return F::linear(x, p[name + ".weight"], p[name + ".bias"]);
  };
  torch::Tensor x = F::embedding(ids, p["tokens.weight"]);
  if (method == M::kLearned) x = x + p["learned"].slice(0, 0, n);
  if (method == M::kSinusoidal) x = x + SinusoidalTable(positions, d);
  // i - j for query i and key j: [queries, keys].
  const torch::Tensor distance = positions.unsqueeze(1) - positions.unsqueeze(0);
  // [heads, queries, keys] for the biases shared by the layers: ALiBi's, T5's, or nothing.
  torch::Tensor shared_bias = torch::zeros({h, n, n});
  if (method == M::kAlibi) {
    const torch::Tensor slopes = torch::tensor(AlibiSlopes(Alibi{.num_heads = h})).view({h, 1, 1});
    shared_bias = (-slopes * distance.to(torch::kFloat64)).to(torch::kFloat32);
  }
  if (method == M::kT5) {
    const RelativeBuckets buckets{.num_buckets = shape.t5_buckets,
                                  .max_distance = shape.t5_max_distance,
                                  .bidirectional = false};
    torch::Tensor bucket = torch::empty({n, n}, torch::kInt64);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) bucket[i][j] = RelativePositionBucket(buckets, j - i);
    }
    shared_bias = p["t5_table"].index_select(0, bucket.view(-1)).view({n, n, h}).permute({2, 0, 1});
  }
  // xPos: pair i of q at position t scaled by zeta_i^((t - ceil(n / 2)) / B), of k by its inverse.
  torch::Tensor xpos_q = torch::ones({n, dh});
  if (method == M::kXpos) {
    const torch::Tensor i = torch::arange(dh / 2, torch::kFloat64);
    const torch::Tensor zeta = (2.0 * i / double(dh) + 0.4) / 1.4;
    const torch::Tensor t =
        (positions.to(torch::kFloat64) - double((n + 1) / 2)) / shape.xpos_scale_base;
    const torch::Tensor half = zeta.unsqueeze(0).pow(t.unsqueeze(1));
    xpos_q = torch::cat({half, half}, 1).to(torch::kFloat32);
  }
  const bool rotates = method == M::kRope || method == M::kXpos || method == M::kRandomized;
  const torch::Tensor rope_positions =
      random_positions.defined() ? random_positions : positions.expand({batch, n});
  const auto rotate = [&](const torch::Tensor& t) {  // [batch, n, heads, dh], row by row
    std::vector<torch::Tensor> rows;
    for (int64_t b = 0; b < batch; ++b) {
      rows.push_back(ApplyRopeAutograd(t.slice(0, b, b + 1), rope_positions[b], rope));
    }
    return torch::cat(rows, 0);
  };
  const torch::Tensor future = torch::ones({n, n}, torch::kBool).triu(1);
  for (int64_t l = 0; l < shape.layers; ++l) {
    const std::string b = "block" + std::to_string(l) + "_";
    const torch::Tensor qkv = linear(b + "qkv", norm(b + "norm1", x)).view({batch, n, 3, h, dh});
    torch::Tensor q = qkv.select(2, 0), k = qkv.select(2, 1);
    const torch::Tensor v = qkv.select(2, 2);
    if (method == M::kXpos) {
      q = q * xpos_q.unsqueeze(1);
      k = k / xpos_q.unsqueeze(1);
    }
    if (rotates) {
      q = rotate(q);
      k = rotate(k);
    }
    torch::Tensor bias = shared_bias;
    if (method == M::kKerple) {
      const torch::Tensor r1 = p[b + "kerple_r1"].clamp_min(0.01).view({h, 1, 1});
      const torch::Tensor r2 = p[b + "kerple_r2"].clamp_min(0.01).view({h, 1, 1});
      bias = -r1 * torch::log(1.0 + r2 * distance.clamp_min(0).to(torch::kFloat32));
    }
    if (method == M::kFire) {  // f(log(1 + |c| (i - j)) / log(1 + |c| max(|L|, i)))
      const torch::Tensor c = p[b + "fire_c"].abs(), L = p[b + "fire_threshold"].abs();
      const torch::Tensor i = positions.to(torch::kFloat32);
      const torch::Tensor u = torch::log(1.0 + c * distance.clamp_min(0).to(torch::kFloat32)) /
                              torch::log(1.0 + c * torch::maximum(i, L)).unsqueeze(1);
      const torch::Tensor hidden = torch::relu(linear(b + "fire_hidden", u.unsqueeze(-1)));
      bias = linear(b + "fire_out", hidden).permute({2, 0, 1});
    }
    torch::Tensor scores =
        torch::matmul(q.transpose(1, 2), k.permute({0, 2, 3, 1})) / std::sqrt(double(dh)) + bias;
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    const torch::Tensor mixed = torch::matmul(torch::softmax(scores, -1), v.transpose(1, 2));
    x = x + linear(b + "proj", mixed.transpose(1, 2).reshape({batch, n, d}));
    x = x + linear(b + "down", torch::gelu(linear(b + "up", norm(b + "norm2", x))));
  }
  return linear("head", norm("final_norm", x));
}

// Training through posenc's attention (forward and backward) gives the loss and every parameter
// gradient of the composed attention, for each position method and each Rope the arms train or
// read with (YaRN's attention factor included), on windows longer than the training length.
TEST(StudyModel, PosencAttentionTrainsLikeComposedAttention) {
  Settings s;
  s.shape = ModelShape{.vocab = 11, .d_model = 64, .heads = 4, .layers = 2, .learned_rows = 64};
  s.train_length = 16;
  const int64_t n = 40;  // 2.5x: dynamic NTK stretches
  struct Case {
    PositionMethod method;
    Stretch stretch;
  };
  const Case cases[] = {
      {PositionMethod::kLearned, Stretch::kNone}, {PositionMethod::kSinusoidal, Stretch::kNone},
      {PositionMethod::kRope, Stretch::kNone},    {PositionMethod::kRope, Stretch::kPi},
      {PositionMethod::kRope, Stretch::kNtk},     {PositionMethod::kRope, Stretch::kDynamicNtk},
      {PositionMethod::kRope, Stretch::kYarn},    {PositionMethod::kAlibi, Stretch::kNone},
      {PositionMethod::kNone, Stretch::kNone},    {PositionMethod::kT5, Stretch::kNone},
      {PositionMethod::kXpos, Stretch::kNone},    {PositionMethod::kKerple, Stretch::kNone},
      {PositionMethod::kFire, Stretch::kNone},    {PositionMethod::kRandomized, Stretch::kNone}};
  for (const Case& c : cases) {
    const std::string name = MethodName(c.method) + "/" + StretchName(c.stretch);
    torch::manual_seed(5);
    CharModel model(s.shape, c.method);
    const Rope rope = RopeFor(s, c.stretch, n);
    const torch::Tensor ids = torch::randint(0, 11, {3, n}, torch::kInt64);
    const torch::Tensor targets = torch::randint(0, 11, {3 * n}, torch::kInt64);
    const auto loss_of = [&](const torch::Tensor& logits) {
      return torch::nn::functional::cross_entropy(logits.reshape({-1, 11}), targets);
    };
    const torch::Tensor positions =
        c.method == PositionMethod::kRandomized
            ? RandomOrderedPositionRows(3, n, s.random_position_range(), 11)
            : torch::Tensor();
    const std::vector<torch::Tensor> params = model->parameters();
    const torch::Tensor loss = loss_of(model->forward(ids, rope, {}, positions));
    const torch::Tensor expected = loss_of(ComposedLogits(model, ids, rope, positions));
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>())
        << name;
    const auto grads = torch::autograd::grad({loss}, params);
    const auto expected_grads = torch::autograd::grad({expected}, params);
    const auto names = model->named_parameters().keys();
    for (size_t i = 0; i < params.size(); ++i) {
      const double scale = expected_grads[i].abs().max().item<double>();
      ASSERT_GT(scale, 0.0) << name << " " << names[i];
      // float32 sums in a different order (tiles, online softmax): a few ulps of the largest.
      EXPECT_LT((grads[i] - expected_grads[i]).abs().max().item<double>(), 2e-5 * scale)
          << name << " " << names[i];
    }
  }
}

// xPos on a head of 4 (two pairs), gamma 0.4, B = 2, a window of 4 (positions counted from 2):
// zeta_0 = 0.4 / 1.4 = 2/7, zeta_1 = (2/4 + 0.4) / 1.4 = 9/14, worked by hand from the paper's
// formula. q and k at positions 3 and 1, both along one pair, score zeta^((3 - 1) / 2) times the
// cosine of 2 turns of that pair's frequency (1 and 10000^(-1/2) = 0.01).
TEST(StudyXpos, RotationAndScaleMatchAHandWorkedExample) {
  const Xpos xpos{.gamma = 0.4, .scale_base = 2.0};
  const torch::Tensor f = XposFactors(xpos, 4, 4);  // [tokens, q/k/v, 1, head_dim]
  ASSERT_EQ(f.sizes(), torch::IntArrayRef({4, 3, 1, 4}));
  // Position 0 is 2 before the middle: q's factor zeta^(-1), k's zeta^(+1); v's are 1.
  EXPECT_NEAR(f[0][0][0][0].item<double>(), 3.5, 1e-6);
  EXPECT_NEAR(f[0][0][0][2].item<double>(), 3.5, 1e-6);  // both halves of pair 0
  EXPECT_NEAR(f[0][0][0][1].item<double>(), 14.0 / 9.0, 1e-6);
  EXPECT_NEAR(f[0][1][0][0].item<double>(), 2.0 / 7.0, 1e-7);
  EXPECT_NEAR(f[0][1][0][3].item<double>(), 9.0 / 14.0, 1e-7);
  EXPECT_EQ(f[0][2][0][1].item<double>(), 1.0);
  EXPECT_EQ(f[2][0][0][0].item<double>(), 1.0);  // the middle

  const Rope rope = Rope::Default(4);  // half-split: pair 0 is dimensions 0 and 2
  const auto score = [&](int64_t dim) {
    const torch::Tensor unit = torch::zeros({1, 1, 1, 4});
    unit[0][0][0][dim] = 1.0f;
    const torch::Tensor q = ApplyRopeAutograd(unit * f[3][0].view({1, 1, 1, 4}),
                                              torch::tensor({3}, torch::kInt64), rope);
    const torch::Tensor k = ApplyRopeAutograd(unit * f[1][1].view({1, 1, 1, 4}),
                                              torch::tensor({1}, torch::kInt64), rope);
    return (q * k).sum().item<double>();
  };
  EXPECT_NEAR(score(0), -0.11889909615632639, 1e-6);  // (2/7) cos 2
  EXPECT_NEAR(score(1), 0.6427285757142286, 1e-6);    // (9/14) cos 0.02
}

// KERPLE's table against -r1 log(1 + r2 d) evaluated in double, its parameters clamped at 0.01,
// and posenc's buckets giving each distance its own row.
TEST(StudyDistanceBias, KerpleLogTableIsItsFormulaOneBucketPerDistance) {
  const torch::Tensor r1 = torch::tensor({1.5f, 0.002f}), r2 = torch::tensor({0.25f, 3.0f});
  const int64_t tokens = 50;
  const torch::Tensor table = KerpleLogTable(r1, r2, tokens);
  ASSERT_EQ(table.sizes(), torch::IntArrayRef({100, 2}));
  const double r1d[] = {1.5, 0.01}, r2d[] = {0.25, 3.0};
  for (int64_t d = 0; d < 100; ++d) {
    for (int64_t h = 0; h < 2; ++h) {
      const double expected = d < tokens ? -r1d[h] * std::log(1.0 + r2d[h] * double(d)) : 0.0;
      EXPECT_NEAR(table[d][h].item<double>(), expected, 2e-6 * (1.0 + std::abs(expected)))
          << "distance " << d << ", head " << h;
    }
  }
  const RelativeBuckets buckets = OneBucketPerDistance(tokens);
  for (int64_t d = 0; d < tokens; ++d) EXPECT_EQ(RelativePositionBucket(buckets, -d), d);
  EXPECT_EQ(RelativePositionBucket(buckets, 3), 0);  // a key after the query: never visible
}

// FIRE's bias against f(psi(i - j) / psi(max(L, i))), psi(x) = log(c x + 1), evaluated in double
// loops from the MLP's weights, on both sides of the threshold L.
TEST(StudyFire, BiasIsItsFormula) {
  torch::manual_seed(6);
  const int64_t heads = 3, tokens = 12;
  FireParameters fire{.hidden = torch::nn::Linear(1, 32),
                      .out = torch::nn::Linear(32, heads),
                      .c = torch::tensor({0.7f}),
                      .threshold = torch::tensor({5.0f})};
  const torch::Tensor bias = FireBias(fire, tokens);
  ASSERT_EQ(bias.sizes(), torch::IntArrayRef({heads, tokens, tokens}));
  const auto w1 = fire.hidden->weight.to(torch::kFloat64);
  const auto b1 = fire.hidden->bias.to(torch::kFloat64);
  const auto w2 = fire.out->weight.to(torch::kFloat64), b2 = fire.out->bias.to(torch::kFloat64);
  const auto psi = [](double x) { return std::log(0.7 * x + 1.0); };
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double u = psi(double(i - j)) / psi(std::max(5.0, double(i)));
      for (int64_t h = 0; h < heads; ++h) {
        double f = b2[h].item<double>();
        for (int64_t k = 0; k < 32; ++k) {
          const double hidden = std::max(0.0, w1[k][0].item<double>() * u + b1[k].item<double>());
          f += w2[h][k].item<double>() * hidden;
        }
        EXPECT_NEAR(bias[h][i][j].item<double>(), f, 1e-5) << i << " " << j << " " << h;
      }
    }
  }
}

// The sampler of randomized positions: sorted, distinct, within range, a function of the seed,
// every position equally likely, and the whole range at the longest length.
TEST(StudyRandomPositions, SortedDistinctWithinRangeAndSeeded) {
  const std::vector<int64_t> a = RandomOrderedPositions(128, 2048, 42);
  ASSERT_EQ(a.size(), 128u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(a[i], 0);
    EXPECT_LT(a[i], 2048);
    if (i > 0) {
      EXPECT_LT(a[i - 1], a[i]) << "at " << i;
    }
  }
  EXPECT_EQ(RandomOrderedPositions(128, 2048, 42), a);
  EXPECT_NE(RandomOrderedPositions(128, 2048, 43), a);
  // Spread over the range, not bunched at its start.
  EXPECT_GT(a.back(), 1024);
  std::vector<int64_t> all(64);
  for (int64_t i = 0; i < 64; ++i) all[static_cast<size_t>(i)] = i;
  EXPECT_EQ(RandomOrderedPositions(64, 64, 1), all);
  EXPECT_TRUE(RandomOrderedPositions(0, 10, 1).empty());
  EXPECT_THROW(RandomOrderedPositions(11, 10, 1), c10::Error);
  // Each of 16 positions is drawn 4 times in 16 with frequency 1/4: 20000 draws, within 5 sigma
  // (sqrt(20000 * 1/4 * 3/4) = 61) of 5000 (one seed: the same counts every run).
  const torch::Tensor rows = RandomOrderedPositionRows(20000, 4, 16, 9);
  const torch::Tensor counts = torch::bincount(rows.view(-1), {}, 16);
  EXPECT_LT((counts - 5000).abs().max().item<int64_t>(), 5 * 61);
  // Rows are distinct draws, each sorted and distinct.
  EXPECT_FALSE(torch::equal(rows[0], rows[1]) && torch::equal(rows[1], rows[2]));
  EXPECT_TRUE((rows.slice(1, 1) > rows.slice(1, 0, 3)).all().item<bool>());
}

TEST(StudyArms, StretchedFrequenciesFollowTheirDefinitions) {
  const Settings s = Settings::Full();  // head_dim 32, trained at 128, s = 4
  const Rope plain = RopeFor(s, Stretch::kNone, 128);
  const Rope pi = RopeFor(s, Stretch::kPi, 512);
  const Rope ntk = RopeFor(s, Stretch::kNtk, 512);
  const Rope dynamic_at_1x = RopeFor(s, Stretch::kDynamicNtk, 128);
  const Rope dynamic_at_4x = RopeFor(s, Stretch::kDynamicNtk, 512);
  const Rope yarn = RopeFor(s, Stretch::kYarn, 512);
  ASSERT_EQ(plain.inv_freq.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / 32.0);
    EXPECT_NEAR(plain.inv_freq[i], theta, 1e-15 * theta);
    EXPECT_NEAR(pi.inv_freq[i], theta / 4, 1e-15 * theta);
    // NTK-aware: base 10000 * 4^(32/30).
    const double ntk_theta =
        std::pow(10000.0 * std::pow(4.0, 32.0 / 30.0), -2.0 * static_cast<double>(i) / 32.0);
    EXPECT_NEAR(ntk.inv_freq[i], ntk_theta, 1e-12 * ntk_theta);
    EXPECT_NEAR(dynamic_at_1x.inv_freq[i], theta, 1e-15 * theta);
    EXPECT_NEAR(dynamic_at_4x.inv_freq[i], ntk_theta, 1e-12 * ntk_theta);
  }
  // NTK-aware divides the slowest pair by exactly s: (b s^(d/(d-2)))^(-(d-2)/d) = b^(..) / s.
  EXPECT_NEAR(ntk.inv_freq[15], plain.inv_freq[15] / 4, 1e-12 * plain.inv_freq[15]);
  // YaRN with beta_fast 8: pairs 0 and 1 turn more than 8 times in 128 characters and are kept;
  // the slow pairs are divided by s; the attention factor is 0.1 ln 4 + 1.
  EXPECT_DOUBLE_EQ(yarn.inv_freq[0], plain.inv_freq[0]);
  EXPECT_DOUBLE_EQ(yarn.inv_freq[1], plain.inv_freq[1]);
  EXPECT_NEAR(yarn.inv_freq[15], plain.inv_freq[15] / 4, 1e-18);
  EXPECT_NEAR(yarn.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
}

// Attention sinks read a window at once exactly as a token-by-token decode through posenc's
// KvCache does: roll the cache (sinks + window), append the token, attend its query.
TEST(StudyLongContext, SinksEqualDecodeThroughTheCache) {
  torch::manual_seed(3);
  const int64_t n = 40, heads = 2, dim = 16, sinks = 3, cache = 12;
  const Rope rope = Rope::Default(dim);
  const torch::Tensor q = torch::randn({1, n, heads, dim}), k = torch::randn({1, n, heads, dim}),
                      v = torch::randn({1, n, heads, dim});
  for (const SinkPositions mode : {SinkPositions::kCache, SinkPositions::kText}) {
    const torch::Tensor read = SinkRead(q, k, v, rope, sinks, cache, mode).contiguous();
    KvCache<float> kv({.capacity = cache, .kv_heads = heads, .head_dim = dim, .rope = rope});
    AttentionOptions options;
    options.causal = true;
    std::vector<float> out(heads * dim);
    for (int64_t t = 0; t < n; ++t) {
      RollSinkWindow(kv, sinks, cache - sinks, 1, mode);
      const std::vector<int64_t> pos{mode == SinkPositions::kText ? t : kv.size()};
      const auto row = [&](const torch::Tensor& x) {
        return Heads<const float>::Dense(x[0][t].data_ptr<float>(), 1, heads, dim);
      };
      kv.Append(pos, row(k), row(v));
      kv.Attend(options, row(q), pos, Heads<float>::Dense(out.data(), 1, heads, dim));
      for (int64_t i = 0; i < heads * dim; ++i) {
        // Cache mode re-rotates the window's keys once per roll (float32 rounding each time).
        ASSERT_NEAR(out[static_cast<size_t>(i)], read[0][t].view(-1)[i].item<float>(), 2e-5)
            << "mode " << static_cast<int>(mode) << ", token " << t << ", element " << i;
      }
    }
  }
  // The two modes differ once sinks are far from the query (token 39 sees sinks 39 - 0 away in
  // the text, 11 - 0 in the cache).
  EXPECT_FALSE(torch::allclose(SinkRead(q, k, v, rope, sinks, cache, SinkPositions::kCache),
                               SinkRead(q, k, v, rope, sinks, cache, SinkPositions::kText)));
}

// Self-Extend in the model equals its formula written in torch: both score matrices (positions
// as they are, and grouped), the neighbour one where the distance is < W, one causal softmax.
TEST(StudyLongContext, SelfExtendEqualsItsFormula) {
  torch::manual_seed(4);
  const int64_t n = 50, heads = 2, dim = 16;
  const Rope rope = Rope::Default(dim);
  const SelfExtend se{.group_size = 3, .neighbor_window = 8};
  const torch::Tensor q = torch::randn({2, n, heads, dim}), k = torch::randn({2, n, heads, dim}),
                      v = torch::randn({2, n, heads, dim});
  const torch::Tensor pos = torch::arange(n, torch::kInt64);
  const auto rotated = [&](const torch::Tensor& x, const torch::Tensor& p) {
    return RotateHalfReference(x.to(torch::kFloat64), p, rope).transpose(1, 2);  // [b, h, t, d]
  };
  const auto scores = [&](const torch::Tensor& qp, const torch::Tensor& kp) {
    return torch::matmul(rotated(q, qp), rotated(k, kp).transpose(2, 3)) / std::sqrt(16.0);
  };
  const torch::Tensor grouped_q = pos.div(3, "floor") + 8 - 8 / 3, grouped_k = pos.div(3, "floor");
  const torch::Tensor distance = pos.unsqueeze(1) - pos.unsqueeze(0);
  torch::Tensor s = torch::where(distance < 8, scores(pos, pos), scores(grouped_q, grouped_k));
  s = s.masked_fill(distance < 0, -std::numeric_limits<double>::infinity());
  const torch::Tensor expected =
      torch::matmul(torch::softmax(s, -1), v.to(torch::kFloat64).transpose(1, 2)).transpose(1, 2);
  const torch::Tensor got = SelfExtendRead(q, k, v, rope, se);
  EXPECT_LT((got.to(torch::kFloat64) - expected).abs().max().item<double>(), 2e-5);
  // And it is not plain attention: far keys moved.
  const torch::Tensor plain =
      torch::matmul(torch::softmax(scores(pos, pos).masked_fill(distance < 0, -INFINITY), -1),
                    v.to(torch::kFloat64).transpose(1, 2))
          .transpose(1, 2);
  EXPECT_GT((got.to(torch::kFloat64) - plain).abs().max().item<double>(), 1e-3);
}

// Dual chunk attention in the model equals its rule written in torch (docs/DUAL_CHUNK.md): keys
// rotated at j mod L, queries at i mod L (key in the query's chunk), min(i mod L + L, chunk_size)
// (the chunk before) or min(2 L - 1, chunk_size) (earlier chunks), one causal softmax.
TEST(StudyLongContext, DualChunkEqualsItsFormula) {
  torch::manual_seed(5);
  const int64_t n = 50, heads = 2, dim = 16, chunk_size = 12, local_size = 4, L = 8;
  const Rope rope = Rope::Default(dim);
  const DualChunk dca{.chunk_size = chunk_size, .local_size = local_size};
  const torch::Tensor q = torch::randn({2, n, heads, dim}), k = torch::randn({2, n, heads, dim}),
                      v = torch::randn({2, n, heads, dim});
  const torch::Tensor pos = torch::arange(n, torch::kInt64);
  const auto rotated = [&](const torch::Tensor& x, const torch::Tensor& p) {
    return RotateHalfReference(x.to(torch::kFloat64), p, rope).transpose(1, 2);  // [b, h, t, d]
  };
  const torch::Tensor k_rot = rotated(k, pos.remainder(L)).transpose(2, 3);
  const auto scores = [&](const torch::Tensor& qp) {
    return torch::matmul(rotated(q, qp), k_rot) / std::sqrt(16.0);
  };
  const torch::Tensor intra = scores(pos.remainder(L));
  const torch::Tensor successive = scores((pos.remainder(L) + L).clamp_max(chunk_size));
  const torch::Tensor inter = scores(torch::full({n}, std::min(2 * L - 1, chunk_size)));
  const torch::Tensor chunks_apart =
      pos.div(L, "floor").unsqueeze(1) - pos.div(L, "floor").unsqueeze(0);
  torch::Tensor s =
      torch::where(chunks_apart == 0, intra, torch::where(chunks_apart == 1, successive, inter));
  const torch::Tensor distance = pos.unsqueeze(1) - pos.unsqueeze(0);
  s = s.masked_fill(distance < 0, -std::numeric_limits<double>::infinity());
  const torch::Tensor expected =
      torch::matmul(torch::softmax(s, -1), v.to(torch::kFloat64).transpose(1, 2)).transpose(1, 2);
  const torch::Tensor got = DualChunkRead(q, k, v, rope, dca);
  EXPECT_LT((got.to(torch::kFloat64) - expected).abs().max().item<double>(), 2e-5);
  // And it is not plain attention: keys outside the query's chunk moved.
  const torch::Tensor plain_scores =
      torch::matmul(rotated(q, pos), rotated(k, pos).transpose(2, 3)) / std::sqrt(16.0);
  const torch::Tensor plain =
      torch::matmul(torch::softmax(plain_scores.masked_fill(distance < 0, -INFINITY), -1),
                    v.to(torch::kFloat64).transpose(1, 2))
          .transpose(1, 2);
  EXPECT_GT((got.to(torch::kFloat64) - plain).abs().max().item<double>(), 1e-3);
}

// The authors' rule (ChunkLlama: chunk_size 3 L0 / 4, local_size L0 / 16) at the study's training
// lengths, the same at every evaluation length, and every distance scored in a 16x window below
// the training length.
TEST(StudyArms, DualChunkFollowsTheAuthorsRuleAndStaysInsideTheTrainedDistances) {
  for (const Settings& s : {Settings::Full(), Settings::Quick()}) {
    const DualChunk dca = DualChunkFor(s);
    EXPECT_EQ(dca.chunk_size, s.quick ? 24 : 96);
    EXPECT_EQ(dca.local_size, s.quick ? 2 : 8);
    EXPECT_EQ(dca.original_max_position_embeddings, 0);
    EXPECT_NO_THROW(dca.Validate());
    int64_t largest = 0;
    const int64_t n = s.train_length * s.multiples.back();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        largest = std::max(largest, dca.QueryPosition(dca.PartOf(i, j), i) - dca.KeyPosition(j));
      }
    }
    EXPECT_EQ(largest, dca.chunk_size);
    EXPECT_LT(largest, s.train_length);
    for (int64_t m : s.multiples) {
      const LongContext c = LongContextFor(s, Reading::kDualChunk, m * s.train_length);
      EXPECT_EQ(c.kind, LongContext::Kind::kDualChunk);
      EXPECT_EQ(c.dual_chunk.chunk_size, dca.chunk_size);
      EXPECT_EQ(c.dual_chunk.local_size, dca.local_size);
    }
  }
}

TEST(StudyArms, SelfExtendGroupIsTheSmallestThatHoldsTheWindow) {
  const Settings s = Settings::Full();  // L0 = 128, W = 64: (128 - 64) G + 64 >= length
  EXPECT_EQ(SelfExtendFor(s, 128).group_size, 1);
  EXPECT_EQ(SelfExtendFor(s, 256).group_size, 3);
  EXPECT_EQ(SelfExtendFor(s, 512).group_size, 7);
  EXPECT_EQ(SelfExtendFor(s, 1024).group_size, 15);
  EXPECT_EQ(SelfExtendFor(s, 2048).group_size, 31);
  EXPECT_EQ(SelfExtendFor(s, 2048).neighbor_window, 64);
  const LongContext sinks = LongContextFor(s, Reading::kSinksCache, 2048);
  EXPECT_EQ(sinks.kind, LongContext::Kind::kSinks);
  EXPECT_EQ(sinks.sinks, 4);
  EXPECT_EQ(sinks.cache, 128);
  EXPECT_EQ(LongContextFor(s, Reading::kSinksText, 256).positions, SinkPositions::kText);
}

// The time left, on made-up step times: the first steps of each run are slow (libtorch's
// warm-up) and are not timed, so the first estimate is already the steady rate's.
TEST(StudyTimeLeft, MeasuresStepsAfterTheWarmUpOfEachRun) {
  TimeLeft left(/*training_units=*/1000.0, /*evaluation_units=*/0.0, /*warmup_steps=*/2);
  EXPECT_EQ(left.Describe(), "estimating...");
  EXPECT_FALSE(left.Seconds().has_value());
  left.StartRun();
  left.Done(Work::kTraining, 10.0, 50.0);  // warm-up: 5 s per unit, not timed
  left.Done(Work::kTraining, 10.0, 20.0);
  EXPECT_EQ(left.Describe(), "estimating...");
  left.Done(Work::kTraining, 10.0, 1.0);  // steady: 0.1 s per unit
  left.Done(Work::kTraining, 10.0, 1.0);
  ASSERT_TRUE(left.Seconds().has_value());
  EXPECT_DOUBLE_EQ(*left.Seconds(), 960.0 * 0.1);
  EXPECT_EQ(left.Describe(), "about 1 min 36 s left");
  // A new run warms up again; its slow first step changes nothing.
  left.StartRun();
  left.Done(Work::kTraining, 10.0, 30.0);
  EXPECT_DOUBLE_EQ(*left.Seconds(), 950.0 * 0.1);
  // A resumed run's steps done earlier take no time.
  left.Skip(Work::kTraining, 450.0);
  EXPECT_DOUBLE_EQ(*left.Seconds(), 500.0 * 0.1);
}

TEST(StudyTimeLeft, EvaluationsAreTimedApartFromTraining) {
  TimeLeft left(/*training_units=*/100.0, /*evaluation_units=*/40.0, /*warmup_steps=*/0);
  left.StartRun();
  left.Done(Work::kTraining, 20.0, 2.0);  // 0.1 s per training unit
  EXPECT_FALSE(left.Seconds().has_value());
  EXPECT_DOUBLE_EQ(*left.TrainingSeconds(), 8.0);
  EXPECT_EQ(left.Describe(), "about 8 s of training left, then the evaluations (not timed yet)");
  left.Done(Work::kTraining, 80.0, 8.0);
  EXPECT_EQ(left.Describe(), "estimating...");  // only untimed evaluations left
  left.Done(Work::kEvaluation, 10.0, 30.0);     // 3 s per evaluation unit
  EXPECT_DOUBLE_EQ(*left.Seconds(), 90.0);
  EXPECT_EQ(left.Describe(), "about 1 min 30 s left");
  left.Done(Work::kEvaluation, 30.0, 90.0);
  EXPECT_EQ(left.Describe(), "about 0 s left");
}

TEST(StudyTimeLeft, FormatsDurations) {
  EXPECT_EQ(FormatDuration(0.4), "0 s");
  EXPECT_EQ(FormatDuration(59.4), "59 s");
  EXPECT_EQ(FormatDuration(65.0), "1 min 05 s");
  EXPECT_EQ(FormatDuration(3599.0), "59 min 59 s");
  EXPECT_EQ(FormatDuration(7500.0), "2 h 05 min");
}

}  // namespace
}  // namespace posenc::study
