#include "study.h"

#include <chrono>
#include <cstdio>
#include <map>

#include "blas_info.h"
#include "corpus.h"
#include "evaluate.h"
#include "report.h"
#include "results.h"
#include "train.h"

namespace posenc::study {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Work still to do, in "token passes": a training token costs about three (forward and
// backward), an evaluated token one. Time left = seconds per unit so far x units left.
class Progress {
 public:
  explicit Progress(double total_units) : total_(total_units), start_(Clock::now()) {}
  void Done(double units) { done_ += units; }
  std::string TimeLeft() const {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    if (done_ <= 0.0) return "estimating";
    const double left = elapsed / done_ * std::max(0.0, total_ - done_);
    char text[64];
    std::snprintf(text, sizeof text, "about %.0f min %02.0f s left", std::floor(left / 60),
                  std::fmod(left, 60.0));
    return text;
  }

 private:
  double total_, done_ = 0.0;
  Clock::time_point start_;
};

double TrainUnits(const Run& run, int64_t steps) {
  return 3.0 * static_cast<double>(steps * run.batch * run.length);
}
double EvalUnits(const Settings& s) {
  // Sliding windows score a quarter of each window, so they read about four times the text.
  return 5.0 * static_cast<double>(s.eval_chars * s.multiples.size());
}

const Run& FindRun(const std::vector<Run>& runs, const std::string& name) {
  for (const Run& r : runs) {
    if (r.name == name) return r;
  }
  throw std::logic_error("[study] no run named " + name);
}

}  // namespace

void RunStudy(Settings settings, const StudyPaths& paths, int threads) {
  torch::set_num_threads(threads);
  const bool single_blas = UseSingleThreadedBlas();
  std::printf("posenc length-extrapolation study (%s settings)\n",
              settings.quick ? "quick" : "full");
  std::printf("  libtorch %s, %d threads, BLAS: %s%s\n", TORCH_VERSION, threads,
              DescribeBlas().c_str(), single_blas ? ", one thread per call" : "");
  const Corpus corpus = MakeCorpus(ReadKingJamesBible());
  settings.shape.vocab = static_cast<int64_t>(corpus.symbols.size());
  std::printf(
      "  text: King James Bible, %lld training and %lld held-out characters, %lld symbols\n",
      static_cast<long long>(corpus.train.numel()), static_cast<long long>(corpus.held_out.numel()),
      static_cast<long long>(settings.shape.vocab));
  std::printf("  output: %s (checkpoints, results), %s (report)\n\n", paths.out.c_str(),
              paths.docs.c_str());

  const fs::path runs_dir = paths.out / "runs", results_dir = paths.out / "results";
  const std::vector<Run> runs = Runs(settings);
  const std::vector<Arm> arms = Arms();
  double units = 0.0;
  for (const Run& run : runs) {
    if (!RunFinished(runs_dir, run.name)) units += TrainUnits(run, run.steps);
  }
  for (const Arm& arm : arms) {
    for (uint64_t seed : settings.seeds) {
      if (!LoadResult(results_dir, arm.key, seed)) units += EvalUnits(settings);
    }
  }
  Progress progress(units);

  // 1. Training: base runs, then the fine-tunes that start from them.
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    if (RunFinished(runs_dir, run.name)) {
      std::printf("[%zu/%zu] %s: finished earlier, kept\n", i + 1, runs.size(), run.name.c_str());
      continue;
    }
    int64_t last_step = 0;
    const auto report = [&](const Run& r, int64_t step, double loss) {
      progress.Done(TrainUnits(r, step - last_step));
      last_step = step;
      std::printf("[%zu/%zu] %-18s step %5lld/%lld  loss %.3f  %s\n", i + 1, runs.size(),
                  r.name.c_str(), static_cast<long long>(step), static_cast<long long>(r.steps),
                  loss, progress.TimeLeft().c_str());
      std::fflush(stdout);
    };
    std::function<double(CharModel&)> fine_tune_eval;
    if (run.init_from) {  // a fine-tune logs its held-out loss at its own length as it goes
      const Rope rope = RopeFor(settings, run.stretch, run.length);
      fine_tune_eval = [&, rope](CharModel& model) {
        return HeldOutLoss(model, rope, corpus.held_out, run.length, Protocol::kNonOverlapping,
                           settings.eval_chars / 2, settings.eval_batch_tokens);
      };
    }
    TrainRun(settings, run, corpus, runs_dir, report, fine_tune_eval);
  }

  // 2. Evaluation: every arm and seed at every length, both protocols.
  for (const Arm& arm : arms) {
    for (uint64_t seed : settings.seeds) {
      if (LoadResult(results_dir, arm.key, seed)) continue;
      const Run& run = FindRun(runs, arm.run_prefix + "-s" + std::to_string(seed));
      CharModel model = LoadModel(settings, run, runs_dir);
      const auto start = Clock::now();
      ArmResult result{.key = arm.key, .seed = seed};
      for (int64_t multiple : settings.multiples) {
        const int64_t length = multiple * settings.train_length;
        const Rope rope = RopeFor(settings, arm.stretch, length);
        for (Protocol p : {Protocol::kNonOverlapping, Protocol::kSliding}) {
          result.nats[ProtocolName(p)][length] =
              HeldOutLoss(model, rope, corpus.held_out, length, p, settings.eval_chars,
                          settings.eval_batch_tokens, LongContextFor(settings, arm.reading, length));
        }
      }
      result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      SaveResult(results_dir, result);
      progress.Done(EvalUnits(settings));
      std::printf("evaluated %-14s seed %llu:", arm.key.c_str(),
                  static_cast<unsigned long long>(seed));
      for (const auto& [length, nats] : result.nats["nonoverlapping"])
        std::printf(" %lld:%.3f", static_cast<long long>(length), nats);
      std::printf("  (%s)\n", progress.TimeLeft().c_str());
      std::fflush(stdout);
    }
  }

  // 3. The report.
  WriteReport(settings, corpus, runs, arms, paths, threads);
  std::printf("\nwrote %s\n", (paths.docs / "STUDY.md").c_str());
}

}  // namespace posenc::study
