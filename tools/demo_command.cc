// posenc demo: every claim of the lesson, reproduced with numbers and figures.
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "commands.h"
#include "lesson/report.h"

namespace posenc::cli {

void AddDemoCommand(CLI::App& app) {
  struct Options {
    std::string out = "posenc-demo";
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* demo = app.add_subcommand(
      "demo", "Reproduce the lesson on positional encodings: a report, figures and report.html");
  demo->add_option("--out", options->out, "Folder for figures and report.html")
      ->capture_default_str();
  demo->add_flag("--json", options->json, "Print the numbers as one JSON object instead of text");
  demo->callback([options] {
    using lesson::CountChecks, lesson::Figure, lesson::JsonReport, lesson::LessonSections,
        lesson::Section, lesson::TextReport, lesson::WriteHtmlReport;
    const std::vector<Section> sections = LessonSections();
    const std::filesystem::path dir = options->out;
    std::filesystem::create_directories(dir);
    for (const Section& section : sections) {
      for (const Figure& figure : section.figures) Render(figure, dir);
    }
    WriteHtmlReport(sections, dir / "report.html");
    if (options->json) {
      std::cout << JsonReport(sections).dump(2) << "\n";
    } else {
      std::cout << TextReport(sections) << "\nFigures and report.html are in "
                << std::filesystem::absolute(dir).string() << "/\n";
    }
    const auto [holding, total] = CountChecks(sections);
    if (holding != total) throw std::runtime_error("[demo] some claims were not reproduced");
  });
}

}  // namespace posenc::cli
