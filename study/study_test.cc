// The study's autograd functions against plain torch formulas (forward and gradient), the
// model's causality, and the stretched frequencies against their definitions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "arms.h"
#include "long_context.h"
#include "model.h"
#include "posenc/alibi.h"
#include "positions_autograd.h"
#include "progress.h"

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
        PositionMethod::kAlibi, PositionMethod::kNone}) {
    torch::manual_seed(2);
    CharModel model(
        ModelShape{.vocab = 11, .d_model = 32, .heads = 2, .layers = 2, .learned_rows = 64},
        method);
    torch::NoGradGuard no_grad;
    const Rope rope = Rope::Default(16);
    torch::Tensor ids = torch::randint(0, 11, {1, 20}, torch::kInt64);
    const torch::Tensor before = model->forward(ids, rope);
    ids[0][15] = (ids[0][15].item<int64_t>() + 1) % 11;  // change a later token
    const torch::Tensor after = model->forward(ids, rope);
    EXPECT_TRUE(torch::allclose(before.slice(1, 0, 15), after.slice(1, 0, 15)))
        << MethodName(method) << ": an earlier position saw a later token";
    EXPECT_FALSE(torch::allclose(before.slice(1, 15), after.slice(1, 15))) << MethodName(method);
  }
}

// The model's logits with attention composed in torch ops from the model's own parameters
// (matmul, ALiBi bias, causal mask, softmax, matmul; RoPE by ApplyRopeAutograd), as the model
// computed them before it trained through posenc's attention.
torch::Tensor ComposedLogits(CharModel& model, const torch::Tensor& ids, const Rope& rope) {
  namespace F = torch::nn::functional;
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
  if (method == PositionMethod::kLearned) x = x + p["learned"].slice(0, 0, n);
  if (method == PositionMethod::kSinusoidal) x = x + SinusoidalTable(positions, d);
  // [heads, queries, keys]: ALiBi's -slope * (i - j), or nothing.
  torch::Tensor bias = torch::zeros({h, n, n});
  if (method == PositionMethod::kAlibi) {
    const torch::Tensor slopes = torch::tensor(AlibiSlopes(Alibi{.num_heads = h})).view({h, 1, 1});
    const torch::Tensor distance = positions.unsqueeze(1) - positions.unsqueeze(0);
    bias = (-slopes * distance.to(torch::kFloat64)).to(torch::kFloat32);
  }
  const torch::Tensor future = torch::ones({n, n}, torch::kBool).triu(1);
  for (int64_t l = 0; l < shape.layers; ++l) {
    const std::string b = "block" + std::to_string(l) + "_";
    const torch::Tensor qkv = linear(b + "qkv", norm(b + "norm1", x)).view({batch, n, 3, h, dh});
    torch::Tensor q = qkv.select(2, 0), k = qkv.select(2, 1);
    const torch::Tensor v = qkv.select(2, 2);
    if (method == PositionMethod::kRope) {
      q = ApplyRopeAutograd(q, positions, rope);
      k = ApplyRopeAutograd(k, positions, rope);
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
      {PositionMethod::kNone, Stretch::kNone}};
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
    const std::vector<torch::Tensor> params = model->parameters();
    const torch::Tensor loss = loss_of(model->forward(ids, rope));
    const torch::Tensor expected = loss_of(ComposedLogits(model, ids, rope));
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
  left.Done(Work::kEvaluation, 10.0, 30.0);       // 3 s per evaluation unit
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
