// posenc: the position signals of transformers, on the command line.
#include <iostream>

#include "commands.h"
#include "posenc/error.h"

int main(int argc, char** argv) {
  CLI::App app{"posenc: positional encodings for transformers (learned, sinusoidal, RoPE, ALiBi)"};
  app.require_subcommand(1);
  posenc::cli::AddDemoCommand(app);
  posenc::cli::AddTableCommand(app);
  posenc::cli::AddAlibiCommand(app);
  posenc::cli::AddInspectCommand(app);
  posenc::cli::AddRopeCommand(app);
  posenc::cli::AddBenchCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "posenc: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
