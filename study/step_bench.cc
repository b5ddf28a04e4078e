// posenc_study_step_bench: the study's training step, timed. Each case runs the real (full
// settings) model for a number of training steps (forward, backward, gradient clipping, AdamW, as
// TrainRun does) or of evaluation forwards (no gradient), on random characters; cases take turns
// round-robin for every repeat, so that a burst of load from other processes hits each alike, and
// the best and median time per step are printed.
//
//   posenc_study_step_bench [--steps N] [--repeats R] [--threads T] [--cases rope,alibi,...]
//
// Cases: rope, alibi, learned, sinusoidal, nope, t5, xpos, kerple, fire, rope-randomized (base
// runs: 32 windows of 128 characters), rope-ft (a YaRN fine-tune: 8 windows of 512),
// eval-rope-2048 and eval-rope-128 (held-out scoring: 8192 characters per batch, at 16x and at
// 1x), eval-fire-2048 and eval-kerple-2048 (the same at 16x).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "arms.h"
#include "blas_info.h"
#include "model.h"
#include "random_positions.h"

namespace {

using namespace posenc::study;

struct Case {
  std::string name;
  PositionMethod method;
  Stretch stretch;
  int64_t length, batch;
  bool train;
};

const std::vector<Case>& AllCases() {
  static const std::vector<Case> cases = {
      {"rope", PositionMethod::kRope, Stretch::kNone, 128, 32, true},
      {"alibi", PositionMethod::kAlibi, Stretch::kNone, 128, 32, true},
      {"learned", PositionMethod::kLearned, Stretch::kNone, 128, 32, true},
      {"sinusoidal", PositionMethod::kSinusoidal, Stretch::kNone, 128, 32, true},
      {"nope", PositionMethod::kNone, Stretch::kNone, 128, 32, true},
      {"t5", PositionMethod::kT5, Stretch::kNone, 128, 32, true},
      {"xpos", PositionMethod::kXpos, Stretch::kNone, 128, 32, true},
      {"kerple", PositionMethod::kKerple, Stretch::kNone, 128, 32, true},
      {"fire", PositionMethod::kFire, Stretch::kNone, 128, 32, true},
      {"rope-randomized", PositionMethod::kRandomized, Stretch::kNone, 128, 32, true},
      {"rope-ft", PositionMethod::kRope, Stretch::kYarn, 512, 8, true},
      {"eval-rope-2048", PositionMethod::kRope, Stretch::kNone, 2048, 4, false},
      {"eval-rope-128", PositionMethod::kRope, Stretch::kNone, 128, 64, false},
      {"eval-fire-2048", PositionMethod::kFire, Stretch::kNone, 2048, 4, false},
      {"eval-kerple-2048", PositionMethod::kKerple, Stretch::kNone, 2048, 4, false},
  };
  return cases;
}

// A model, its optimizer and a fixed batch, built once so that only the steps are timed.
class Runner {
 public:
  Runner(const Settings& settings, const Case& c)
      : case_(c),
        model_(settings.shape, c.method),
        rope_(RopeFor(settings, c.stretch, c.length)),
        optimizer_(model_->parameters(),
                   torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.01)) {
    const torch::Tensor batch =
        torch::randint(0, settings.shape.vocab, {c.batch, c.length + 1}, torch::kInt64);
    inputs_ = batch.slice(1, 0, c.length);
    if (c.method == PositionMethod::kRandomized) {
      positions_ =
          RandomOrderedPositionRows(c.batch, c.length, settings.random_position_range(), 1);
    }
    targets_ = batch.slice(1, 1).reshape(-1);
  }

  void Step() {
    if (!case_.train) {
      torch::NoGradGuard no_grad;
      model_->eval();
      model_->forward(inputs_, rope_, {}, positions_);
      return;
    }
    model_->train();
    const torch::Tensor logits = model_->forward(inputs_, rope_, {}, positions_);
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(2)}), targets_);
    optimizer_.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model_->parameters(), 1.0);
    optimizer_.step();
  }

 private:
  Case case_;
  CharModel model_;
  posenc::Rope rope_;
  torch::optim::AdamW optimizer_;
  torch::Tensor inputs_, targets_, positions_;  // positions_: randomized only
};

}  // namespace

int main(int argc, char** argv) {
  RestartWithOpenBlasKernelsForThisCpu(argv);  // as the study does
  CLI::App app{"the posenc study's training step, timed on the full settings' model"};
  int64_t steps = 10, repeats = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string names = "rope,alibi";
  app.add_option("--steps", steps, "steps per timed repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats per case")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads for libtorch")->check(CLI::Range(1, 256));
  app.add_option("--cases", names, "comma-separated cases (see the source's header)");
  CLI11_PARSE(app, argc, argv);

  torch::set_num_threads(threads);
  UseSingleThreadedBlas();  // as the study does
  Settings settings = Settings::Full();
  settings.shape.vocab = 73;  // the King James Bible's symbols
  std::vector<Case> cases;
  std::stringstream list(names);
  for (std::string name; std::getline(list, name, ',');) {
    const auto it = std::find_if(AllCases().begin(), AllCases().end(),
                                 [&](const Case& c) { return c.name == name; });
    if (it == AllCases().end()) {
      std::fprintf(stderr, "posenc_study_step_bench: no case %s\n", name.c_str());
      return 1;
    }
    cases.push_back(*it);
  }
  torch::manual_seed(1);
  std::vector<Runner> runners;
  for (const Case& c : cases) {
    runners.emplace_back(settings, c);
    runners.back().Step();  // warm-up: allocations, first-touch, OpenMP threads
  }
  std::vector<std::vector<double>> ms(cases.size());
  for (int64_t r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < steps; ++s) runners[i].Step();
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      ms[i].push_back(took.count() / static_cast<double>(steps));
    }
  }
  std::printf("%d threads, BLAS: %s; %lld steps x %lld repeats, round-robin; ms per step\n",
              threads, DescribeBlas().c_str(), static_cast<long long>(steps),
              static_cast<long long>(repeats));
  std::printf("%-16s %10s %10s\n", "case", "best", "median");
  for (size_t i = 0; i < cases.size(); ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    std::printf("%-16s %10.1f %10.1f\n", cases[i].name.c_str(), ms[i].front(),
                ms[i][ms[i].size() / 2]);
  }
  return 0;
}
