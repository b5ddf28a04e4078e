#include "progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace posenc::study {

TimeLeft::TimeLeft(double training_units, double evaluation_units, int warmup_steps)
    : warmup_steps_(warmup_steps) {
  training_.left = training_units;
  evaluation_.left = evaluation_units;
}

void TimeLeft::StartRun() { untimed_ = warmup_steps_; }

void TimeLeft::Done(Work work, double units, double seconds) {
  Kind& kind = work == Work::kTraining ? training_ : evaluation_;
  kind.left = std::max(0.0, kind.left - units);
  if (work == Work::kTraining && untimed_ > 0) {
    --untimed_;
    return;
  }
  kind.timed_units += units;
  kind.timed_seconds += seconds;
}

void TimeLeft::Skip(Work work, double units) {
  Kind& kind = work == Work::kTraining ? training_ : evaluation_;
  kind.left = std::max(0.0, kind.left - units);
}

std::optional<double> TimeLeft::Kind::SecondsLeft() const {
  if (left <= 0.0) return 0.0;
  if (timed_units <= 0.0) return std::nullopt;
  return timed_seconds / timed_units * left;
}

std::optional<double> TimeLeft::TrainingSeconds() const { return training_.SecondsLeft(); }

std::optional<double> TimeLeft::Seconds() const {
  const std::optional<double> training = training_.SecondsLeft(),
                              evaluation = evaluation_.SecondsLeft();
  if (!training || !evaluation) return std::nullopt;
  return *training + *evaluation;
}

std::string TimeLeft::Describe() const {
  if (const std::optional<double> all = Seconds()) return "about " + FormatDuration(*all) + " left";
  const std::optional<double> training = training_.SecondsLeft();
  if (training && *training > 0.0) {
    return "about " + FormatDuration(*training) +
           " of training left, then the evaluations (not timed yet)";
  }
  return "estimating...";
}

std::string FormatDuration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  char text[48];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%lld s", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lld min %02lld s", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lld h %02lld min", s / 3600, s / 60 % 60);
  }
  return text;
}

}  // namespace posenc::study
