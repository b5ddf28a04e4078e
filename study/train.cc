#include "train.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <numbers>
#include <random>
#include <sstream>

#include "parallel.h"
#include "random_positions.h"
#include "stop.h"

namespace posenc::study {
namespace {

namespace fs = std::filesystem;

CharModel NewModel(const Settings& settings, const Run& run, int64_t vocab) {
  torch::manual_seed(run.seed);
  ModelShape shape = settings.shape;
  shape.vocab = vocab;
  return CharModel(shape, run.method);
}

// Writes `write(path)` to path + ".tmp", then renames it over path: a crash leaves either the old
// file or the new one, never half of one.
template <typename F>
void WriteAtomically(const fs::path& path, F&& write) {
  const fs::path tmp = path.string() + ".tmp";
  write(tmp);
  fs::rename(tmp, path);
}

// Windows of length + 1 characters (inputs and the next-character targets) at random starts in
// the training text; the starts depend only on (seed, step).
torch::Tensor SampleBatch(const torch::Tensor& train, const Run& run, int64_t step) {
  std::mt19937_64 engine(run.seed * 1'000'003ULL + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> start(0, train.size(0) - run.length - 2);
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < run.batch; ++b) {
    rows.push_back(train.slice(0, start(engine)).slice(0, 0, run.length + 1));
  }
  return torch::stack(rows);
}

// Randomized positions' seed for a step: like the batch, a function of (seed, step) alone, and
// apart from the batch's.
uint64_t PositionSeed(const Run& run, int64_t step) {
  return (run.seed * 1'000'003ULL + static_cast<uint64_t>(step)) ^ 0x9E3779B97F4A7C15ULL;
}

// Warm-up over the first 5% of steps, then a cosine down to 10% of the peak; or constant.
double LearningRate(const Run& run, int64_t step) {
  if (!run.warmup_and_decay) return run.learning_rate;
  const double warmup = std::max(1.0, 0.05 * static_cast<double>(run.steps));
  if (static_cast<double>(step) < warmup) return run.learning_rate * (step + 1) / warmup;
  const double progress = (step - warmup) / std::max(1.0, run.steps - warmup);
  return run.learning_rate * (0.1 + 0.45 * (1.0 + std::cos(std::numbers::pi * progress)));
}

void AppendLog(const fs::path& path, const std::vector<double>& row) {
  std::ofstream out(path, std::ios::app);
  for (size_t i = 0; i < row.size(); ++i) out << (i ? "\t" : "") << row[i];
  out << "\n";
}

}  // namespace

bool RunFinished(const fs::path& runs_dir, const std::string& name) {
  return fs::exists(runs_dir / name / "model.pt");
}

CharModel LoadModel(const Settings& settings, const Run& run, const fs::path& runs_dir) {
  CharModel model = NewModel(settings, run, settings.shape.vocab);
  torch::load(model, (runs_dir / run.name / "model.pt").string());
  return model;
}

std::vector<std::vector<double>> ReadLossLog(const fs::path& run_dir) {
  std::vector<std::vector<double>> rows;
  std::ifstream in(run_dir / "loss.tsv");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<double> row;
    double v;
    while (fields >> v) row.push_back(v);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

std::optional<int64_t> CheckpointStep(const fs::path& run_dir) {
  int64_t step = 0;
  if (std::ifstream in(run_dir / "step.txt"); in >> step) return step;
  return std::nullopt;
}

CharModel TrainRun(const Settings& settings, const Run& run, const Corpus& corpus,
                   const fs::path& runs_dir, const ProgressFn& progress,
                   const std::function<double(CharModel&)>& fine_tune_eval, const StepFn& on_step) {
  const fs::path dir = runs_dir / run.name;
  if (RunFinished(runs_dir, run.name)) return LoadModel(settings, run, runs_dir);
  fs::create_directories(dir);

  CharModel model = NewModel(settings, run, settings.shape.vocab);
  if (run.init_from) torch::load(model, (runs_dir / *run.init_from / "model.pt").string());
  torch::optim::AdamW optimizer(
      model->parameters(),
      torch::optim::AdamWOptions(run.learning_rate).betas({0.9, 0.95}).weight_decay(0.01));
  int64_t step = 0;
  // The loss summed since the last log row, and the seconds of training before this process.
  double loss_sum = 0.0, seconds_before = 0.0;
  int64_t loss_count = 0;
  const fs::path checkpoint = dir / "checkpoint.pt", optimizer_file = dir / "optimizer.pt",
                 step_file = dir / "step.txt", log_file = dir / "loss.tsv";
  if (fs::exists(step_file)) {  // resume: the step file is written last, after both states
    std::ifstream in(step_file);
    in >> step;
    torch::load(model, checkpoint.string());
    torch::load(optimizer, optimizer_file.string());
    // Log rows written after that checkpoint are done again; drop them.
    std::vector<std::vector<double>> rows = ReadLossLog(dir);
    fs::remove(log_file);
    for (const auto& row : rows) {
      if (row[0] <= static_cast<double>(step)) AppendLog(log_file, row);
    }
    // A checkpoint between two log rows also holds the loss summed since the last one.
    if (!(in >> loss_sum >> loss_count >> seconds_before)) {
      loss_sum = 0.0;
      loss_count = 0;
      const std::vector<std::vector<double>> kept = ReadLossLog(dir);
      seconds_before = kept.empty() ? 0.0 : kept.back()[2];
    }
  } else {
    fs::remove(log_file);
  }

  const Rope rope = RopeFor(settings, run.stretch, run.length);
  const auto start = std::chrono::steady_clock::now();
  auto last_checkpoint = start;
  const auto training_seconds = [&] {
    return seconds_before +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto save_checkpoint = [&] {
    WriteAtomically(checkpoint, [&](const fs::path& p) { torch::save(model, p.string()); });
    WriteAtomically(optimizer_file, [&](const fs::path& p) { torch::save(optimizer, p.string()); });
    WriteAtomically(step_file, [&](const fs::path& p) {
      std::ofstream(p) << step << "\n"
                       << std::setprecision(17) << loss_sum << " " << loss_count << " "
                       << training_seconds() << "\n";
    });
    last_checkpoint = std::chrono::steady_clock::now();
  };
  if (on_step) on_step(run, step);
  model->train();
  while (step < run.steps) {
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(LearningRate(run, step));
    }
    const torch::Tensor batch = SampleBatch(corpus.train, run, step);
    const torch::Tensor inputs = batch.slice(1, 0, run.length);
    const torch::Tensor targets = batch.slice(1, 1);
    const torch::Tensor positions =
        run.method == PositionMethod::kRandomized
            ? RandomOrderedPositionRows(run.batch, run.length, settings.random_position_range(),
                                        PositionSeed(run, step))
            : torch::Tensor();
    const torch::Tensor logits = model->forward(inputs, rope, {}, positions);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(2)}), targets.reshape(-1));
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    loss_sum += loss.item<double>();
    ++loss_count;
    ++step;
    if (step % settings.log_every == 0 || step == run.steps) {
      std::vector<double> row = {static_cast<double>(step), loss_sum / loss_count,
                                 training_seconds()};
      if (fine_tune_eval) {
        model->eval();
        row.push_back(fine_tune_eval(model));
        model->train();
      }
      AppendLog(log_file, row);
      progress(run, step, loss_sum / loss_count);
      loss_sum = 0.0;
      loss_count = 0;
    }
    static int64_t steps_in_this_process = 0;
    if (++steps_in_this_process == settings.stop_after_steps) RequestStop(kStopAsked);
    const bool stopping = step < run.steps && parallel::StopReason() != 0;
    const double since_checkpoint =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint).count();
    if (step < run.steps && (step % settings.checkpoint_every == 0 ||
                             since_checkpoint >= settings.checkpoint_seconds || stopping)) {
      save_checkpoint();
    }
    if (on_step) on_step(run, step);
    if (stopping) {
      throw StudyStopped(run.name + " at step " + std::to_string(step) + " of " +
                         std::to_string(run.steps) + " (checkpoint written)");
    }
  }
  WriteAtomically(dir / "model.pt", [&](const fs::path& p) { torch::save(model, p.string()); });
  for (const fs::path& p : {checkpoint, optimizer_file, step_file}) fs::remove(p);
  return model;
}

}  // namespace posenc::study
