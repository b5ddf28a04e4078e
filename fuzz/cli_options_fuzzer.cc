// libFuzzer target for the command line's option parsing: the input is split at NUL bytes into
// an argument vector and parsed by the real subcommands (table, alibi, inspect, rope), stopped
// before their actions run, so what is fuzzed is every option's reading and checking: decimal
// integers, finite numbers, lists, choices and limits. The only allowed outcome besides success
// is a CLI11 parse error (what the tool prints as a usage error); anything else is a bug.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> arguments = {"posenc"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      arguments.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  arguments.push_back(current);
  if (arguments.size() > 64) return 0;

  CLI::App app{"posenc"};
  app.require_subcommand(1);
  posenc::cli::AddTableCommand(app);
  posenc::cli::AddAlibiCommand(app);
  posenc::cli::AddInspectCommand(app);
  posenc::cli::AddRopeCommand(app);
  // Parse only: once every option is read, checked and converted, the app's parse-complete
  // callback stops the run before any command's action (they read and write files).
  struct Parsed {};
  app.parse_complete_callback([] { throw Parsed{}; });
  std::vector<const char*> argv;
  for (const std::string& a : arguments) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const Parsed&) {
    // Every option was accepted.
  } catch (const CLI::ParseError&) {
    // The documented outcome for a bad command line (including --help).
  }
  return 0;
}
