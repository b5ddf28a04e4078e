// The time left in the study, from measured times only. Work is counted in units (study.cc: a
// training token is three, an evaluated token one) and the seconds per unit are measured apart
// for training and for evaluation, which run at different speeds per unit. The first steps of
// each training run are not timed: libtorch allocates its buffers and starts its threads there,
// and they take several times as long as the steady steps (timing them made the first estimates
// several times too high). No time is quoted for work of a kind that has not been timed yet.
//
// Pure arithmetic: the caller measures the seconds, so the estimate can be tested on made-up
// times.
#pragma once

#include <optional>
#include <string>

namespace posenc::study {

enum class Work { kTraining, kEvaluation };

class TimeLeft {
 public:
  // The units of each kind still to do; `warmup_steps`: steps of each training run left untimed.
  TimeLeft(double training_units, double evaluation_units, int warmup_steps = 2);

  // A training run starts or resumes: its next `warmup_steps` steps are counted, not timed.
  void StartRun();
  // `units` of `work` done in `seconds` (a training step, or a whole evaluation).
  void Done(Work work, double units, double seconds);
  // `units` of `work` that need no time after all (a resumed run's steps done before).
  void Skip(Work work, double units);

  // Seconds left, once every kind of work left has been timed; empty before.
  std::optional<double> Seconds() const;
  // Seconds of training left, once training has been timed; empty before.
  std::optional<double> TrainingSeconds() const;
  // For the progress lines: "about 12 min 05 s left"; "about 3 min 10 s of training left, then
  // the evaluations (not timed yet)"; "estimating..." before anything left has been timed.
  std::string Describe() const;

 private:
  struct Kind {
    double left = 0.0;         // units still to do
    double timed_units = 0.0;  // units measured, and the seconds they took
    double timed_seconds = 0.0;
    std::optional<double> SecondsLeft() const;
  };
  Kind training_, evaluation_;
  int warmup_steps_, untimed_ = 0;
};

// "42 s", "12 min 05 s", "2 h 05 min".
std::string FormatDuration(double seconds);

}  // namespace posenc::study
