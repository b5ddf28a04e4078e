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
  EXPECT_EQ(report["claims_total"], 25);
  EXPECT_EQ(report["claims_reproduced"], 25);
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
  EXPECT_EQ(figures, 6);
  const std::string html = ReadFile(dir / "report.html");
  EXPECT_NE(html.find("25 of 25 claims"), std::string::npos);
  EXPECT_NE(html.find("rope_stretching.svg"), std::string::npos);
}

TEST(CliDemo, TextReportStatesTheClaims) {
  const auto dir = ScratchDir("demo-text");
  const CliRun run = Cli("demo --out " + dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("dog at position 1: [0.4, 0.5]"), std::string::npos);
  EXPECT_NE(run.output.find("25 of 25 claims of the lesson reproduced."), std::string::npos);
  EXPECT_EQ(run.output.find("[FAIL]"), std::string::npos);
}

TEST(CliTable, SinusoidalCsv) {
  const auto file = ScratchDir("table-csv") / "pe.csv";
  const CliRun run = Cli("table sinusoidal --positions 3 --dim 4 --format csv --output " + file.string());
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
  const CliRun run = Cli("table sinusoidal --positions 64 --dim 32 --format npy --output " + file.string());
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
  EXPECT_NE(run.output.find("--dim: must be a decimal integer in [1, 9223372036854775807], got '0'"),
            std::string::npos)
      << run.output;
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
  const CliRun run = Cli("inspect " + ConfigFile("llama3.1-8b.json") +
                         " --positions 0,4095,131071 --json");
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
  const CliRun run = Cli("inspect " + ConfigFile("qwen2.5-7b-instruct-yarn.json") +
                         " --precision exact --json");
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
  for (const auto& [layout, column] : {std::pair{"half-split", "out_neox_f64"},
                                       std::pair{"interleaved", "out_interleaved_f64"}}) {
    const CliRun run = Cli("rope " + ConfigFile(config) + " --input " + (dir / "q.npy").string() +
                           " --positions " + positions + " --output " +
                           (dir / "out.npy").string() + " --layout " + layout);
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
  CliRun run = Cli("rope " + ConfigFile("llama2-7b.json") + " --input " +
                   (dir / "x.npy").string() + " --positions 0,1 --output " +
                   (dir / "y.npy").string());
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
  for (const char* op : {"stream_copy/float32", "stream_read_modify_write/float32",
                         "rope_forward/float32", "rope_forward/bfloat16", "rope_decode_step/float32",
                         "rope_reference_scalar/float32", "sinusoidal_table/float32"}) {
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
  EXPECT_EQ(attention, (std::set<std::string>{
                           "attention prefill causal f32", "attention prefill causal alibi f32",
                           "attention prefill causal bf16", "attention prefill causal alibi bf16",
                           "attention decode gqa f32", "attention decode gqa bf16"}));
}

}  // namespace
