// Training one run, resumably: every checkpoint_every steps, or checkpoint_seconds of training,
// whichever comes first, the weights, the optimizer state and the loss log go to runs/<name>/
// (written to temporary names, then renamed), and a run whose folder holds a checkpoint continues
// from it. Batches are a function of (seed, step), and the checkpoint keeps the loss summed since
// the last log row, so a resumed run logs the same numbers as an uninterrupted one wherever it
// stopped. Asked to stop (stop.h), a run writes its checkpoint after the step in progress.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arms.h"
#include "corpus.h"
#include "model.h"

namespace posenc::study {

struct LogPoint {
  int64_t step;
  double loss;  // mean training loss (nats per character) over the last log_every steps
};

// Thrown when the study is asked to stop (stop.h) in the middle of a task, once what can be kept
// is written; what() says where it stopped ("alibi-s1 at step 25 of 30 (checkpoint written)").
struct StudyStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Called after each logged step with the run, the step and the mean loss since the last log.
using ProgressFn = std::function<void(const Run&, int64_t step, double loss)>;
// Called after every step (its checkpoint and log row written), and once before the first.
using StepFn = std::function<void(const Run&, int64_t step)>;

// Trains `run` (or finishes it) and returns its model; a run already finished is only loaded.
// `fine_tune_eval`, when set, is called every log_every steps of a fine-tune with the model, and
// its value is logged beside the training loss (held-out loss at the fine-tune length). After
// Settings::stop_after_steps steps in this process it asks for a stop (kStopAsked), as a signal
// would; when a stop is asked for it checkpoints and throws StudyStopped.
CharModel TrainRun(const Settings& settings, const Run& run, const Corpus& corpus,
                   const std::filesystem::path& runs_dir, const ProgressFn& progress,
                   const std::function<double(CharModel&)>& fine_tune_eval = {},
                   const StepFn& on_step = {});

// The step an interrupted run's checkpoint holds; empty when it has none.
std::optional<int64_t> CheckpointStep(const std::filesystem::path& run_dir);

// The loss log of a run: rows of (step, training loss, seconds of training so far[, held-out
// loss]).
std::vector<std::vector<double>> ReadLossLog(const std::filesystem::path& run_dir);

// True when runs/<name>/model.pt exists.
bool RunFinished(const std::filesystem::path& runs_dir, const std::string& name);

CharModel LoadModel(const Settings& settings, const Run& run,
                    const std::filesystem::path& runs_dir);

}  // namespace posenc::study
