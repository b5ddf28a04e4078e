// The posenc subcommands; each registers itself on the top-level CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace posenc::cli {

void AddDemoCommand(CLI::App& app);
void AddTableCommand(CLI::App& app);
void AddAlibiCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
void AddRopeCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddServeCommand(CLI::App& app);

}  // namespace posenc::cli
