// Per-arm, per-seed results, saved as results/<arm>-s<seed>.json as soon as they are measured
// (so an interrupted study keeps them), and read back for the report.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace posenc::study {

struct ArmResult {
  std::string key;
  uint64_t seed = 0;
  // protocol name -> evaluation length -> nats per character
  std::map<std::string, std::map<int64_t, double>> nats;
  double seconds = 0.0;  // time the evaluation took
};

std::filesystem::path ResultPath(const std::filesystem::path& results_dir, const std::string& key,
                                 uint64_t seed);
void SaveResult(const std::filesystem::path& results_dir, const ArmResult& result);
// Empty when the file is missing or malformed (it is then measured again).
std::optional<ArmResult> LoadResult(const std::filesystem::path& results_dir,
                                    const std::string& key, uint64_t seed);

}  // namespace posenc::study
