// posenc_study: train short, test long. Trains tiny character-level models on the King James
// Bible with each position method that posenc provides and measures how their held-out loss
// changes as the evaluation window grows from 1x to 16x the training length.
//
//   posenc_study [--quick] [--out DIR] [--docs DIR] [--threads N]
//   mpirun -n N posenc_study ...   (built with MPI: the runs spread over N processes)
//
// Ctrl-C (or SIGTERM) stops it at the next safe point, keeping what is done; run it again to
// resume.
#include <c10/util/Exception.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>

#include "blas_info.h"
#include "parallel.h"
#include "stop.h"
#include "study.h"
#include "train.h"

namespace {

// `word` as the shell reads it back: as it is when it is plain, in single quotes otherwise.
std::string ShellQuote(std::string_view word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%") == std::string_view::npos) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The command that resumes this study: this one, less --stop-after-steps (which would stop it
// again), started the same way under MPI.
std::string ResumeCommand(int argc, char** argv) {
  std::string command;
  const int ranks = posenc::study::parallel::Size();
  if (ranks > 1) {
    if (std::getenv("SLURM_STEP_ID") != nullptr) {
      command = "srun -n " + std::to_string(ranks) + " ";
    } else {
      command = "mpirun";
      if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency())
        command += " --oversubscribe";
      if (geteuid() == 0) command += " --allow-run-as-root";
      command += " -n " + std::to_string(ranks) + " ";
    }
  }
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--stop-after-steps") {
      ++i;  // and its value
      continue;
    }
    if (arg.starts_with("--stop-after-steps=")) continue;
    command += (i ? " " : "") + ShellQuote(arg);
  }
  return command;
}

// Under MPI a failing rank ends the whole job (the others may be waiting for its runs); alone,
// it returns its exit code as before.
int Fail(int code) {
  if (posenc::study::parallel::Size() > 1) posenc::study::parallel::Abort(code);
  posenc::study::parallel::Finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  posenc::study::RestartWithOpenBlasKernelsForThisCpu(argv);
  posenc::study::parallel::Init(&argc, &argv);
  CLI::App app{"posenc length-extrapolation study: train at 128 characters, evaluate up to 16x"};
  bool quick = false;
  std::string out, docs;
  // The ranks on one machine share its cores: each takes its part, so that they do not
  // oversubscribe them (one process alone takes them all).
  const int local_ranks = posenc::study::parallel::LocalSize();
  int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
  app.add_flag("--quick", quick,
               "tiny settings: the whole pipeline in seconds (a smoke test, not a result)");
  app.add_option("--out", out,
                 "checkpoints and per-arm results (default: study-runs, or "
                 "study-runs-quick with --quick)");
  app.add_option("--docs", docs,
                 "where STUDY.md and its charts go (default: docs, or "
                 "<out>/docs with --quick)");
  app.add_option("--threads", threads,
                 "threads for libtorch (default: the cores, divided among the MPI ranks on "
                 "this machine)")
      ->check(CLI::Range(1, 256));
  int64_t stop_after_steps = 0;
  app.add_option("--stop-after-steps", stop_after_steps,
                 "stop after this many training steps, as Ctrl-C would (for tests)")
      ->check(CLI::NonNegativeNumber);
  double checkpoint_seconds = -1.0;
  app.add_option("--checkpoint-seconds", checkpoint_seconds,
                 "checkpoint a run at least this often, in seconds of training (default 60; 0: "
                 "after every step); it also checkpoints every 100 steps (20 with --quick)")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank stops here: none is left waiting.
    posenc::study::parallel::Finalize();
    return app.exit(e);
  }
  // Ctrl-C from here on stops the study at a safe point instead of ending the process.
  posenc::study::InstallStopHandlers();
  if (out.empty()) out = quick ? "study-runs-quick" : "study-runs";
  if (docs.empty()) docs = quick ? out + "/docs" : "docs";
  try {
    using posenc::study::Settings;
    Settings settings = quick ? Settings::Quick() : Settings::Full();
    settings.stop_after_steps = stop_after_steps;
    if (checkpoint_seconds >= 0.0) settings.checkpoint_seconds = checkpoint_seconds;
    const int stopped =
        posenc::study::RunStudy(settings, {out, docs}, threads, ResumeCommand(argc, argv));
    if (stopped != 0) {  // every rank stopped together and is here: MPI ends normally
      posenc::study::parallel::Finalize();
      return posenc::study::StopExitCode(stopped);
    }
  } catch (const c10::Error& e) {  // libtorch's own errors: the message without its backtrace
    std::fprintf(stderr, "posenc_study: %s\n", e.what_without_backtrace());
    return Fail(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "posenc_study: %s\n", e.what());
    return Fail(1);
  }
  posenc::study::parallel::Finalize();
  return 0;
}
