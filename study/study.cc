#include "study.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "blas_info.h"
#include "corpus.h"
#include "evaluate.h"
#include "parallel.h"
#include "progress.h"
#include "report.h"
#include "results.h"
#include "stop.h"
#include "train.h"

namespace posenc::study {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Work is counted in "token passes": a training token costs about three (forward and backward),
// an evaluated token one. The time left is measured in seconds per unit (progress.h).
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

// One unit of work: training a run, or evaluating an arm with one seed.
struct Task {
  const Run* run = nullptr;  // training: this run, index in Runs()
  const Arm* arm = nullptr;  // evaluation: this arm and seed
  uint64_t seed = 0;
  size_t index = 0;
  std::vector<size_t> deps;  // tasks that must finish first (the runs it starts from or reads)
  double units = 0.0;        // estimated cost, in the units TimeLeft counts
  bool done = false;         // finished by an earlier invocation
  int rank = 0;              // the rank that does it
};

// Every task, in the order one process does them: base runs, fine-tunes, evaluations. A task
// only depends on earlier ones. Whether each is done comes from rank 0's look at the disk, so
// that every rank plans from the same state even if another rank has already started writing.
std::vector<Task> Tasks(const Settings& settings, const std::vector<Run>& runs,
                        const std::vector<Arm>& arms, const fs::path& runs_dir,
                        const fs::path& results_dir) {
  std::vector<Task> tasks;
  std::map<std::string, size_t> train_task;
  for (size_t i = 0; i < runs.size(); ++i) {
    Task task{.run = &runs[i], .index = i, .units = TrainUnits(runs[i], runs[i].steps)};
    if (runs[i].init_from) task.deps.push_back(train_task.at(*runs[i].init_from));
    train_task[runs[i].name] = tasks.size();
    tasks.push_back(task);
  }
  for (const Arm& arm : arms) {
    for (uint64_t seed : settings.seeds) {
      const std::string run = arm.run_prefix + "-s" + std::to_string(seed);
      tasks.push_back(
          {.arm = &arm, .seed = seed, .deps = {train_task.at(run)}, .units = EvalUnits(settings)});
    }
  }
  std::string done(tasks.size(), '0');
  if (parallel::Rank() == 0) {
    for (size_t t = 0; t < tasks.size(); ++t) {
      const Task& task = tasks[t];
      const bool finished = task.run
                                ? RunFinished(runs_dir, task.run->name)
                                : LoadResult(results_dir, task.arm->key, task.seed).has_value();
      done[t] = finished ? '1' : '0';
    }
  }
  parallel::Broadcast(done);
  for (size_t t = 0; t < tasks.size(); ++t) tasks[t].done = done[t] == '1';
  return tasks;
}

// List scheduling: in task order, each unfinished task goes to the rank that can start it
// earliest by the cost estimates (free, and its dependencies finished), the lowest such rank on a
// tie. Every rank computes the same plan, so none needs to be told it. With one rank it is the
// single process's order.
void Assign(std::vector<Task>& tasks, int ranks) {
  std::vector<double> free_at(static_cast<size_t>(ranks), 0.0), finish(tasks.size(), 0.0);
  for (size_t t = 0; t < tasks.size(); ++t) {
    Task& task = tasks[t];
    if (task.done) continue;
    double ready = 0.0;
    for (size_t dep : task.deps) ready = std::max(ready, finish[dep]);
    int best = 0;
    for (int r = 1; r < ranks; ++r) {
      if (std::max(free_at[r], ready) < std::max(free_at[best], ready)) best = r;
    }
    task.rank = best;
    finish[t] = std::max(free_at[best], ready) + task.units;
    free_at[best] = finish[t];
  }
}

// Every rank reads and writes the same runs/ and results/ (a fine-tune starts from a base run
// another rank trained; rank 0 reports on all of them), so --out must be one folder they all
// see, as a cluster's shared file system provides. Rank 0 writes a token there; each rank reads
// it back.
void CheckSharedOutput(const fs::path& out) {
  const fs::path probe = out / ".mpi-shared-check";
  std::string token;
  if (parallel::Rank() == 0) {
    fs::create_directories(out);
    token = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
    std::ofstream(probe) << token;
  }
  parallel::Broadcast(token);
  std::string seen;
  std::ifstream(probe) >> seen;
  const bool shared = parallel::AllTrue(seen == token);
  parallel::Barrier();
  if (parallel::Rank() == 0) fs::remove(probe);
  if (!shared) {
    throw std::runtime_error("[study] " + out.string() +
                             " is not the same folder on every MPI rank: --out must be on a "
                             "file system they all share");
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Train(const Settings& settings, const Run& run, size_t index, size_t count,
           const Corpus& corpus, const fs::path& runs_dir, TimeLeft& time_left,
           const std::string& who) {
  const auto report = [&](const Run& r, int64_t step, double loss) {
    std::printf("%s[%zu/%zu] %-18s step %5lld/%lld  loss %.3f  %s\n", who.c_str(), index + 1, count,
                r.name.c_str(), static_cast<long long>(step), static_cast<long long>(r.steps), loss,
                time_left.Describe().c_str());
    std::fflush(stdout);
  };
  // Every step is timed, from the end of the one before (its checkpoint and log row included).
  std::optional<int64_t> last_step;
  Clock::time_point last_time;
  const auto on_step = [&](const Run& r, int64_t step) {
    const Clock::time_point now = Clock::now();
    if (!last_step) {  // before the first step: a resumed run's steps done earlier need no time
      time_left.Skip(Work::kTraining, TrainUnits(r, step));
      time_left.StartRun();
    } else {
      time_left.Done(Work::kTraining, TrainUnits(r, step - *last_step), Seconds(now - last_time));
    }
    last_step = step;
    last_time = now;
  };
  std::function<double(CharModel&)> fine_tune_eval;
  if (run.init_from) {  // a fine-tune logs its held-out loss at its own length as it goes
    const Rope rope = RopeFor(settings, run.stretch, run.length);
    fine_tune_eval = [&, rope](CharModel& model) {
      return HeldOutLoss(model, rope, corpus.held_out, run.length, Protocol::kNonOverlapping,
                         settings.eval_chars / 2, settings.eval_batch_tokens);
    };
  }
  TrainRun(settings, run, corpus, runs_dir, report, fine_tune_eval, on_step);
}

void Evaluate(const Settings& settings, const Arm& arm, uint64_t seed, const Run& run,
              const Corpus& corpus, const fs::path& out, TimeLeft& time_left,
              const std::string& who) {
  const auto start = Clock::now();
  CharModel model = LoadModel(settings, run, out / "runs");
  ArmResult result{.key = arm.key, .seed = seed};
  for (int64_t multiple : settings.multiples) {
    const int64_t length = multiple * settings.train_length;
    const Rope rope = RopeFor(settings, arm.stretch, length);
    for (Protocol p : {Protocol::kNonOverlapping, Protocol::kSliding}) {
      // Asked to stop, an evaluation is left unfinished and done again on resuming.
      if (parallel::StopReason() != 0) {
        throw StudyStopped("the evaluation of " + arm.key + " seed " + std::to_string(seed) +
                           " (done again on resuming)");
      }
      result.nats[ProtocolName(p)][length] = HeldOutLoss(
          model, rope, corpus.held_out, length, p, settings.eval_chars, settings.eval_batch_tokens,
          LongContextFor(settings, arm.reading, length), settings.random_position_range());
    }
  }
  result.seconds = Seconds(Clock::now() - start);
  SaveResult(out / "results", result);
  time_left.Done(Work::kEvaluation, EvalUnits(settings), result.seconds);
  std::printf("%sevaluated %-14s seed %llu:", who.c_str(), arm.key.c_str(),
              static_cast<unsigned long long>(seed));
  for (const auto& [length, nats] : result.nats["nonoverlapping"])
    std::printf(" %lld:%.3f", static_cast<long long>(length), nats);
  std::printf("  (%s)\n", time_left.Describe().c_str());
  std::fflush(stdout);
}

std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "none yet" : text;
}

// After a stop, from what is on disk (every rank's work, once all have stopped): the runs and
// arms finished, where each unfinished run's checkpoint stands, and the command that resumes.
void PrintKept(const Settings& settings, const std::vector<Run>& runs, const std::vector<Arm>& arms,
               const StudyPaths& paths, const std::string& command) {
  const fs::path runs_dir = paths.out / "runs", results_dir = paths.out / "results";
  std::vector<std::string> finished, checkpoints, evaluated, part_evaluated;
  for (const Run& run : runs) {
    if (RunFinished(runs_dir, run.name)) {
      finished.push_back(run.name);
    } else if (const std::optional<int64_t> step = CheckpointStep(runs_dir / run.name)) {
      checkpoints.push_back(run.name + " at step " + std::to_string(*step) + " of " +
                            std::to_string(run.steps));
    }
  }
  for (const Arm& arm : arms) {
    std::vector<std::string> seeds;
    for (uint64_t seed : settings.seeds) {
      if (LoadResult(results_dir, arm.key, seed)) seeds.push_back(std::to_string(seed));
    }
    if (seeds.size() == settings.seeds.size()) {
      evaluated.push_back(arm.key);
    } else if (!seeds.empty()) {
      part_evaluated.push_back(arm.key + " (seed " + Join(seeds) + ")");
    }
  }
  std::printf("Kept in %s:\n", paths.out.c_str());
  std::printf("  runs trained (%zu of %zu): %s\n", finished.size(), runs.size(),
              Join(finished).c_str());
  if (!checkpoints.empty()) {
    std::printf("  runs that continue from their checkpoint: %s\n", Join(checkpoints).c_str());
  }
  std::printf("  arms evaluated (%zu of %zu): %s\n", evaluated.size(), arms.size(),
              Join(evaluated).c_str());
  if (!part_evaluated.empty()) {
    std::printf("  arms evaluated for some seeds: %s\n", Join(part_evaluated).c_str());
  }
  std::error_code error;
  const fs::path here = fs::current_path(error);
  std::printf("Run again to resume, from %s:\n  %s\n", here.c_str(), command.c_str());
  std::fflush(stdout);
}

}  // namespace

int RunStudy(Settings settings, const StudyPaths& paths, int threads, const std::string& command) {
  const int rank = parallel::Rank(), ranks = parallel::Size();
  // Under MPI every rank prints its own progress; its lines say whose they are.
  const std::string who = ranks > 1 ? "rank " + std::to_string(rank) + ": " : "";
  torch::set_num_threads(threads);
  const bool single_blas = UseSingleThreadedBlas();
  if (rank == 0) {
    std::printf("posenc length-extrapolation study (%s settings)\n",
                settings.quick ? "quick" : "full");
    std::printf("  libtorch %s, %d threads%s, BLAS: %s%s\n", TORCH_VERSION, threads,
                ranks > 1 ? (" per rank, " + std::to_string(ranks) + " MPI ranks").c_str() : "",
                DescribeBlas().c_str(), single_blas ? ", one thread per call" : "");
  }
  const Corpus corpus = MakeCorpus(ReadKingJamesBible());
  settings.shape.vocab = static_cast<int64_t>(corpus.symbols.size());
  if (rank == 0) {
    std::printf(
        "  text: King James Bible, %lld training and %lld held-out characters, %lld symbols\n",
        static_cast<long long>(corpus.train.numel()),
        static_cast<long long>(corpus.held_out.numel()),
        static_cast<long long>(settings.shape.vocab));
    std::printf("  output: %s (checkpoints, results), %s (report)\n\n", paths.out.c_str(),
                paths.docs.c_str());
    std::fflush(stdout);
  }
  if (ranks > 1) CheckSharedOutput(paths.out);

  const fs::path runs_dir = paths.out / "runs", results_dir = paths.out / "results";
  const std::vector<Run> runs = Runs(settings);
  const std::vector<Arm> arms = Arms();
  std::vector<Task> tasks = Tasks(settings, runs, arms, runs_dir, results_dir);
  Assign(tasks, ranks);
  double training_units = 0.0, evaluation_units = 0.0;
  for (const Task& task : tasks) {
    if (task.done || task.rank != rank) continue;
    (task.run ? training_units : evaluation_units) += task.units;
  }
  TimeLeft time_left(training_units, evaluation_units);

  // Base runs, then the fine-tunes that start from them, then every arm and seed at every length
  // with both protocols: each rank does its own tasks in that order, waiting for a run another
  // rank trains before it starts from it.
  // Asked to stop (stop.h), a rank leaves its loop at the next safe point: after a training step
  // (with its checkpoint written), between the cells of an evaluation, or while it waits.
  std::vector<bool> arrived(tasks.size(), false);
  std::string stopped_in;  // the task this rank stopped in the middle of, if any
  for (size_t t = 0; t < tasks.size(); ++t) {
    const Task& task = tasks[t];
    if (task.done && task.run && rank == 0) {
      std::printf("[%zu/%zu] %s: finished earlier, kept\n", task.index + 1, runs.size(),
                  task.run->name.c_str());
    }
    if (task.done || task.rank != rank) continue;
    if (parallel::StopReason() != 0) break;
    bool ready = true;
    for (size_t dep : task.deps) {
      if (tasks[dep].done || tasks[dep].rank == rank || arrived[dep]) continue;
      ready = parallel::WaitFor(tasks[dep].rank, static_cast<int>(dep));
      if (!ready) break;
      arrived[dep] = true;
    }
    if (!ready) break;
    try {
      if (task.run) {
        Train(settings, *task.run, task.index, runs.size(), corpus, runs_dir, time_left, who);
        // The ranks with a task that starts from this run learn that it is finished, once each.
        std::set<int> waiting;
        for (const Task& later : tasks) {
          if (!later.done && later.rank != rank &&
              std::count(later.deps.begin(), later.deps.end(), t))
            waiting.insert(later.rank);
        }
        for (int r : waiting) parallel::Notify(r, static_cast<int>(t));
      } else {
        const Run& run = FindRun(runs, task.arm->run_prefix + "-s" + std::to_string(task.seed));
        Evaluate(settings, *task.arm, task.seed, run, corpus, paths.out, time_left, who);
      }
    } catch (const StudyStopped& stopped) {
      stopped_in = stopped.what();
      break;
    }
  }

  // Every rank is done or stopped; the report, from every rank's results, if none stopped.
  const int reason = parallel::EndTogether(parallel::StopReason());
  if (reason != 0) {
    if (!stopped_in.empty()) {
      std::printf("%sstopped by %s in %s\n", who.c_str(), StopName(reason), stopped_in.c_str());
      std::fflush(stdout);
    }
    parallel::Barrier();  // those lines first, then rank 0's summary
    if (rank == 0) {
      std::printf("\nposenc_study: stopped by %s; nothing finished is lost.\n", StopName(reason));
      PrintKept(settings, runs, arms, paths, command);
    }
    return reason;
  }
  if (rank != 0) return 0;
  WriteReport(settings, corpus, runs, arms, paths, threads);
  std::printf("\nwrote %s\n", (paths.docs / "STUDY.md").c_str());
  return 0;
}

}  // namespace posenc::study
