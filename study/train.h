// Training one run, resumably: every checkpoint_every steps the weights, the optimizer state and
// the loss log go to runs/<name>/ (written to temporary names, then renamed), and a run whose
// folder holds a checkpoint continues from it. Batches are a function of (seed, step), so a
// resumed run sees the same batches as an uninterrupted one.
#pragma once

#include <filesystem>
#include <functional>
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

// Thrown when Settings::stop_after_steps training steps have run in this process.
struct StudyStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Called after each logged step with the run, the step and the mean loss since the last log.
using ProgressFn = std::function<void(const Run&, int64_t step, double loss)>;

// Trains `run` (or finishes it) and returns its model; a run already finished is only loaded.
// `fine_tune_eval`, when set, is called every log_every steps of a fine-tune with the model, and
// its value is logged beside the training loss (held-out loss at the fine-tune length).
CharModel TrainRun(const Settings& settings, const Run& run, const Corpus& corpus,
                   const std::filesystem::path& runs_dir, const ProgressFn& progress,
                   const std::function<double(CharModel&)>& fine_tune_eval = {});

// The loss log of a run: rows of (step, training loss, seconds of training so far[, held-out
// loss]).
std::vector<std::vector<double>> ReadLossLog(const std::filesystem::path& run_dir);

// True when runs/<name>/model.pt exists.
bool RunFinished(const std::filesystem::path& runs_dir, const std::string& name);

CharModel LoadModel(const Settings& settings, const Run& run,
                    const std::filesystem::path& runs_dir);

}  // namespace posenc::study
