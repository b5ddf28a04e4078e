// YaRN by release (YarnRules): posenc against each transformers release's own
// _compute_yarn_parameters, run outside the repository on the YaRN configs of tests/configs/
// (tests/golden/yarn_releases/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/rope_scaling.h"

namespace posenc {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kGolden = fs::path(POSENC_GOLDEN_DIR) / "yarn_releases";
const fs::path kConfigs = fs::path(POSENC_GOLDEN_DIR) / ".." / "configs";

Json Read(const fs::path& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

const RopeLayerScheme& Layer(const ModelPositions& model) {
  return std::get<RopeScheme>(model.scheme).layers.front();
}

YarnRules RulesOfRelease(const std::string& version) {
  if (version == "4.50.3") return YarnRules::kTransformers4_50;
  if (version == "4.51.0") return YarnRules::kTransformers4_51;
  EXPECT_EQ(version, "5.23.0");
  return YarnRules::kTransformers5;
}

double Float32Ulp(double value) { return std::ldexp(1.0, std::ilogb(value) - 23); }

void ExpectGolden(const RopeFrequencies& got, const Json& golden) {
  const auto expected = golden["inv_freq_f32"].get<std::vector<double>>();
  ASSERT_EQ(got.inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_LE(std::abs(got.inv_freq[i] - expected[i]), Float32Ulp(expected[i])) << "pair " << i;
  }
  EXPECT_NEAR(got.attention_factor, golden["attention_factor"].get<double>(), 1e-15);
}

Json Golden(const std::string& config, const std::string& version) {
  return Read(kGolden / (config + "__transformers-" + version + ".json"));
}

ModelPositions Model(const std::string& config) {
  return LoadModelPositions(kConfigs / (config + ".json"));
}

TEST(YarnReleases, EveryReleaseRuleMatchesThatRelease) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    if (entry.path().extension() != ".json") continue;
    const Json golden = Read(entry.path());
    SCOPED_TRACE(entry.path().filename().string());
    const ModelPositions model = LoadModelPositions(kConfigs / golden["config_file"]);
    const YarnRules rules = RulesOfRelease(golden["transformers_version"]);
    ExpectGolden(ComputeRopeFrequencies(Layer(model), {.yarn_rules = rules}), golden);
    ++files;
  }
  EXPECT_EQ(files, 12);  // four configs under three releases
}

TEST(YarnReleases, TheDefaultIsTheReleaseThatWroteTheConfig) {
  // Written by 4.43.1 (before 4.51): the 4.45-4.50 rule, said in the notes.
  const ModelPositions qwen25 = Model("qwen2.5-7b-instruct-yarn-128k");
  EXPECT_EQ(std::get<YarnScaling>(Layer(qwen25).scaling).rules, YarnRules::kTransformers4_50);
  ExpectGolden(ComputeRopeFrequencies(Layer(qwen25)),
               Golden("qwen2.5-7b-instruct-yarn-128k", "4.50.3"));
  const auto& notes = std::get<RopeScheme>(qwen25.scheme).notes;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("transformers_version 4.43.1") != std::string::npos;
  }));
  // Written by 4.51.0: the current rule, not 4.51.0's factor override (a regression).
  ExpectGolden(ComputeRopeFrequencies(Layer(Model("qwen3-8b-yarn"))),
               Golden("qwen3-8b-yarn", "5.23.0"));
  // No transformers_version: the current rule.
  for (const char* config : {"qwen2.5-7b-instruct-yarn", "deepseek-v3"}) {
    ExpectGolden(ComputeRopeFrequencies(Layer(Model(config))), Golden(config, "5.23.0"));
  }
}

TEST(YarnReleases, RemoteCodeConfigsKeepTheCurrentRule) {
  // DeepSeek V3's files say transformers_version 4.33.1 but run their own code (auto_map), which
  // spans L0 and reads mscale as transformers 5 does.
  Json config = Read(kConfigs / "deepseek-v3.json");
  config["transformers_version"] = "4.33.1";
  config["auto_map"] = {{"AutoConfig", "configuration_deepseek.DeepseekV3Config"}};
  const ModelPositions model = DescribeModel(config.dump());
  ExpectGolden(ComputeRopeFrequencies(Layer(model)), Golden("deepseek-v3", "5.23.0"));
  config.erase("auto_map");
  ExpectGolden(ComputeRopeFrequencies(Layer(DescribeModel(config.dump()))),
               Golden("deepseek-v3", "4.50.3"));
}

TEST(YarnReleases, TheWorkedCaseOfDocsModels) {
  // Qwen2.5-7B-Instruct's snippet with M = 131072: 23 of 64 pairs (24-46) differ, by up to 2.235x.
  const ModelPositions model = Model("qwen2.5-7b-instruct-yarn-128k");
  const auto old_rule =
      ComputeRopeFrequencies(Layer(model), {.yarn_rules = YarnRules::kTransformers4_50}).inv_freq;
  const auto current =
      ComputeRopeFrequencies(Layer(model), {.yarn_rules = YarnRules::kTransformers5}).inv_freq;
  int differ = 0;
  double largest = 1;
  for (size_t i = 0; i < current.size(); ++i) {
    if (old_rule[i] == current[i]) continue;
    ++differ;
    EXPECT_GE(i, 24u);
    EXPECT_LE(i, 46u);
    largest = std::max(largest, old_rule[i] / current[i]);
  }
  EXPECT_EQ(differ, 23);
  EXPECT_NEAR(largest, 2.2353, 5e-5);
}

TEST(YarnReleases, NamesRoundTripAndBadInputIsRefused) {
  for (YarnRules rules :
       {YarnRules::kTransformers5, YarnRules::kTransformers4_50, YarnRules::kTransformers4_51}) {
    EXPECT_EQ(ParseYarnRules(YarnRulesName(rules)), rules);
  }
  try {
    ParseYarnRules("transformers4_49", "cli", "--yarn-rules");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[cli] --yarn-rules must be transformers5, transformers4_50 or transformers4_51, "
              "got \"transformers4_49\"");
  }
  // The earlier rules read M; a YarnScaling without it is refused under them.
  const YarnScaling no_m{.factor = 4.0, .original_max_positions = 32768};
  EXPECT_THROW(ComputeRopeFrequencies(1e6, 128, no_m, {.yarn_rules = YarnRules::kTransformers4_50}),
               Error);
  // 4.51's factor M / L0 below 1.
  YarnScaling short_m{.factor = 4.0,
                      .original_max_positions = 32768,
                      .max_positions = 4096,
                      .parameters_original_max_positions = 32768};
  EXPECT_THROW(
      ComputeRopeFrequencies(1e6, 128, short_m, {.yarn_rules = YarnRules::kTransformers4_51}),
      Error);
  short_m.rules = static_cast<YarnRules>(7);
  EXPECT_THROW(ComputeRopeFrequencies(1e6, 128, short_m), Error);
}

}  // namespace
}  // namespace posenc
