// posenc table sinusoidal: write a sinusoidal position table as CSV or .npy.
#include <fstream>

#include "commands.h"
#include "posenc/error.h"
#include "posenc/npy.h"
#include "posenc/sinusoidal.h"

namespace posenc::cli {

void AddTableCommand(CLI::App& app) {
  struct Options {
    int64_t positions = 0;
    int64_t dim = 0;
    double base = 10000.0;
    std::string format = "csv";
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* table = app.add_subcommand("table", "Write a position table to a file");
  table->require_subcommand(1);
  CLI::App* sinusoidal = table->add_subcommand(
      "sinusoidal", "PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(...), p = 0..T-1");
  sinusoidal->add_option("--positions", options->positions, "Number of positions T")->required();
  sinusoidal->add_option("--dim", options->dim, "Width d of each position vector")->required();
  sinusoidal->add_option("--base", options->base, "Frequency base")->capture_default_str();
  sinusoidal->add_option("--format", options->format, "csv or npy")
      ->check(CLI::IsMember({"csv", "npy"}))
      ->capture_default_str();
  sinusoidal->add_option("--output", options->output, "Output file")->required();
  sinusoidal->callback([options] {
    const Sinusoidal spec{.dim = options->dim, .base = options->base};
    spec.Validate();
    Require(options->positions > 0, "table", "--positions", "be > 0", options->positions);
    std::vector<float> values(options->positions * options->dim);
    FillSinusoidalTable(spec, options->positions, values);
    if (options->format == "npy") {
      const std::vector<int64_t> shape = {options->positions, options->dim};
      WriteNpy(options->output, values, shape);
      return;
    }
    std::ofstream out(options->output);
    Require(out.good(), "table", "--output", "be a writable file", options->output);
    char cell[32];
    for (int64_t p = 0; p < options->positions; ++p) {
      for (int64_t j = 0; j < options->dim; ++j) {
        std::snprintf(cell, sizeof cell, "%.9g", values[p * options->dim + j]);
        out << (j ? "," : "") << cell;
      }
      out << "\n";
    }
  });
}

}  // namespace posenc::cli
