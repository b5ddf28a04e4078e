// posenc table sinusoidal: write a sinusoidal position table as CSV or .npy.
#include <string>

#include "commands.h"
#include "numbers.h"
#include "output_limit.h"
#include "posenc/error.h"
#include "posenc/files.h"
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
    OutputLimit limit;
  };
  auto options = std::make_shared<Options>();
  CLI::App* table = app.add_subcommand("table", "Write a position table to a file");
  table->require_subcommand(1);
  CLI::App* sinusoidal = table->add_subcommand(
      "sinusoidal", "PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(...), p = 0..T-1");
  sinusoidal->add_option("--positions", options->positions, "Number of positions T")
      ->required()
      ->transform(DecimalInteger(1));
  sinusoidal->add_option("--dim", options->dim, "Width d of each position vector")
      ->required()
      ->transform(DecimalInteger(1));
  sinusoidal->add_option("--base", options->base, "Frequency base")
      ->transform(FiniteNumber())
      ->capture_default_str();
  sinusoidal->add_option("--format", options->format, "csv or npy")
      ->check(CLI::IsMember({"csv", "npy"}))
      ->capture_default_str();
  sinusoidal->add_option("--output", options->output, "Output file")->required();
  options->limit.AddTo(sinusoidal);
  sinusoidal->callback([options] {
    const Sinusoidal spec{.dim = options->dim, .base = options->base};
    spec.Validate();
    Require(options->positions > 0, "table", "--positions", "be > 0", options->positions);
    // A CSV cell is at most 16 bytes ("-1.23456789e-05,").
    options->limit.Check("table", "--positions x --dim",
                         static_cast<double>(options->positions) * options->dim,
                         options->format == "npy" ? 4 : 16);
    std::vector<float> values(options->positions * options->dim);
    FillSinusoidalTable(spec, options->positions, values);
    if (options->format == "npy") {
      const std::vector<int64_t> shape = {options->positions, options->dim};
      WriteNpy(options->output, values, shape);
      return;
    }
    std::string csv;
    char cell[32];
    for (int64_t p = 0; p < options->positions; ++p) {
      for (int64_t j = 0; j < options->dim; ++j) {
        std::snprintf(cell, sizeof cell, "%s%.9g", j ? "," : "", values[p * options->dim + j]);
        csv += cell;
      }
      csv += '\n';
    }
    WriteFileAtomically("table", options->output, csv);
  });
}

}  // namespace posenc::cli
