// The posenc command line against hostile and careless input: file names and configs that try to
// run commands, writes that fail half-way, numbers that C would misread, and requests for more
// memory than the machine has. Each case asserts the exact error and that nothing was changed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "posenc/npy.h"

namespace {

namespace fs = std::filesystem;

struct Limits {
  std::optional<rlim_t> file_size;  // RLIMIT_FSIZE, bytes
  std::optional<rlim_t> memory;     // RLIMIT_AS, bytes
  std::string stdout_path;          // "" = captured with stderr
};

struct CliResult {
  int status;          // exit code, or -signal
  std::string output;  // stdout (unless redirected) and stderr
};

// Runs the posenc tool with exactly these arguments (no shell reads them), in `cwd`, under the
// given limits, with SIGXFSZ at its default (as a shell user has it; the tool must cope).
CliResult Posenc(const std::vector<std::string>& arguments, const fs::path& cwd,
                 const Limits& limits = {}) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {-1000, "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    if (chdir(cwd.c_str()) != 0) _exit(125);
    int out = pipe_fds[1];
    if (!limits.stdout_path.empty()) out = open(limits.stdout_path.c_str(), O_WRONLY);
    dup2(out, STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    signal(SIGXFSZ, SIG_DFL);
    if (limits.file_size) {
      const rlimit limit{*limits.file_size, *limits.file_size};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    if (limits.memory) {
      const rlimit limit{*limits.memory, *limits.memory};
      setrlimit(RLIMIT_AS, &limit);
    }
    std::vector<char*> argv = {const_cast<char*>(POSENC_CLI)};
    for (const std::string& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(POSENC_CLI, argv.data());
    _exit(126);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  ssize_t got;
  while ((got = read(pipe_fds[0], buffer, sizeof buffer)) > 0) output.append(buffer, got);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), output};
}

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("posenc-hostile-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string Config(const std::string& name) {
  return std::string(POSENC_SOURCE_DIR) + "/tests/configs/" + name;
}

// Every name a command injection would create, relative to the run's folder or absolute.
bool SomethingRan(const fs::path& cwd) {
  return fs::exists(cwd / "PWNED") || fs::exists("/tmp/PWNED-posenc");
}

// ---------------------------------------------------------------------------------------------
// No injection: titles and paths reach gnuplot as data.

const std::vector<std::string> kHostileTexts = {
    "x' noenhanced\nsystem(\"touch PWNED\")\nset title 'y",
    "x'; system('touch PWNED'); '",
    "x\" . system(\"touch PWNED\") . \"",
    "`touch PWNED`",
    "@PWNED \\' \\\\ \\n",
    "x'\rsystem(\"touch /tmp/PWNED-posenc\")\r'",
};

TEST(HostileCli, ModelTypeInAChartTitleIsData) {
  for (const std::string& model_type : kHostileTexts) {
    const fs::path dir = Scratch("title");
    const std::string config = nlohmann::json({{"model_type", model_type},
                                               {"hidden_size", 256},
                                               {"num_attention_heads", 4},
                                               {"rope_theta", 10000.0},
                                               {"max_position_embeddings", 2048}})
                                   .dump();
    WriteText(dir / "config.json", config);
    const CliResult run = Posenc({"inspect", "config.json", "--chart", "chart.png"}, dir);
    EXPECT_EQ(run.status, 0) << model_type << "\n" << run.output;
    EXPECT_FALSE(SomethingRan(dir)) << model_type;
    EXPECT_GT(fs::file_size(dir / "chart.png"), 1000u) << model_type;
    EXPECT_NE(ReadAll(dir / "chart.gp").find("set title"), std::string::npos);
    fs::remove("/tmp/PWNED-posenc");
  }
}

TEST(HostileCli, ChartPathsAreNeverParsedByAShellOrGnuplot) {
  for (const std::string& stem :
       {std::string("a';touch PWNED;'b"), std::string("a\"$(touch PWNED)\""),
        std::string("a\nsystem(\"touch PWNED\")\n"), std::string("a`touch PWNED`\\")}) {
    const fs::path dir = Scratch("chart-path");
    fs::create_directories(dir / "out';touch PWNED;'");
    const std::string chart = "out';touch PWNED;'/" + stem + ".png";
    const CliResult run = Posenc({"inspect", Config("llama2-7b.json"), "--chart", chart}, dir);
    EXPECT_EQ(run.status, 0) << stem << "\n" << run.output;
    EXPECT_FALSE(SomethingRan(dir)) << stem;
    EXPECT_GT(fs::file_size(dir / chart), 1000u) << stem;
    EXPECT_TRUE(fs::exists(dir / ("out';touch PWNED;'/" + stem + ".svg"))) << stem;
  }
}

TEST(HostileCli, DemoFolderIsNeverParsedByAShellOrGnuplot) {
  const fs::path dir = Scratch("demo-out");
  const std::string out = "d';touch PWNED;'\nsystem(\"touch PWNED\")";
  const CliResult run = Posenc({"demo", "--json", "--out", out}, dir);
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_FALSE(SomethingRan(dir));
  EXPECT_GT(fs::file_size(dir / out / "rope_stretching.png"), 1000u);
  EXPECT_TRUE(fs::exists(dir / out / "report.html"));
}

TEST(HostileCli, ConfigTextCannotReachTheTerminalAsEscapeSequences) {
  const fs::path dir = Scratch("terminal");
  // OSC (retitle the window), CSI (clear the screen) as ESC [ and as the C1 byte U+009B, and an
  // ordinary non-ASCII name that must stay readable.
  const std::string model_type = "x\x1b]0;owned\x07\x1b[2J\u009b2Jllama-\u00e9";
  WriteText(dir / "rope.json", nlohmann::json({{"model_type", model_type},
                                               {"hidden_size", 256},
                                               {"num_attention_heads", 4},
                                               {"rope_theta", 10000.0}})
                                   .dump());
  WriteText(dir / "bad.json", nlohmann::json({{"model_type", model_type},
                                              {"hidden_size", 256},
                                              {"num_attention_heads", 4},
                                              {"rope_theta", -1.0}})
                                  .dump());
  for (const std::string& config : {"rope.json", "bad.json"}) {
    const CliResult run = Posenc({"inspect", config}, dir);
    EXPECT_EQ(run.output.find('\x1b'), std::string::npos) << config;
    EXPECT_EQ(run.output.find("\xc2\x9b"), std::string::npos) << config;
  }
  const CliResult run = Posenc({"inspect", "rope.json"}, dir);
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("RoPE (x\\x1b]0;owned\\x07\\x1b[2J\\xc2\\x9b2Jllama-\u00e9)"),
            std::string::npos)
      << run.output;
}

// The argument parser's own messages quote what was typed: a file name, an unknown option, a
// value outside a set. An argument holding escape sequences must reach the terminal as text there
// too, and the message must still say what was wrong.
TEST(HostileCli, ArgumentsCannotReachTheTerminalAsEscapeSequencesThroughTheParser) {
  const fs::path dir = Scratch("parser-terminal");
  const std::string hostile = "x\x1b]0;owned\x07\x1b[2J\u009b2J";
  const std::vector<std::vector<std::string>> runs = {
      {"inspect", hostile + ".json"},                         // a file that does not exist
      {"inspect", Config("llama2-7b.json"), "--" + hostile},  // an unknown option
      {"table", "sinusoidal", "--positions", hostile},        // a number that is not one
      {"table", hostile},                                     // a scheme outside the set
      {"alibi", "--heads", "4", hostile},                     // an extra argument
  };
  for (const std::vector<std::string>& arguments : runs) {
    const CliResult run = Posenc(arguments, dir);
    EXPECT_NE(run.status, 0) << arguments[1];
    EXPECT_EQ(run.output.find('\x1b'), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("\xc2\x9b"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("x\\x1b]0;owned\\x07\\x1b[2J\\xc2\\x9b2J"), std::string::npos)
        << run.output;
  }
}

// ---------------------------------------------------------------------------------------------
// No lost data: a failed write leaves the old file as it was and exits non-zero.

std::vector<float> Ramp(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = 0.25f * static_cast<float>(i);
  return values;
}

TEST(HostileCli, RopeOverItsOwnInputPastAFileSizeLimitKeepsTheInput) {
  const fs::path dir = Scratch("rope-fsize");
  const std::vector<int64_t> shape = {4, 8, 128};  // 16 KiB of data
  posenc::WriteNpy((dir / "q.npy").string(), Ramp(4 * 8 * 128), shape);
  const std::string before = ReadAll(dir / "q.npy");
  const CliResult run = Posenc({"rope", Config("llama2-7b.json"), "--input", "q.npy", "--positions",
                                "0,1,2,3", "--output", "q.npy"},
                               dir, {.file_size = 4096});
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("[npy.write] path must be written completely (write: File too large)"
                            "; nothing was changed, got 'q.npy'"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(ReadAll(dir / "q.npy"), before);
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename(), "q.npy") << "left behind: " << entry.path();
  }
}

TEST(HostileCli, TableToAFullDiskFails) {
  const fs::path dir = Scratch("full");
  for (const std::string& format : {"csv", "npy"}) {
    const CliResult run = Posenc({"table", "sinusoidal", "--positions", "64", "--dim", "16",
                                  "--format", format, "--output", "/dev/full"},
                                 dir);
    EXPECT_EQ(run.status, 1) << run.output;
    EXPECT_NE(run.output.find("must be written completely (write: No space left on device)"),
              std::string::npos)
        << run.output;
  }
}

TEST(HostileCli, TableOverAnOldFilePastAFileSizeLimitKeepsIt) {
  const fs::path dir = Scratch("table-fsize");
  WriteText(dir / "pe.csv", "the old table\n");
  const CliResult run =
      Posenc({"table", "sinusoidal", "--positions", "512", "--dim", "64", "--output", "pe.csv"},
             dir, {.file_size = 8192});
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("[table] path must be written completely (write: File too large)"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(ReadAll(dir / "pe.csv"), "the old table\n");
}

TEST(HostileCli, StandardOutputErrorsAreReported) {
  const fs::path dir = Scratch("stdout");
  for (const std::vector<std::string>& arguments :
       {std::vector<std::string>{"alibi", "--heads", "8", "--json"},
        std::vector<std::string>{"inspect", Config("llama3.1-8b.json")}}) {
    const CliResult run = Posenc(arguments, dir, {.stdout_path = "/dev/full"});
    EXPECT_EQ(run.status, 1) << arguments[0] << ": " << run.output;
    // The reason is known when the first failed write is the last flush (a short output).
    EXPECT_EQ(run.output.rfind("posenc: cannot write the output to standard output (", 0), 0u)
        << run.output;
    if (arguments[0] == "alibi") {
      EXPECT_EQ(run.output,
                "posenc: cannot write the output to standard output (No space left "
                "on device)\n");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Numbers are decimal and range-checked; sizes are checked before anything is allocated.

struct NumberCase {
  std::vector<std::string> arguments;
  std::string error;  // "" = succeeds
};

TEST(HostileCli, IntegersAreDecimalAndInRange) {
  const fs::path dir = Scratch("numbers");
  const std::vector<NumberCase> cases = {
      {{"alibi", "--heads", "010", "--json"}, ""},
      {{"alibi", "--heads", "0x10"},
       "--heads: must be a decimal integer in [1, 9223372036854775807], got '0x10'"},
      {{"alibi", "--heads", "99999999999999999999"},
       "--heads: must be a decimal integer in [1, 9223372036854775807] (it does not fit in 64 "
       "bits), got '99999999999999999999'"},
      {{"alibi", "--heads", "-3"},
       "--heads: must be a decimal integer in [1, 9223372036854775807], got '-3'"},
      {{"alibi", "--heads", "8 "},
       "--heads: must be a decimal integer in [1, 9223372036854775807], got '8 '"},
      {{"alibi", "--heads", "8", "--max-bias", "nan"},
       "--max-bias: must be a finite decimal number in"},
      {{"inspect", Config("llama2-7b.json"), "--positions", ""},
       "--positions: must be a decimal integer in [0, 9223372036854775807], got ''"},
      {{"inspect", Config("llama2-7b.json"), "--positions", "1,,2"},
       "--positions: must be a decimal integer in [0, 9223372036854775807], got ''"},
      {{"inspect", Config("llama2-7b.json"), "--seq-len", "1e6"},
       "--seq-len: must be a decimal integer in [1, 9223372036854775807], got '1e6'"},
      {{"inspect", Config("llama2-7b.json"), "--positions", "0,4294967297"},
       "[inspect] --positions must be <= 2^32 = 4294967296 (kMaxPosition, where float32 RoPE "
       "stops being accurate), got 4294967297"},
      {{"bench", "--repeats", "0"},
       "--repeats: must be a decimal integer in [1, 1000000], got '0'"},
      {{"table", "sinusoidal", "--positions", "3", "--dim", "4", "--base", "0x10", "--output",
        "t.csv"},
       "--base: must be a finite decimal number in"},
  };
  for (const NumberCase& c : cases) {
    const CliResult run = Posenc(c.arguments, dir);
    const std::string shown = c.arguments[0] + " " + c.arguments[1] + " " + c.arguments[2];
    if (c.error.empty()) {
      EXPECT_EQ(run.status, 0) << shown << "\n" << run.output;
      continue;
    }
    EXPECT_NE(run.status, 0) << shown;
    EXPECT_NE(run.output.find(c.error), std::string::npos) << shown << "\n" << run.output;
  }
  const CliResult ten = Posenc({"alibi", "--heads", "010", "--json"}, dir);
  EXPECT_EQ(nlohmann::json::parse(ten.output)["slopes"].size(), 10u);
}

TEST(HostileCli, HugeOutputsAreRefusedBeforeAllocating) {
  const fs::path dir = Scratch("huge");
  std::string many_positions = "0";
  for (int p = 1; p < 600; ++p) many_positions += "," + std::to_string(p);
  nlohmann::json wide = {{"model_type", "llama"},
                         {"hidden_size", 65536},
                         {"num_attention_heads", 1},
                         {"rope_theta", 10000.0}};
  WriteText(dir / "wide.json", wide.dump());
  const std::vector<NumberCase> cases = {
      {{"alibi", "--heads", "1000000000"},
       "[alibi] --heads must give an output of at most 1073741824 bytes (--max-output-bytes "
       "raises the limit), got 1000000000 items, about 4.8e+10 bytes"},
      {{"table", "sinusoidal", "--positions", "200000000", "--dim", "8", "--output", "t.csv"},
       "[table] --positions x --dim must give an output of at most 1073741824 bytes "
       "(--max-output-bytes raises the limit), got 1600000000 items, about 2.56e+10 bytes"},
      {{"inspect", "wide.json", "--positions", many_positions},
       "[inspect] --positions x rotary pairs must give an output of at most 1073741824 bytes "
       "(--max-output-bytes raises the limit), got 19660800 items, about 1.26e+09 bytes"},
      {{"alibi", "--heads", "100", "--max-output-bytes", "1000"},
       "[alibi] --heads must give an output of at most 1000 bytes"},
  };
  for (const NumberCase& c : cases) {
    const CliResult run = Posenc(c.arguments, dir, {.memory = rlim_t{1} << 31});
    EXPECT_EQ(run.status, 1) << c.arguments[0] << "\n" << run.output;
    EXPECT_NE(run.output.find(c.error), std::string::npos) << run.output;
  }
  EXPECT_FALSE(fs::exists(dir / "t.csv"));
  EXPECT_EQ(Posenc({"alibi", "--heads", "100", "--max-output-bytes", "100000"}, dir).status, 0);
}

TEST(HostileCli, HugeAndSpecialInputFilesAreRefusedBeforeReading) {
  const fs::path dir = Scratch("inputs");
  {
    std::ofstream(dir / "sparse.json");
    fs::resize_file(dir / "sparse.json", uint64_t{2} << 30);  // 2 GiB of holes
    posenc::WriteNpy((dir / "sparse.npy").string(), Ramp(4), std::vector<int64_t>{4});
    fs::resize_file(dir / "sparse.npy", uint64_t{2} << 30);
  }
  const Limits small_memory = {.memory = rlim_t{1} << 30};
  CliResult run = Posenc({"inspect", "sparse.json"}, dir, small_memory);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("at most 67108864 bytes"), std::string::npos) << run.output;
  run = Posenc({"inspect", "/dev/zero"}, dir, small_memory);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("path must name a regular file (not a device, pipe or socket), got "
                            "'/dev/zero'"),
            std::string::npos)
      << run.output;
  run = Posenc({"inspect", "."}, dir, small_memory);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("path must name a file, not a directory, got '.'"), std::string::npos)
      << run.output;
  run = Posenc({"rope", Config("llama2-7b.json"), "--input", "sparse.npy", "--positions", "0",
                "--output", "out.npy"},
               dir, small_memory);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[rope] --input must give an output of at most 1073741824 bytes"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
}

// ---------------------------------------------------------------------------------------------
// Clear errors.

TEST(HostileCli, LayerOnASingleLayerConfigSaysThereIsNone) {
  // Qwen2.5's excerpt: one RoPE setting and no layer count (Qwen2Config's default is not taken).
  const CliResult run =
      Posenc({"inspect", Config("qwen2.5-7b-instruct-yarn.json"), "--layer", "full_attention"},
             fs::temp_directory_path());
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("[cli] --layer must be left out: this config has one RoPE setting for "
                            "every layer (no layer_types), got full_attention"),
            std::string::npos)
      << run.output;
}

TEST(HostileCli, ChartNamesThatCannotBeHonouredAreErrors) {
  const fs::path dir = Scratch("chart-names");
  for (const std::string& chart :
       {std::string(""), std::string("folder/"), std::string("."), std::string("chart.jpg")}) {
    const CliResult run = Posenc({"inspect", Config("llama2-7b.json"), "--chart", chart}, dir);
    EXPECT_EQ(run.status, 1);
    EXPECT_EQ(run.output,
              "posenc: [inspect] --chart must name a .png file (the .svg and .gp are "
              "written beside it), got '" +
                  chart + "'\n");
  }
  fs::create_directories(dir / "taken.png");
  CliResult run = Posenc({"inspect", Config("llama2-7b.json"), "--chart", "taken.png"}, dir);
  EXPECT_EQ(run.output,
            "posenc: [inspect] --chart must name a file, not a folder, got "
            "'taken.png'\n");
  run = Posenc({"inspect", Config("bloom.json"), "--chart", "bloom.png"}, dir);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.output,
            "posenc: [inspect] --chart must be left out for this config (only RoPE "
            "configs have wavelengths to draw), got a config whose scheme is alibi\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

}  // namespace
