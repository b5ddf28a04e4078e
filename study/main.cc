// posenc_study: train short, test long. Trains tiny character-level models on the King James
// Bible with each position method that posenc provides and measures how their held-out loss
// changes as the evaluation window grows from 1x to 16x the training length.
//
//   posenc_study [--quick] [--out DIR] [--docs DIR] [--threads N]
//   mpirun -n N posenc_study ...   (built with MPI: the runs spread over N processes)
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <thread>

#include "parallel.h"
#include "study.h"
#include "train.h"

namespace {

// Under MPI a failing rank ends the whole job (the others may be waiting for its runs); alone,
// it returns its exit code as before.
int Fail(int code) {
  if (posenc::study::parallel::Size() > 1) posenc::study::parallel::Abort(code);
  posenc::study::parallel::Finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
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
                 "stop after this many training steps, as an interruption would (for tests)")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank stops here: none is left waiting.
    posenc::study::parallel::Finalize();
    return app.exit(e);
  }
  if (out.empty()) out = quick ? "study-runs-quick" : "study-runs";
  if (docs.empty()) docs = quick ? out + "/docs" : "docs";
  try {
    using posenc::study::Settings;
    Settings settings = quick ? Settings::Quick() : Settings::Full();
    settings.stop_after_steps = stop_after_steps;
    posenc::study::RunStudy(settings, {out, docs}, threads);
  } catch (const posenc::study::StudyStopped& e) {
    std::printf("posenc_study: %s\n", e.what());
    std::fflush(stdout);
    return Fail(3);
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
