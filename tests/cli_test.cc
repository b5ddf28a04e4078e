// The posenc command line, run as a user runs it; expected values are the lesson's numbers.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "posenc/npy.h"

namespace {

struct CliRun {
  int status;
  std::string output;  // stdout and stderr
};

CliRun Cli(const std::string& arguments) {
  const std::string command = std::string(POSENC_CLI) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::filesystem::path ScratchDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("posenc-cli-test-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CliDemo, JsonReproducesEveryClaimAndWritesFigures) {
  const auto dir = ScratchDir("demo");
  const CliRun run = Cli("demo --json --out " + dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  const auto report = nlohmann::json::parse(run.output);
  EXPECT_EQ(report["claims_total"], 31);
  EXPECT_EQ(report["claims_reproduced"], 31);
  EXPECT_NEAR(report["b"]["numbers"]["dog_at_1"][0].get<double>(), 0.4, 1e-6);
  EXPECT_NEAR(report["b"]["numbers"]["dog_at_4"][0].get<double>(), -0.2, 1e-6);
  EXPECT_NEAR(report["d"]["numbers"]["d4"][1][0].get<double>(), 0.8414709848, 1e-6);
  EXPECT_NEAR(report["e"]["numbers"]["wavelength"]["12"].get<double>(), 2000 * M_PI, 1e-6);
  const auto slopes = report["h"]["numbers"]["slopes"].get<std::vector<double>>();
  ASSERT_EQ(slopes.size(), 8u);
  EXPECT_EQ(slopes[7], 1.0 / 256);

  int figures = 0;
  for (const auto& [id, section] : report.items()) {
    if (!section.is_object()) continue;
    for (const auto& figure : section["figures"]) {
      ++figures;
      const std::string png = ReadFile(dir / figure["png"].get<std::string>());
      ASSERT_GT(png.size(), 1000u) << figure["png"];
      EXPECT_EQ(png.substr(1, 3), "PNG");
      EXPECT_NE(ReadFile(dir / figure["svg"].get<std::string>()).find("<svg"), std::string::npos);
    }
  }
  EXPECT_EQ(figures, 7);
  // (k): an image's tokens at (3, 3 + row, 3 + column); the token after it sits at 6.
  const auto& mrope = report["k"]["numbers"];
  EXPECT_EQ(mrope["positions"][8],
            nlohmann::json::parse(R"({"token": "image r1 c2", "t": 3, "h": 4, "w": 5})"));
  EXPECT_EQ(mrope["positions"][9]["t"], 6);
  EXPECT_EQ(report["k"]["figures"][0]["png"], "mrope_positions_per_pair.png");
  const std::string html = ReadFile(dir / "report.html");
  EXPECT_NE(html.find("31 of 31 claims"), std::string::npos);
  EXPECT_NE(html.find("rope_stretching.svg"), std::string::npos);
  EXPECT_NE(html.find("mrope_positions_per_pair.svg"), std::string::npos);
}

TEST(CliDemo, TextReportStatesTheClaims) {
  const auto dir = ScratchDir("demo-text");
  const CliRun run = Cli("demo --out " + dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("dog at position 1: [0.4, 0.5]"), std::string::npos);
  EXPECT_NE(run.output.find("31 of 31 claims of the lesson reproduced."), std::string::npos);
  EXPECT_EQ(run.output.find("[FAIL]"), std::string::npos);
}

TEST(CliTable, SinusoidalCsv) {
  const auto file = ScratchDir("table-csv") / "pe.csv";
  const CliRun run =
      Cli("table sinusoidal --positions 3 --dim 4 --format csv --output " + file.string());
  ASSERT_EQ(run.status, 0) << run.output;
  std::istringstream rows(ReadFile(file));
  std::string row;
  std::vector<std::vector<double>> table;
  while (std::getline(rows, row)) {
    std::istringstream cells(row);
    std::string cell;
    table.emplace_back();
    while (std::getline(cells, cell, ',')) table.back().push_back(std::stod(cell));
  }
  ASSERT_EQ(table.size(), 3u);
  const double expected[3][4] = {{0, 1, 0, 1},
                                 {0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004},
                                 {0.9092974268, -0.4161468365, 0.0199986667, 0.9998000067}};
  for (int p = 0; p < 3; ++p) {
    ASSERT_EQ(table[p].size(), 4u);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(table[p][j], expected[p][j], 1e-7);
  }
}

TEST(CliTable, SinusoidalNpy) {
  const auto file = ScratchDir("table-npy") / "pe.npy";
  const CliRun run =
      Cli("table sinusoidal --positions 64 --dim 32 --format npy --output " + file.string());
  ASSERT_EQ(run.status, 0) << run.output;
  const auto array = posenc::ReadNpy(file.string());
  EXPECT_EQ(array.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_NEAR(array.data[20 * 32 + 0], std::sin(20.0), 1e-6);
  EXPECT_NEAR(array.data[20 * 32 + 9], std::cos(20.0 / 10.0), 1e-6);  // pair 4: 10000^(8/32) = 10
}

TEST(CliTable, BadDimIsAClearError) {
  const auto file = ScratchDir("table-bad") / "pe.csv";
  const CliRun run = Cli("table sinusoidal --positions 3 --dim 0 --output " + file.string());
  EXPECT_NE(run.status, 0);
  EXPECT_NE(
      run.output.find("--dim: must be a decimal integer in [1, 9223372036854775807], got '0'"),
      std::string::npos)
      << run.output;
}

// The version posenc prints is the one CMakeLists.txt declares (project(posenc VERSION x.y.z)).
TEST(CliVersion, IsTheProjectVersion) {
  const std::string cmake = ReadFile(std::filesystem::path(POSENC_SOURCE_DIR) / "CMakeLists.txt");
  const size_t at = cmake.find("project(posenc VERSION ");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = at + std::string("project(posenc VERSION ").size();
  const std::string version = cmake.substr(begin, cmake.find(' ', begin) - begin);
  const CliRun run = Cli("--version");
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.output, "posenc " + version + "\n");
}

// A mistyped subcommand is named, with the nearest one; an unrelated word gets the list only.
TEST(CliSubcommand, MistypedNameSuggestsTheNearest) {
  CliRun run = Cli("inspekt tests/configs/llama2-7b.json");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.output,
            "posenc: [posenc] subcommand must be one of demo, table, alibi, inspect, rope, bench, "
            "serve (did you mean 'inspect'?), got 'inspekt'\n");
  run = Cli("");  // no subcommand: the help, which lists them
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("Subcommands:"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("inspect"), std::string::npos) << run.output;
  run = Cli("frobnicate");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.output,
            "posenc: [posenc] subcommand must be one of demo, table, alibi, inspect, rope, bench, "
            "serve, got 'frobnicate'\n");
}

TEST(CliAlibi, SlopesForEightAndTwelveHeads) {
  CliRun run = Cli("alibi --heads 8 --json");
  ASSERT_EQ(run.status, 0) << run.output;
  auto slopes = nlohmann::json::parse(run.output)["slopes"].get<std::vector<double>>();
  ASSERT_EQ(slopes.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(slopes[h], std::ldexp(1.0, -(h + 1)));

  run = Cli("alibi --heads 12 --json");
  ASSERT_EQ(run.status, 0) << run.output;
  slopes = nlohmann::json::parse(run.output)["slopes"].get<std::vector<double>>();
  ASSERT_EQ(slopes.size(), 12u);
  EXPECT_DOUBLE_EQ(slopes[8], std::pow(2.0, -0.5));
  EXPECT_DOUBLE_EQ(slopes[11], std::pow(2.0, -3.5));
}

TEST(CliAlibi, ZeroHeadsIsAClearError) {
  const CliRun run = Cli("alibi --heads 0");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("--heads: must be a decimal integer in [1, 9223372036854775807], got "
                            "'0'"),
            std::string::npos)
      << run.output;
}

TEST(Readme, QuickstartIsTheCompiledExample) {
  const std::string readme = ReadFile(std::string(POSENC_SOURCE_DIR) + "/README.md");
  const std::string example = ReadFile(std::string(POSENC_SOURCE_DIR) + "/examples/quickstart.cc");
  ASSERT_FALSE(example.empty());
  EXPECT_NE(readme.find(example), std::string::npos)
      << "README.md must quote examples/quickstart.cc verbatim (the consumer test compiles it)";
}

// ---------------------------------------------------------------------------------------------
// posenc inspect and posenc rope on the model configs in tests/configs; expected values come from
// the golden files in tests/golden and the reference note's worked numbers.

std::string ConfigFile(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/configs/" + name;
}

nlohmann::json GoldenFile(const std::string& path) {
  return nlohmann::json::parse(ReadFile(std::string(POSENC_SOURCE_DIR) + "/tests/golden/" + path));
}

TEST(CliInspect, Llama31JsonMatchesHuggingFace) {
  const CliRun run =
      Cli("inspect " + ConfigFile("llama3.1-8b.json") + " --positions 0,4095,131071 --json");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto out = nlohmann::json::parse(run.output);
  const auto golden = GoldenFile("hf_rope/llama3_1_8b.json");
  EXPECT_EQ(out["rope_type"], "llama3");
  EXPECT_EQ(out["head_dim"], 128);
  EXPECT_EQ(out["rotary_dim"], 128);
  EXPECT_EQ(out["attention_factor"], 1.0);
  // Reference precision: every Llama 3.1 frequency is bit-equal to Hugging Face's float32.
  EXPECT_EQ(out["inv_freq"].get<std::vector<double>>(),
            golden["inv_freq_hf_f32"].get<std::vector<double>>());
  // Positions 0, 4095, 131071 are golden rows 0, 5 and 8.
  const int rows[] = {0, 5, 8};
  ASSERT_EQ(out["cos"].size(), 3u);
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 64; ++i) {
      EXPECT_NEAR(out["cos"][p][i].get<double>(),
                  golden["cos_f64_from_hf_inv_freq"][rows[p]][i].get<double>(), 1e-12);
      EXPECT_NEAR(out["sin"][p][i].get<double>(),
                  golden["sin_f64_from_hf_inv_freq"][rows[p]][i].get<double>(), 1e-12);
    }
  }
  // Reference §6: pairs 0-28 kept, 29-34 smoothed, 35-63 divided by 8.
  const auto classes = out["pair_class"].get<std::vector<std::string>>();
  ASSERT_EQ(classes.size(), 64u);
  EXPECT_EQ(classes[28], "extrapolated");
  EXPECT_EQ(classes[29], "blended");
  EXPECT_EQ(classes[34], "blended");
  EXPECT_EQ(classes[35], "interpolated");
}

TEST(CliInspect, ExactPrecisionAndYarnAttentionFactor) {
  const CliRun run =
      Cli("inspect " + ConfigFile("qwen2.5-7b-instruct-yarn.json") + " --precision exact --json");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto out = nlohmann::json::parse(run.output);
  const auto golden = GoldenFile("hf_rope/qwen2_5_7b_instruct_yarn4.json");
  EXPECT_NEAR(out["attention_factor"].get<double>(), golden["attention_factor"].get<double>(),
              1e-12);
  const auto f64 = golden["inv_freq_f64"].get<std::vector<double>>();
  const auto ours = out["inv_freq"].get<std::vector<double>>();
  ASSERT_EQ(ours.size(), f64.size());
  for (size_t i = 0; i < f64.size(); ++i) EXPECT_NEAR(ours[i], f64[i], 1e-15 * f64[i]) << i;
}

TEST(CliInspect, YarnRulesByRelease) {
  // Written by transformers 4.43.1: 4.50.3's numbers by default, 5.23.0's with --yarn-rules.
  const std::string config = ConfigFile("qwen2.5-7b-instruct-yarn-128k.json");
  for (const auto& [flag, release, rules] :
       {std::tuple{"", "4.50.3", "transformers4_50"},
        std::tuple{" --yarn-rules transformers5", "5.23.0", "transformers5"},
        std::tuple{" --yarn-rules transformers4_50", "4.50.3", "transformers4_50"}}) {
    const CliRun run = Cli("inspect " + config + flag + " --json");
    ASSERT_EQ(run.status, 0) << run.output;
    const auto out = nlohmann::json::parse(run.output);
    const auto golden = GoldenFile(std::string("yarn_releases/qwen2.5-7b-instruct-yarn-128k__") +
                                   "transformers-" + release + ".json");
    EXPECT_EQ(out["yarn_rules"], rules);
    EXPECT_EQ(out["inv_freq"].get<std::vector<double>>(),
              golden["inv_freq_f32"].get<std::vector<double>>())
        << flag;
  }
  CliRun run = Cli("inspect " + config);
  EXPECT_NE(run.output.find("yarn          rules transformers4_50"), std::string::npos)
      << run.output;
  run = Cli("inspect " + config + " --yarn-rules transformers4_49");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("--yarn-rules"), std::string::npos) << run.output;
  EXPECT_EQ(nlohmann::json::parse(
                Cli("inspect " + ConfigFile("llama3.1-8b.json") + " --json").output)["yarn_rules"],
            nullptr);
}

TEST(CliInspect, DeepSeekSoftmaxMultiplierAndTextReport) {
  CliRun run = Cli("inspect " + ConfigFile("deepseek-v3.json") + " --json");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto golden = GoldenFile("hf_rope/deepseek_v3_yarn.json");
  const auto out = nlohmann::json::parse(run.output);
  EXPECT_NEAR(out["softmax_scale"].get<double>(), golden["softmax_scale_hf"].get<double>(), 1e-12);
  EXPECT_EQ(out["attention_factor"], 1.0);
  run = Cli("inspect " + ConfigFile("deepseek-v3.json"));
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("softmax"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("interpolated"), std::string::npos) << run.output;
}

TEST(CliInspect, OtherSchemes) {
  CliRun run = Cli("inspect " + ConfigFile("bloom.json") + " --json");
  ASSERT_EQ(run.status, 0) << run.output;
  auto out = nlohmann::json::parse(run.output);
  EXPECT_EQ(out["scheme"], "alibi");
  EXPECT_EQ(out["slopes"].size(), 112u);
  run = Cli("inspect " + ConfigFile("gpt2.json") + " --json");
  ASSERT_EQ(run.status, 0) << run.output;
  out = nlohmann::json::parse(run.output);
  EXPECT_EQ(out["scheme"], "learned");
  EXPECT_EQ(out["max_positions"], 1024);
  EXPECT_EQ(out["dim"], 768);
}

TEST(CliInspect, ChartIsDrawnByGnuplot) {
  const auto dir = ScratchDir("inspect-chart");
  const CliRun run = Cli("inspect " + ConfigFile("qwen2.5-7b-instruct-yarn.json") + " --chart " +
                         (dir / "qwen.png").string());
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string png = ReadFile(dir / "qwen.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_NE(Cli("inspect --help").output.find("--chart"), std::string::npos);
}

TEST(CliInspect, MalformedConfigIsAClearError) {
  const auto dir = ScratchDir("inspect-bad");
  std::ofstream(dir / "bad.json") << R"({"model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "rope_scaling": {"type": "linear", "factor": "4"}})";
  CliRun run = Cli("inspect " + (dir / "bad.json").string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[hf_config] rope_scaling.factor must be a number >= 1"),
            std::string::npos)
      << run.output;
  std::ofstream(dir / "empty.json") << "";
  run = Cli("inspect " + (dir / "empty.json").string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[hf_config] config must be valid JSON"), std::string::npos)
      << run.output;
}

// ---------------------------------------------------------------------------------------------
// Per-layer description (posenc/model_positions.h) against tests/golden/model_positions, which
// the Hugging Face reference code produced from the same configs.

std::string RealConfig(const std::string& name) { return ConfigFile("real/" + name + ".json"); }

nlohmann::json InspectJson(const std::string& arguments) {
  const CliRun run = Cli("inspect " + arguments + " --json");
  EXPECT_EQ(run.status, 0) << run.output;
  return run.status == 0 ? nlohmann::json::parse(run.output) : nlohmann::json::object();
}

// Every layer's scheme, type, window, chunk and theta as the reference has them.
void ExpectLayersMatchGolden(const nlohmann::json& out, const nlohmann::json& golden) {
  const auto& layers = out["layers"];
  ASSERT_EQ(layers.size(), golden["num_hidden_layers"].get<size_t>());
  ASSERT_EQ(golden["layers"].size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& ours = layers[i];
    const auto& want = golden["layers"][i];
    SCOPED_TRACE("layer " + std::to_string(i));
    EXPECT_EQ(ours["index"], i);
    EXPECT_EQ(ours["scheme"], want["use_rope"].get<bool>() ? "rope" : "nope");
    EXPECT_EQ(ours["layer_type"], want["layer_type"]);
    EXPECT_EQ(ours["sliding_window"], want["sliding_window"]);
    if (want.contains("attention_chunk_size")) {
      EXPECT_EQ(ours["attention_chunk_size"], want["attention_chunk_size"]);
    } else {
      EXPECT_TRUE(ours["attention_chunk_size"].is_null());
    }
    if (want["rope_theta"].is_null()) {
      EXPECT_TRUE(ours["rope_theta"].is_null());
      EXPECT_TRUE(ours["rope_type"].is_null());
    } else {
      EXPECT_EQ(ours["rope_theta"].get<double>(), want["rope_theta"].get<double>());
    }
    EXPECT_EQ(ours["causal"], !golden.value("bidirectional", false));
    for (const char* key :
         {"index", "scheme", "layer_type", "rope_theta", "rope_type", "sliding_window",
          "attention_chunk_size", "query_scale", "causal", "symmetric_window"}) {
      EXPECT_TRUE(ours.contains(key)) << key;
    }
  }
}

// inv_freq of the chosen layer against the reference's float32 values, within one float32 ulp.
void ExpectInvFreq(const nlohmann::json& out, const nlohmann::json& want) {
  const auto ours = out["inv_freq"].get<std::vector<double>>();
  const auto reference = want.get<std::vector<double>>();
  ASSERT_EQ(ours.size(), reference.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_NEAR(ours[i], reference[i], std::ldexp(std::abs(reference[i]), -23)) << i;
  }
}

TEST(CliInspectLayers, Llama4ScoutNopeEveryFourthLayerWithQueryScale) {
  const auto golden = GoldenFile("model_positions/llama4-scout-17b-16e.json");
  const auto out = InspectJson(RealConfig("llama4-scout-17b-16e"));
  EXPECT_EQ(out["scheme"], "rope");  // some NoPE layers: still a RoPE model
  EXPECT_EQ(out["config_prefix"], "text_config.");
  EXPECT_EQ(out["layout"], "interleaved");  // complex pairs (2i, 2i + 1)
  EXPECT_EQ(out["head_dim"], golden["layout"]["head_dim"]);
  EXPECT_EQ(out["rotary_dim"], golden["layout"]["rotary_dim"]);
  EXPECT_EQ(out["rotary_offset"], 0);
  EXPECT_TRUE(out["mrope_section"].is_null());
  ExpectLayersMatchGolden(out, golden);
  ExpectInvFreq(out, golden["rope"]["chunked_attention"]["inv_freq"]);
  // The NoPE layers scale queries; the reference's scales at its positions follow from the
  // reported rule 1 + beta ln(1 + floor((p + offset) / floor_scale)).
  const auto& q = golden["query_scale"];
  for (const auto& layer : out["layers"]) {
    const bool tuned = golden["layers"][layer["index"].get<size_t>()]["attn_temperature_tuning"];
    ASSERT_EQ(!layer["query_scale"].is_null(), tuned) << layer.dump();
    if (!tuned) continue;
    const auto& scale = layer["query_scale"];
    EXPECT_EQ(scale["rule"], "llama4_attn_temperature");
    EXPECT_EQ(scale["beta"].get<double>(), q["attn_scale"].get<double>());
    EXPECT_EQ(scale["floor_scale"].get<double>(), q["floor_scale"].get<double>());
    EXPECT_EQ(scale["offset"], 1);
    for (size_t k = 0; k < q["temperature_positions"].size(); ++k) {
      const double p = q["temperature_positions"][k];
      const double c =
          1.0 + scale["beta"].get<double>() *
                    std::log1p(std::floor((p + 1) / scale["floor_scale"].get<double>()));
      EXPECT_NEAR(c, q["temperature_scales"][k].get<double>(), 1e-6) << p;  // float32 reference
    }
  }

  const CliRun text = Cli("inspect " + RealConfig("llama4-scout-17b-16e"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("layers 0-2, 4-6, ..., 44-46 (36): RoPE llama3 theta 5e5, chunks of "
                             "8192 [chunked_attention]"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("layers 3, 7, ..., 47 (12): NoPE, query scale 1 + 0.1 ln(1 + "
                             "floor((p + 1) / 8192)) [full_attention]"),
            std::string::npos)
      << text.output;
}

TEST(CliInspectLayers, LayerIndexPicksARopeLayerAndRefusesANopeLayer) {
  const auto golden = GoldenFile("model_positions/llama4-scout-17b-16e.json");
  auto out = InspectJson(RealConfig("llama4-scout-17b-16e") + " --layer 4");
  EXPECT_EQ(out["layer"], 4);
  ExpectInvFreq(out, golden["rope"]["chunked_attention"]["inv_freq"]);
  out = InspectJson(RealConfig("llama4-scout-17b-16e") + " --layer chunked_attention");
  ExpectInvFreq(out, golden["rope"]["chunked_attention"]["inv_freq"]);

  CliRun run = Cli("inspect " + RealConfig("llama4-scout-17b-16e") + " --layer 3");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[cli] --layer must pick a RoPE layer (layer 3 is nope, "
                            "full_attention: it does not rotate q and k), got 3"),
            std::string::npos)
      << run.output;
  run = Cli("inspect " + RealConfig("llama4-scout-17b-16e") + " --layer 48");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("--layer must be a layer index in [0, 48) or a layer type, got 48"),
            std::string::npos)
      << run.output;
  run = Cli("inspect " + RealConfig("llama4-scout-17b-16e") + " --layer full_attention");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("the full_attention layers do not rotate q and k"), std::string::npos)
      << run.output;

  // SmolLM3: layers 3, 7, ... are NoPE too (no_rope_layer_interval 4).
  run = Cli("inspect " + RealConfig("smollm3-3b-base") + " --layer 35");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("layer 35 is nope"), std::string::npos) << run.output;
  const auto smollm3 = GoldenFile("model_positions/smollm3-3b-base.json");
  out = InspectJson(RealConfig("smollm3-3b-base") + " --layer 34");
  ExpectInvFreq(out, smollm3["rope"]["default"]["inv_freq"]);
}

TEST(CliInspectLayers, SmolLM3) {
  const auto golden = GoldenFile("model_positions/smollm3-3b-base.json");
  const auto out = InspectJson(RealConfig("smollm3-3b-base"));
  EXPECT_EQ(out["scheme"], "rope");
  ExpectLayersMatchGolden(out, golden);
  for (const auto& layer : out["layers"]) EXPECT_TRUE(layer["query_scale"].is_null());
  EXPECT_EQ(out["head_dim"], golden["layout"]["head_dim"]);
  EXPECT_EQ(out["rotary_dim"], golden["layout"]["rotary_dim"]);
  EXPECT_EQ(out["layout"], "half-split");
  const CliRun text = Cli("inspect " + RealConfig("smollm3-3b-base"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("layers 3, 7, ..., 35 (9): NoPE"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("layers 0-2, 4-6, ..., 32-34 (27): RoPE theta 5e6"), std::string::npos)
      << text.output;
}

TEST(CliInspectLayers, EmbeddingGemmaWindowsOnFiveOfSixLayers) {
  const auto golden = GoldenFile("model_positions/gemma3_text-embeddinggemma-300m.json");
  const auto out = InspectJson(RealConfig("gemma3_text-embeddinggemma-300m"));
  ExpectLayersMatchGolden(out, golden);
  int sliding = 0;
  for (const auto& layer : out["layers"]) {
    // Bidirectional: the window reaches both ways (the reference's sliding_window becomes
    // 512 / 2 + 1 = 257, keys with |i - j| < 257).
    EXPECT_EQ(layer["symmetric_window"], !layer["sliding_window"].is_null());
    EXPECT_EQ(golden["sliding_window_after_init"].get<int64_t>(), 512 / 2 + 1);
    sliding += !layer["sliding_window"].is_null();
  }
  EXPECT_EQ(sliding, 20);
  auto full = InspectJson(RealConfig("gemma3_text-embeddinggemma-300m") + " --layer 5");
  ExpectInvFreq(full, golden["rope"]["full_attention"]["inv_freq"]);
  auto local = InspectJson(RealConfig("gemma3_text-embeddinggemma-300m") + " --layer 0");
  ExpectInvFreq(local, golden["rope"]["sliding_attention"]["inv_freq"]);
  const CliRun text = Cli("inspect " + RealConfig("gemma3_text-embeddinggemma-300m"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("layers 0-4, 6-10, 12-16, 18-22 (20): RoPE theta 1e4, window 512 "
                             "(both ways: |i - j| <= 256), bidirectional [sliding_attention]"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("layers 5, 11, 17, 23 (4): RoPE theta 1e6, bidirectional "
                             "[full_attention]"),
            std::string::npos)
      << text.output;
}

// Qwen2.5-7B-Instruct-1M's dual_chunk_attention_config (docs/DUAL_CHUNK.md): the published values,
// the chunk length chunk_size - local_size, the inter-chunk query position and the length
// scaling at max_position_embeddings as vLLM's code gives them (tests/golden/dca_vllm/).
TEST(CliInspect, QwenDualChunkAttention) {
  const std::string config = RealConfig("qwen2-qwen2.5-7b-instruct-1m");
  const auto golden = GoldenFile("dca_vllm/positions_qwen_1m.json");
  const auto out = InspectJson(config);
  const auto& d = out["dual_chunk_attention"];
  EXPECT_EQ(d["chunk_size"], 262144);
  EXPECT_EQ(d["local_size"], 8192);
  EXPECT_EQ(d["original_max_position_embeddings"], 262144);
  EXPECT_EQ(d["chunk_length"], 262144 - 8192);
  EXPECT_EQ(d["inter_query_position"], golden["q_inter"][0]);
  EXPECT_EQ(d["largest_scored_distance"], 262144);
  // vLLM's float32 scaling factor at 1010000 tokens.
  ASSERT_EQ(golden["scaling_factor_lengths"].back(), 1010000);
  EXPECT_NEAR(d["length_scaling_at_max_position_embeddings"].get<double>(),
              golden["scaling_factor_float32"].back().get<double>(), 1e-6);
  EXPECT_EQ(out["rope_theta"], 1e7);
  EXPECT_EQ(out["max_position_embeddings"], 1010000);
  const CliRun text = Cli("inspect " + config);
  ASSERT_EQ(text.status, 0) << text.output;
  for (const std::string line :
       {"dual chunk    chunk_size 262144, local_size 8192, original_max_position_embeddings "
        "262144 (dual chunk attention, as vLLM serves it)\n",
        "              chunks of 253952 positions: keys rotate at pos mod 253952; queries at pos "
        "mod 253952 for keys in their chunk, min(pos mod 253952 + 253952, 262144) for the chunk "
        "before, 262144 for earlier chunks\n",
        "              no scored distance exceeds 262144 at any length: max_position_embeddings "
        "1010000 is reached by chunking, not by RoPE scaling\n",
        "              logits x f^2, f = max(1, 0.1 ln(n / 262144) + 1) for n tokens: f = "
        "1.134881164 at 1010000\n"}) {
    EXPECT_NE(text.output.find(line), std::string::npos) << line << "\n" << text.output;
  }
  // A config without the key reports none.
  EXPECT_FALSE(
      InspectJson(ConfigFile("qwen2.5-7b-instruct-yarn.json")).contains("dual_chunk_attention"));
}

// A chunk no longer than the local window is refused, naming the key as written.
TEST(CliInspect, DualChunkAttentionConfigIsValidated) {
  const auto dir = ScratchDir("inspect-dca");
  auto config = nlohmann::json::parse(ReadFile(RealConfig("qwen2-qwen2.5-7b-instruct-1m")));
  config["dual_chunk_attention_config"]["local_size"] = 262144;
  const auto path = dir / "dca.json";
  std::ofstream(path) << config.dump();
  const CliRun run = Cli("inspect " + path.string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[hf_config] dual_chunk_attention_config.chunk_size must be > "
                            "local_size (262144): the chunk length chunk_size - local_size must "
                            "be >= 1, got 262144"),
            std::string::npos)
      << run.output;
}

TEST(CliInspectLayers, ChatGlmAndAyaInterleaved) {
  for (const char* name : {"chatglm-chatglm2-6b", "chatglm-glm-4-9b-chat", "cohere-aya-23-8b"}) {
    SCOPED_TRACE(name);
    const auto golden = GoldenFile("model_positions/" + std::string(name) + ".json");
    const auto out = InspectJson(RealConfig(name));
    ExpectLayersMatchGolden(out, golden);
    EXPECT_EQ(out["layout"], "interleaved");
    EXPECT_EQ(out["head_dim"], golden["layout"]["head_dim"]);
    EXPECT_EQ(out["rotary_dim"], golden["layout"]["rotary_dim"]);
    EXPECT_EQ(out["rotary_offset"], 0);
    ExpectInvFreq(out, golden["rope"]["full_attention"]["inv_freq"]);
    if (golden.contains("heads")) {
      EXPECT_EQ(out["num_attention_heads"], golden["heads"]["num_attention_heads"]);
      EXPECT_EQ(out["num_key_value_heads"], golden["heads"]["num_key_value_heads"]);
    }
  }
  const CliRun text = Cli("inspect " + RealConfig("chatglm-chatglm2-6b"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("features [0, 64) rotate: head_dim 128 = 64 rotated + 64 unrotated"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("all 28 layers: RoPE theta 1e4"), std::string::npos) << text.output;
}

TEST(CliInspectLayers, DeepSeekRotatesTheLast64Of192) {
  const auto golden = GoldenFile("model_positions/deepseek-v3.json");
  const auto out = InspectJson(ConfigFile("deepseek-v3.json"));
  EXPECT_EQ(out["head_dim"], golden["heads"]["qk_head_dim"]);            // 192
  EXPECT_EQ(out["rotary_dim"], golden["heads"]["qk_rope_head_dim"]);     // 64
  EXPECT_EQ(out["rotary_offset"], golden["heads"]["qk_nope_head_dim"]);  // 128
  EXPECT_EQ(out["layers"], nlohmann::json::array());  // the subset has no layer count
  ExpectInvFreq(out, golden["rope"]["full_attention"]["inv_freq"]);
  const CliRun text = Cli("inspect " + ConfigFile("deepseek-v3.json"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("features [128, 192) rotate: head_dim 192 = 128 unrotated + 64 "
                             "rotated"),
            std::string::npos)
      << text.output;
  const CliRun run = Cli("inspect " + ConfigFile("deepseek-v3.json") + " --layer 0");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("this config gives no layer count"), std::string::npos) << run.output;
}

TEST(CliInspectLayers, OtherSchemesKeepTheirKeysAndListLayers) {
  auto out = InspectJson(ConfigFile("bloom.json"));
  EXPECT_EQ(out["scheme"], "alibi");
  EXPECT_EQ(out["slopes"].size(), 112u);
  for (const auto& layer : out["layers"]) EXPECT_EQ(layer["scheme"], "alibi");
  out = InspectJson(ConfigFile("gpt2.json"));
  EXPECT_EQ(out["scheme"], "learned");
  EXPECT_EQ(out["offset"], 0);

  const auto dir = ScratchDir("inspect-layers");
  // OPT's table starts at row 2 (the reference's embedding rows of positions 0.. are 2, 3, ...).
  const auto opt = GoldenFile("model_positions/opt-learned-positions.json");
  std::ofstream(dir / "opt.json") << R"({"model_type": "opt", "hidden_size": 768,
    "num_attention_heads": 12, "num_hidden_layers": 12, "max_position_embeddings": 2048})";
  out = InspectJson((dir / "opt.json").string());
  EXPECT_EQ(out["scheme"], "learned");
  EXPECT_EQ(out["offset"], opt["offset"]);
  EXPECT_EQ(opt["cases"][0]["embedding_rows"][0], opt["offset"]);  // position 0
  // T5 (t5-small's counts): relative-bias buckets, bidirectional encoder, causal decoder.
  const auto t5 = GoldenFile("model_positions/t5-buckets-32-128.json");
  std::ofstream(dir / "t5.json") << R"({"model_type": "t5", "d_model": 512, "num_heads": 8,
    "num_layers": 6, "num_decoder_layers": 6, "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128})";
  out = InspectJson((dir / "t5.json").string());
  EXPECT_EQ(out["scheme"], "relative_bias");
  EXPECT_EQ(out["num_buckets"], t5["num_buckets"]);
  EXPECT_EQ(out["max_distance"], t5["max_distance"]);
  EXPECT_EQ(out["bidirectional"], true);
  EXPECT_EQ(out["encoder_layers"], 6);
  EXPECT_EQ(out["decoder_layers"], 6);
  ASSERT_EQ(out["layers"].size(), 12u);
  for (const auto& layer : out["layers"]) {
    EXPECT_EQ(layer["scheme"], "relative_bias");
    EXPECT_EQ(layer["causal"], layer["index"].get<int>() >= 6);
  }
  CliRun text = Cli("inspect " + (dir / "t5.json").string());
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("layers 0-5 (6): T5 relative bias, bidirectional [encoder]"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("layers 6-11 (6): T5 relative bias [decoder]"), std::string::npos)
      << text.output;
  text = Cli("inspect " + (dir / "t5.json").string() + " --layer 0");
  EXPECT_EQ(text.status, 1);
  EXPECT_NE(text.output.find("--layer must be left out for this config"), std::string::npos)
      << text.output;
}

TEST(CliInspectLayers, MropeSectionsAreReported) {
  const auto dir = ScratchDir("inspect-mrope");
  // Qwen2-VL-7B's published rope values: sections of 16, 24 and 24 pairs (time, height, width).
  std::ofstream(dir / "qwen2vl.json") << R"({"model_type": "qwen2_vl", "hidden_size": 3584,
    "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})";
  const auto out = InspectJson((dir / "qwen2vl.json").string());
  EXPECT_EQ(out["mrope_section"], nlohmann::json::parse("[16, 24, 24]"));
  EXPECT_EQ(out["rotary_dim"], 2 * (16 + 24 + 24));  // the sections cover every pair
  EXPECT_EQ(out["layers"].size(), 28u);
  const CliRun text = Cli("inspect " + (dir / "qwen2vl.json").string());
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("image and video tokens need 3-D positions"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("all 28 layers: RoPE theta 1e6"), std::string::npos) << text.output;
}

TEST(CliInspectLayers, MultimodalStreamsAndVisionTowers) {
  // Qwen3-VL-8B: interleaved M-RoPE and a 72-wide vision head, in JSON and in words.
  const auto qwen3 = InspectJson(RealConfig("qwen3_vl-qwen3-vl-8b-instruct"));
  EXPECT_EQ(qwen3["mrope"]["layout"], "interleaved");
  EXPECT_EQ(qwen3["mrope"]["pair_stream"].size(), 64u);
  EXPECT_EQ(qwen3["vision_rope"]["kind"], "qwen3_vl");
  EXPECT_EQ(qwen3["vision_rope"]["head_dim"], 72);
  CliRun text = Cli("inspect " + RealConfig("qwen3_vl-qwen3-vl-8b-instruct"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("mrope         sections [24, 20, 20] interleaved: t h w t h w ... "
                             "(pairs 0-59), t (60-63)\n"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("vision        qwen3_vl tower: head_dim 72 (16 heads), theta 1e4, "
                             "half-split pairs; pairs 0-17 row, 18-35 column\n"),
            std::string::npos)
      << text.output;

  text = Cli("inspect " + RealConfig("qwen2_vl-qwen2-vl-7b-instruct"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("mrope         sections [16, 24, 24] in blocks: pairs 0-15 time, "
                             "16-39 height, 40-63 width\n"),
            std::string::npos)
      << text.output;

  // Llama 4's tower turns column pairs first; Pixtral's takes even and odd frequencies.
  const auto scout = InspectJson(RealConfig("llama4-scout-17b-16e"));
  EXPECT_TRUE(scout["mrope"].is_null());
  EXPECT_EQ(scout["vision_rope"]["pairs"], "pairs 0-21 column, 22-43 row");
  text = Cli("inspect " + RealConfig("mistral3-mistral-small-3.1-24b-instruct-2503"));
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("row pairs at f_0, f_2, ..., column pairs at f_1, f_3, ..."),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("110 patches a side"), std::string::npos) << text.output;
}

// The rotated q of the reference (q[h][d] = 0.01 (d + 1) - 0.3 h, heads 0 and 1, one token) from
// posenc rope with the config's layout; `order` maps our output feature to the reference's.
void ExpectRopeCommandMatchesLayoutGolden(const std::string& config, const std::string& golden_name,
                                          const std::string& extra = "") {
  const auto golden = GoldenFile("model_positions/" + golden_name + ".json");
  const int64_t head_dim = golden["layout"]["head_dim"];
  const auto dir = ScratchDir("rope-layout-" + golden_name);
  std::vector<float> q(2 * head_dim);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      q[h * head_dim + d] =
          static_cast<float>(0.01f * static_cast<float>(d + 1) - 0.3f * static_cast<float>(h));
    }
  }
  posenc::WriteNpy((dir / "q.npy").string(), q, std::vector<int64_t>{1, 2, head_dim});
  const bool deepseek = golden["layout"]["kind"] == "nope_then_rope_interleave_to_half";
  for (const auto& position : golden["layout"]["positions"]) {
    const CliRun run =
        Cli("rope " + config + " --input " + (dir / "q.npy").string() + " --positions " +
            position.dump() + " --output " + (dir / "out.npy").string() + extra);
    ASSERT_EQ(run.status, 0) << run.output;
    const posenc::NpyArray out = posenc::ReadNpy((dir / "out.npy").string());
    const auto& want = golden["layout"]["rotated_q"][position.dump()];
    // The reference multiplies position and frequency in float32: at position 1000 its angles
    // are off by up to 1000 * 2^-24 rad, ours are exact.
    const double tolerance = position.get<int>() < 100 ? 2e-6 : 1e-4;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        // DeepSeek's reference de-interleaves the 64 rotated features into half-split order
        // (pair i at 128 + i and 160 + i); posenc rotates pairs (2i, 2i + 1) in place.
        int64_t ref = d;
        if (deepseek && d >= 128) {
          const int64_t pair = (d - 128) / 2;
          ref = 128 + pair + ((d - 128) % 2) * 32;
        }
        ASSERT_NEAR(out.data[h * head_dim + d], want[h][ref].get<double>(), tolerance)
            << golden_name << " pos " << position << " head " << h << " feature " << d;
      }
    }
  }
}

TEST(CliRope, RotatesLikeTheReferenceForRealConfigs) {
  ExpectRopeCommandMatchesLayoutGolden(RealConfig("chatglm-chatglm2-6b"), "chatglm-chatglm2-6b");
  ExpectRopeCommandMatchesLayoutGolden(RealConfig("chatglm-glm-4-9b-chat"),
                                       "chatglm-glm-4-9b-chat");
  ExpectRopeCommandMatchesLayoutGolden(RealConfig("cohere-aya-23-8b"), "cohere-aya-23-8b");
  ExpectRopeCommandMatchesLayoutGolden(RealConfig("llama4-scout-17b-16e"), "llama4-scout-17b-16e",
                                       " --layer 0");
  ExpectRopeCommandMatchesLayoutGolden(ConfigFile("deepseek-v3.json"), "deepseek-v3");
}

TEST(CliRope, NopeLayerIsAClearError) {
  const auto dir = ScratchDir("rope-nope");
  posenc::WriteNpy((dir / "x.npy").string(), std::vector<float>(128, 1.0f),
                   std::vector<int64_t>{1, 1, 128});
  const CliRun run =
      Cli("rope " + RealConfig("llama4-scout-17b-16e") + " --input " + (dir / "x.npy").string() +
          " --positions 0 --output " + (dir / "y.npy").string() + " --layer 7");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[cli] --layer must pick a RoPE layer (layer 7 is nope"),
            std::string::npos)
      << run.output;
}

// q from the apply golden file as [tokens, heads, head_dim] floats.
std::vector<float> GoldenTensor(const nlohmann::json& a) {
  std::vector<float> out;
  for (const auto& token : a)
    for (const auto& head : token)
      for (const auto& v : head) out.push_back(v.get<float>());
  return out;
}

void ExpectRopeCommandMatchesGolden(const std::string& apply_name, const std::string& config) {
  const auto golden = GoldenFile("apply/" + apply_name + ".json");
  const auto dir = ScratchDir("rope-" + apply_name);
  const std::vector<float> q = GoldenTensor(golden["q"]);
  const std::vector<int64_t> shape = {static_cast<int64_t>(golden["q"].size()),
                                      static_cast<int64_t>(golden["q"][0].size()),
                                      static_cast<int64_t>(golden["q"][0][0].size())};
  posenc::WriteNpy((dir / "q.npy").string(), q, shape);
  std::string positions;
  for (const auto& p : golden["positions"]) positions += (positions.empty() ? "" : ",") + p.dump();
  for (const auto& [layout, column] :
       {std::pair{"half-split", "out_neox_f64"}, std::pair{"interleaved", "out_interleaved_f64"}}) {
    const CliRun run = Cli("rope " + ConfigFile(config) + " --input " + (dir / "q.npy").string() +
                           " --positions " + positions + " --output " + (dir / "out.npy").string() +
                           " --layout " + layout);
    ASSERT_EQ(run.status, 0) << run.output;
    const posenc::NpyArray out = posenc::ReadNpy((dir / "out.npy").string());
    EXPECT_EQ(out.shape, shape);
    const std::vector<float> want = GoldenTensor(golden[column]);
    ASSERT_EQ(out.data.size(), want.size());
    for (size_t e = 0; e < want.size(); ++e) {
      // The float32 kernel path: a few float32 ulps of values up to about 3.5.
      ASSERT_NEAR(out.data[e], want[e], 2e-6) << apply_name << " " << layout << " " << e;
    }
  }
}

TEST(CliRope, AppliesTheModelsRopeInBothLayouts) {
  ExpectRopeCommandMatchesGolden("llama3_1_8b", "llama3.1-8b.json");
  ExpectRopeCommandMatchesGolden("phi_2", "phi-2.json");  // partial rotary: 32 of 80
}

TEST(CliRope, ShapeAndPositionMismatchesAreClearErrors) {
  const auto dir = ScratchDir("rope-bad");
  const std::vector<float> x(2 * 3 * 64, 1.0f);
  const std::vector<int64_t> shape = {2, 3, 64};
  posenc::WriteNpy((dir / "x.npy").string(), x, shape);
  CliRun run = Cli("rope " + ConfigFile("llama2-7b.json") + " --input " + (dir / "x.npy").string() +
                   " --positions 0,1 --output " + (dir / "y.npy").string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("must have head_dim 128"), std::string::npos) << run.output;
  run = Cli("rope " + ConfigFile("nomic-embed-text-v1.5-dynamic.json") + " --input " +
            (dir / "x.npy").string() + " --positions 0,1,2 --output " + (dir / "y.npy").string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("give one position per token (2)"), std::string::npos) << run.output;
  run = Cli("rope " + ConfigFile("gpt2.json") + " --input " + (dir / "x.npy").string() +
            " --positions 0,1 --output " + (dir / "y.npy").string());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("must describe a RoPE model"), std::string::npos) << run.output;
}

// The text report fits a 100-column terminal, names the baselines of its run, and gives every
// entry of the JSON report one row (the JSON is the full record).
TEST(CliBench, QuickTextFitsOneHundredColumns) {
  const CliRun run = Cli("bench --quick --repeats 1");
  ASSERT_EQ(run.status, 0) << run.output;
  std::istringstream lines(run.output);
  size_t rows = 0;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    if (line.rfind("  rope_forward half_split ", 0) == 0) ++rows;
  }
  EXPECT_NE(run.output.find("baselines of this run: float32 FMA peak "), std::string::npos);
  EXPECT_NE(run.output.find("baseline drift, slowest round over fastest"), std::string::npos);
  EXPECT_NE(run.output.find("\ncpu: "), std::string::npos) << run.output;
  EXPECT_EQ(rows, 5u) << run.output;  // f32 and bf16, in place and not, and f32 on one thread
  // A warning, when there is one, opens and closes the report.
  if (run.output.rfind("WARNING: ", 0) == 0) {
    EXPECT_NE(run.output.find("WARNING: the machine was not quiet", run.output.size() - 200),
              std::string::npos)
        << run.output;
  }
}

// The robust figures beside the old ones: per-round ratios to the same round's baseline, their
// median and range, the baselines round by round, the machine's load, the warnings and the CPU
// by name and microarchitecture. Structure only: on tiny shapes the numbers mean nothing.
TEST(CliBench, QuickJsonHasPerRoundRatiosWarningsAndTheCpu) {
  const CliRun run = Cli("bench --quick --json --repeats 3");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto report = nlohmann::json::parse(run.output);
  ASSERT_TRUE(report.contains("cpu")) << run.output;
  const auto& cpu = report["cpu"];
  for (const char* key :
       {"model_name", "vendor", "family", "model", "stepping", "microarchitecture", "avx512f",
        "avx512_bf16", "amx_bf16", "amx_permitted"}) {
    EXPECT_TRUE(cpu.contains(key)) << key << " in " << cpu.dump();
  }
  EXPECT_FALSE(cpu["microarchitecture"].get<std::string>().empty());
  EXPECT_EQ(report["machine"], cpu["model_name"]);
  ASSERT_TRUE(report["warnings"].is_array());
  EXPECT_EQ(report["quiet"].get<bool>(), report["warnings"].empty());
  EXPECT_GT(report["max_baseline_drift"].get<double>(), 1.0);
  for (const char* key :
       {"in_place_bandwidth_gb_per_s", "fma_peak_gflop_per_s", "kv_read_gb_per_s"}) {
    ASSERT_TRUE(report["baseline_rounds"].contains(key)) << key;
    EXPECT_EQ(report["baseline_rounds"][key].size(), 3u) << key;
  }
  for (const char* key : {"in_place_bandwidth", "fma_peak", "kv_read"}) {
    EXPECT_GE(report["baseline_drift"][key].get<double>(), 1.0) << key;
  }
  EXPECT_TRUE(report["load"].contains("before") && report["load"].contains("after"));
  EXPECT_GT(report["load"]["cores"].get<int>(), 0);
  for (const auto& e : report["entries"]) {
    for (const char* key :
         {"rounds", "round_ns", "ratio_to_bandwidth_median", "ratio_to_bandwidth_min",
          "ratio_to_bandwidth_max", "ratio_to_bandwidth_per_round"}) {
      EXPECT_TRUE(e.contains(key)) << key << " in " << e.dump();
    }
    const double median = e["ratio_to_bandwidth_median"].get<double>();
    EXPECT_LE(e["ratio_to_bandwidth_min"].get<double>(), median) << e.dump();
    EXPECT_GE(e["ratio_to_bandwidth_max"].get<double>(), median) << e.dump();
    EXPECT_EQ(e["ratio_to_bandwidth_per_round"].size(), e["rounds"].get<size_t>()) << e.dump();
    if (e.contains("ratio_to_peak")) {
      EXPECT_TRUE(e.contains("ratio_to_peak_median") && e.contains("ratio_to_peak_min") &&
                  e.contains("ratio_to_peak_max"))
          << e.dump();
    }
    if (e.contains("ratio_to_stream_time")) {
      EXPECT_TRUE(e.contains("ratio_to_stream_time_median")) << e.dump();
    }
  }
}

// --only keeps the entries whose operation and layout contain one of its words, and the baselines
// their ratios are taken against.
TEST(CliBench, OnlyRunsTheNamedEntriesAndTheirBaselines) {
  const CliRun run = Cli("bench --quick --json --repeats 1 --only interleaved decode_step");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto report = nlohmann::json::parse(run.output);
  std::set<std::string> operations;
  for (const auto& e : report["entries"]) {
    const std::string label =
        e["operation"].get<std::string>() + " " + e["layout"].get<std::string>();
    operations.insert(e["operation"].get<std::string>());
    const bool baseline = label.rfind("stream_read_", 0) == 0;
    EXPECT_TRUE(baseline || label.find("interleaved") != std::string::npos ||
                label.find("decode_step") != std::string::npos)
        << label;
  }
  EXPECT_EQ(operations, (std::set<std::string>{"stream_read_modify_write", "stream_read_kv_cache",
                                               "rope_forward", "rope_reference_scalar",
                                               "mrope_forward", "rope_decode_step"}));
  EXPECT_GT(report["fma_peak_gflop_per_s"].get<double>(), 0.0);
  // A word that names nothing is an error, not a report of baselines alone.
  const CliRun typo = Cli("bench --quick --only rope_froward");
  EXPECT_EQ(typo.status, 1);
  EXPECT_NE(typo.output.find("[bench] --only: 'rope_froward' is in no entry's operation"),
            std::string::npos)
      << typo.output;
}

TEST(CliBench, QuickJsonNamesEveryEntryAndItsRatio) {
  // A smoke run on tiny shapes: the report's structure, never a time.
  const CliRun run = Cli("bench --quick --json --repeats 1");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto report = nlohmann::json::parse(run.output);
  EXPECT_FALSE(report["simd_target"].get<std::string>().empty());
  std::set<std::string> operations;
  for (const auto& e : report["entries"]) {
    for (const char* key : {"operation", "layout", "dtype", "in_place", "shape", "bytes_moved",
                            "gb_per_s", "ratio_to_bandwidth"}) {
      EXPECT_TRUE(e.contains(key)) << key << " in " << e.dump();
    }
    EXPECT_GT(e["ratio_to_bandwidth"].get<double>(), 0.0) << e.dump();
    operations.insert(e["operation"].get<std::string>() + "/" + e["dtype"].get<std::string>());
  }
  for (const char* op :
       {"stream_copy/float32", "stream_read_modify_write/float32", "rope_forward/float32",
        "rope_forward/bfloat16", "rope_decode_step/float32", "rope_reference_scalar/float32",
        "sinusoidal_table/float32", "mrope_forward/float32", "mrope_forward/bfloat16"}) {
    EXPECT_TRUE(operations.count(op)) << op;
  }
  // The compute-bound entries: useful GFLOP/s and a fraction of the FMA peak of the same run.
  EXPECT_GT(report["fma_peak_gflop_per_s"].get<double>(), 0.0);
  std::set<std::string> attention;
  for (const auto& e : report["entries"]) {
    const std::string op = e["operation"].get<std::string>();
    if (op.rfind("attention ", 0) != 0) continue;
    attention.insert(op);
    ASSERT_TRUE(e.contains("gflop_per_s") && e.contains("ratio_to_peak")) << e.dump();
    EXPECT_GT(e["ratio_to_peak"].get<double>(), 0.0) << e.dump();
    if (op.find("decode") != std::string::npos) {
      ASSERT_TRUE(e.contains("stream_ns") && e.contains("ratio_to_stream_time")) << e.dump();
      EXPECT_GT(e["ratio_to_stream_time"].get<double>(), 0.0) << e.dump();
    }
  }
  EXPECT_EQ(attention, (std::set<std::string>{"attention prefill causal f32",
                                              "attention prefill causal alibi f32",
                                              "attention prefill causal bf16",
                                              "attention prefill causal alibi bf16",
                                              "attention prefill causal t5 f32",
                                              "attention prefill causal t5 bf16",
                                              "attention prefill causal rope f32",
                                              "attention prefill causal rope bf16",
                                              "attention prefill causal self-extend f32",
                                              "attention prefill causal self-extend bf16",
                                              "attention decode gqa f32",
                                              "attention decode gqa bf16",
                                              "attention decode cache f32",
                                              "attention decode cache bf16",
                                              "attention decode cache rope f32",
                                              "attention decode cache rope bf16",
                                              "attention decode rope every key f32",
                                              "attention decode rope every key bf16",
                                              "attention backward causal f32",
                                              "attention backward causal alibi f32",
                                              "attention backward causal bf16",
                                              "attention backward causal alibi bf16"}));
}

}  // namespace
