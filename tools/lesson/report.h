// The demo's three outputs from one list of sections: the text report (stdout), one JSON object
// (--json), and report.html beside the figures.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lesson/section.h"

namespace posenc::lesson {

// Every experiment of the lesson, in its order (a, b, ...): what `posenc demo` reports and the
// explorer's Quick checks panel reveals.
std::vector<Section> LessonSections();

std::string TextReport(const std::vector<Section>& sections);
nlohmann::json JsonReport(const std::vector<Section>& sections);
void WriteHtmlReport(const std::vector<Section>& sections, const std::filesystem::path& path);

// The number of checks that hold and in all.
std::pair<int, int> CountChecks(const std::vector<Section>& sections);

}  // namespace posenc::lesson
