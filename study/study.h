// The whole study, in order: train every run (resuming any that was interrupted), measure every
// arm at every length with both protocols, then write the report. Each stage skips what an
// earlier invocation already finished, so running it again after an interruption resumes it.
// Under MPI the runs and evaluations are spread over the ranks (a fine-tune after its base run,
// an evaluation after its run), which share --out; rank 0 writes the report once all are done.
// Asked to stop (Ctrl-C, SIGTERM: stop.h) on any rank, every rank stops at its next safe point,
// keeping its work, and rank 0 says what is kept and how to resume.
#pragma once

#include <filesystem>
#include <string>

#include "arms.h"

namespace posenc::study {

struct StudyPaths {
  std::filesystem::path out;   // runs/ (checkpoints, loss logs) and results/ (per-arm JSON)
  std::filesystem::path docs;  // STUDY.md and study/*.png
};

// Returns 0 once the report is written, or the stop reason (stop.h) if it stopped early.
// `command`: the command line that resumes it, for the message after a stop.
int RunStudy(Settings settings, const StudyPaths& paths, int threads, const std::string& command);

}  // namespace posenc::study
