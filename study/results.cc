#include "results.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace posenc::study {

namespace fs = std::filesystem;

fs::path ResultPath(const fs::path& results_dir, const std::string& key, uint64_t seed) {
  return results_dir / (key + "-s" + std::to_string(seed) + ".json");
}

void SaveResult(const fs::path& results_dir, const ArmResult& result) {
  nlohmann::json j;
  j["arm"] = result.key;
  j["seed"] = result.seed;
  j["seconds"] = result.seconds;
  for (const auto& [protocol, by_length] : result.nats) {
    for (const auto& [length, nats] : by_length)
      j["nats_per_char"][protocol][std::to_string(length)] = nats;
  }
  fs::create_directories(results_dir);
  const fs::path path = ResultPath(results_dir, result.key, result.seed);
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp) << j.dump(2) << "\n";
  fs::rename(tmp, path);
}

std::optional<ArmResult> LoadResult(const fs::path& results_dir, const std::string& key,
                                    uint64_t seed) {
  std::ifstream in(ResultPath(results_dir, key, seed));
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("nats_per_char")) return std::nullopt;
  try {
    ArmResult r{.key = key, .seed = seed, .seconds = j.value("seconds", 0.0)};
    for (const auto& [protocol, by_length] : j["nats_per_char"].items()) {
      for (const auto& [length, nats] : by_length.items()) {
        if (!nats.is_number()) return std::nullopt;
        r.nats[protocol][std::stoll(length)] = nats.get<double>();
      }
    }
    return r;
  } catch (const std::exception&) {  // a hand-edited file: measure again rather than crash
    return std::nullopt;
  }
}

}  // namespace posenc::study
