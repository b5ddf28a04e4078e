// The posenc command line, run as a user runs it; expected values are the lesson's numbers.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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
  EXPECT_NE(run.output.find("dim must be"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("got 0"), std::string::npos) << run.output;
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
  EXPECT_NE(run.output.find("num_heads must be"), std::string::npos) << run.output;
}

TEST(Readme, QuickstartIsTheCompiledExample) {
  const std::string readme = ReadFile(std::string(POSENC_SOURCE_DIR) + "/README.md");
  const std::string example = ReadFile(std::string(POSENC_SOURCE_DIR) + "/examples/quickstart.cc");
  ASSERT_FALSE(example.empty());
  EXPECT_NE(readme.find(example), std::string::npos)
      << "README.md must quote examples/quickstart.cc verbatim (the consumer test compiles it)";
}

}  // namespace
