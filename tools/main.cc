// posenc: the position signals of transformers, on the command line.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

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

// The number of single-character edits (insert, delete, replace) that turn a into b.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t replace = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, replace});
    }
  }
  return row[b.size()];
}

// CLI11 answers a mistyped subcommand with "A subcommand is required", which names neither what
// was typed nor what was meant. Throws naming both when a word stands where a subcommand must
// (posenc <command>, posenc table <scheme>) and is none.
void CheckSubcommands(const CLI::App& app, std::span<char* const> words) {
  const std::vector<const CLI::App*> commands = app.get_subcommands({});
  if (commands.empty() || words.empty() || words[0][0] == '-') return;
  const std::string typed = words[0];
  std::string names, nearest;
  size_t best = SIZE_MAX;
  for (const CLI::App* command : commands) {
    if (command->check_name(typed)) return CheckSubcommands(*command, words.subspan(1));
    names += (names.empty() ? "" : ", ") + command->get_name();
    const size_t distance = EditDistance(typed, command->get_name());
    if (distance < best) best = distance, nearest = command->get_name();
  }
  const std::string hint = best <= 2 ? " (did you mean '" + nearest + "'?)" : "";
  const std::string function = app.get_parent() ? "posenc " + app.get_name() : "posenc";
  throw posenc::Error("[" + function + "] subcommand must be one of " + names + hint + ", got '" +
                      typed + "'");
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which is reported, instead
  // of the process being killed half-way through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "posenc: the position signals of transformers (RoPE and its stretchings, M-RoPE, ALiBi, T5 "
      "buckets, sinusoidal and learned tables) on the command line",
      "posenc"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "posenc " POSENC_VERSION);
  posenc::cli::AddDemoCommand(app);
  posenc::cli::AddTableCommand(app);
  posenc::cli::AddAlibiCommand(app);
  posenc::cli::AddInspectCommand(app);
  posenc::cli::AddRopeCommand(app);
  posenc::cli::AddBenchCommand(app);
  posenc::cli::AddServeCommand(app);
  if (argc == 1) {  // `posenc` alone: what it can do, rather than "A subcommand is required"
    std::cout << app.help();
    FlushStandardOutput();
    return 1;
  }
  int status = 0;
  try {
    CheckSubcommands(app, std::span<char* const>(argv + 1, argc - 1));
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // The parser's messages quote the arguments (a file name, an option's value): printed as
    // text too, so that an argument holding an escape sequence cannot reach the terminal as one.
    std::ostringstream out, err;
    status = app.exit(e, out, err);
    std::cout << out.str();
    std::cerr << posenc::cli::PrintableLines(err.str());
  } catch (const std::exception& e) {
    // Messages quote configs and paths: printed so that no escape sequence reaches the terminal.
    std::cerr << "posenc: " << posenc::cli::Printable(e.what()) << "\n";
    status = 1;
  }
  if (!FlushStandardOutput() && status == 0) status = 1;
  return status;
}
