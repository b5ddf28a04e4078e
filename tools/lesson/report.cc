#include "lesson/report.h"

#include <cstdarg>
#include <cstdio>
#include <sstream>

#include "posenc/files.h"

namespace posenc::lesson {

std::vector<float> RandomNormal(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = static_cast<float>(normal(engine));
  return values;
}

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

template <typename T>
static std::string FormatAny(std::span<const T> values, int digits) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    // +0.0 turns -0 into 0 so that a rotated 0 does not print as "-0".
    s += (i ? ", " : "") + Format("%.*g", digits, static_cast<double>(values[i]) + 0.0);
  }
  return s + "]";
}
std::string FormatVector(std::span<const double> values, int digits) {
  return FormatAny(values, digits);
}
std::string FormatVector(std::span<const float> values, int digits) {
  return FormatAny(values, digits);
}

std::vector<Section> LessonSections() {
  return {OrderBlindness(),  SeatNumbers(),       LearnedTableLimit(), SinusoidalTable(),
          SinusoidalWaves(), ShiftAsRotation(),   RotaryEmbedding(),   AlibiBiases(),
          Stretching(),      MethodsSideBySide(), MultimodalRope()};
}

std::pair<int, int> CountChecks(const std::vector<Section>& sections) {
  int holding = 0, total = 0;
  for (const Section& section : sections) {
    for (const Check& check : section.checks) {
      holding += check.holds;
      ++total;
    }
  }
  return {holding, total};
}

std::string TextReport(const std::vector<Section>& sections) {
  std::ostringstream out;
  out << "posenc demo: the lesson on positional encodings, reproduced\n"
      << "==========================================================\n";
  for (const Section& section : sections) {
    out << "\n(" << section.id << ") " << section.title << "\n";
    for (const std::string& line : section.lines) out << "    " << line << "\n";
    for (const Check& check : section.checks) {
      out << "  " << (check.holds ? "[ok]   " : "[FAIL] ") << check.claim << "\n";
    }
    for (const Figure& figure : section.figures) {
      out << "  figure: " << figure.file_stem << ".png  (" << figure.caption << ")\n";
    }
  }
  const auto [holding, total] = CountChecks(sections);
  out << "\n" << holding << " of " << total << " claims of the lesson reproduced.\n";
  return out.str();
}

nlohmann::json JsonReport(const std::vector<Section>& sections) {
  nlohmann::json report = nlohmann::json::object();
  for (const Section& section : sections) {
    nlohmann::json entry = {{"title", section.title}, {"numbers", section.numbers}};
    entry["checks"] = nlohmann::json::array();
    for (const Check& check : section.checks) {
      entry["checks"].push_back({{"claim", check.claim}, {"holds", check.holds}});
    }
    entry["figures"] = nlohmann::json::array();
    for (const Figure& figure : section.figures) {
      entry["figures"].push_back({{"png", figure.file_stem + ".png"},
                                  {"svg", figure.file_stem + ".svg"},
                                  {"caption", figure.caption}});
    }
    report[section.id] = entry;
  }
  const auto [holding, total] = CountChecks(sections);
  report["claims_reproduced"] = holding;
  report["claims_total"] = total;
  return report;
}

static std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void WriteHtmlReport(const std::vector<Section>& sections, const std::filesystem::path& path) {
  std::ostringstream html;
  const auto [holding, total] = CountChecks(sections);
  html << R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>posenc demo: positional encodings, reproduced</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.summary { color: #555; margin-top: 0; }
nav a { margin-right: 0.8em; }
section { border-top: 1px solid #ddd; padding-top: 0.6em; margin-top: 1.6em; }
h2 { font-size: 1.2em; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.9em; border-radius: 4px; }
ul.checks { list-style: none; padding-left: 0; }
ul.checks li::before { content: "\2714\00a0"; color: #2ca02c; font-weight: bold; }
ul.checks li.fail::before { content: "\2718\00a0"; color: #d62728; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
</style></head><body>
<h1>Positional encodings, reproduced by posenc</h1>
)";
  html << "<p class=\"summary\">" << holding << " of " << total
       << " claims of the lesson reproduced. Every number below was computed by posenc; the "
          "text report is <code>posenc demo</code>'s output, the JSON is "
          "<code>posenc demo --json</code>.</p>\n<nav>";
  for (const Section& section : sections) {
    html << "<a href=\"#" << section.id << "\">(" << section.id << ") " << Escape(section.title)
         << "</a> ";
  }
  html << "</nav>\n";
  for (const Section& section : sections) {
    html << "<section id=\"" << section.id << "\"><h2>(" << section.id << ") "
         << Escape(section.title) << "</h2>\n<pre>";
    for (const std::string& line : section.lines) html << Escape(line) << "\n";
    html << "</pre>\n<ul class=\"checks\">\n";
    for (const Check& check : section.checks) {
      html << "<li" << (check.holds ? "" : " class=\"fail\"") << ">" << Escape(check.claim)
           << "</li>\n";
    }
    html << "</ul>\n";
    for (const Figure& figure : section.figures) {
      html << "<figure><img src=\"" << figure.file_stem << ".svg\" alt=\"" << Escape(figure.caption)
           << "\"><figcaption>" << Escape(figure.caption) << " (<a href=\"" << figure.file_stem
           << ".png\">PNG</a>)</figcaption></figure>\n";
    }
    html << "</section>\n";
  }
  html << "</body></html>\n";
  WriteFileAtomically("demo", path.string(), html.str());
}

}  // namespace posenc::lesson
