// posenc alibi: print the ALiBi slopes for a head count.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "numbers.h"
#include "output_limit.h"
#include "posenc/alibi.h"

namespace posenc::cli {

void AddAlibiCommand(CLI::App& app) {
  struct Options {
    int64_t heads = 0;
    double max_bias = 8.0;
    bool json = false;
    OutputLimit limit;
  };
  auto options = std::make_shared<Options>();
  CLI::App* alibi = app.add_subcommand("alibi", "Print the ALiBi slope of every head");
  alibi->add_option("--heads", options->heads, "Number of attention heads")
      ->required()
      ->transform(DecimalInteger(1));
  alibi
      ->add_option("--max-bias", options->max_bias,
                   "8 gives the paper's slopes (MPT: alibi_bias_max)")
      ->transform(FiniteNumber())
      ->capture_default_str();
  options->limit.AddTo(alibi);
  alibi->add_flag("--json", options->json, "Print {\"heads\", \"max_bias\", \"slopes\"} as JSON");
  alibi->callback([options] {
    // A printed slope takes at most 48 bytes ("1048575  0.00...  (2^-8)").
    options->limit.Check("alibi", "--heads", static_cast<double>(options->heads), 48);
    const auto slopes =
        AlibiSlopes(Alibi{.num_heads = options->heads, .max_bias = options->max_bias});
    if (options->json) {
      std::cout << nlohmann::json{{"heads", options->heads},
                                  {"max_bias", options->max_bias},
                                  {"slopes", slopes}}
                       .dump(2)
                << "\n";
      return;
    }
    std::cout << "head  slope\n";
    char line[64];
    for (size_t h = 0; h < slopes.size(); ++h) {
      std::snprintf(line, sizeof line, "%4zu  %.17g  (2^%.4g)\n", h, slopes[h],
                    std::log2(slopes[h]));
      std::cout << line;
    }
  });
}

}  // namespace posenc::cli
