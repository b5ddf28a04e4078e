// posenc: the position signals of transformers, on the command line.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "commands.h"
#include "posenc/error.h"
#include "printable.h"

namespace {

// Everything printed must reach its destination: `--json > /full/disk` or a file-size limit must
// not exit 0 with a cut file. Returns false (after saying why on stderr) when a write failed.
bool FlushStandardOutput() {
  // errno is read straight after the first flush that fails; a failure earlier in the run left
  // only the stream's error flag, and then the reason is no longer known.
  errno = 0;
  std::cout.flush();
  int error = errno;
  if (std::fflush(stdout) != 0 && error == 0) error = errno;
  if (!std::ferror(stdout) && !std::cout.fail()) return true;
  std::fprintf(stderr, "posenc: cannot write the output to standard output (%s)\n",
               error ? std::strerror(error) : "write error");
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which is reported, instead
  // of the process being killed half-way through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"posenc: positional encodings for transformers (learned, sinusoidal, RoPE, ALiBi)"};
  app.require_subcommand(1);
  posenc::cli::AddDemoCommand(app);
  posenc::cli::AddTableCommand(app);
  posenc::cli::AddAlibiCommand(app);
  posenc::cli::AddInspectCommand(app);
  posenc::cli::AddRopeCommand(app);
  posenc::cli::AddBenchCommand(app);
  posenc::cli::AddServeCommand(app);
  int status = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    status = app.exit(e);
  } catch (const std::exception& e) {
    // Messages quote configs and paths: printed so that no escape sequence reaches the terminal.
    std::cerr << "posenc: " << posenc::cli::Printable(e.what()) << "\n";
    status = 1;
  }
  if (!FlushStandardOutput() && status == 0) status = 1;
  return status;
}
