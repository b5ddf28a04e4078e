#include "plot/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "posenc/files.h"

namespace posenc::plot {
namespace {

// One palette and font for every figure, set once here rather than in each script.
constexpr const char* kStyle = R"(set encoding utf8
set border lw 1 lc rgb '#555555'
set grid lc rgb '#dddddd' lw 1
set key noopaque
set style line 1 lc rgb '#1f77b4' lw 2.5
set style line 2 lc rgb '#d62728' lw 2.5
set style line 3 lc rgb '#2ca02c' lw 2.5
set style line 4 lc rgb '#9467bd' lw 2.5
set style line 5 lc rgb '#ff7f0e' lw 2.5
set style line 6 lc rgb '#8c564b' lw 2.5
set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')
)";

// The script for both terminals; the outputs are named relative to the folder it runs in.
std::string Script(const Figure& figure, const std::string& stem) {
  std::string s;
  for (const auto& [terminal, extension] :
       {std::pair{"pngcairo enhanced", ".png"},
        std::pair{"svg enhanced dynamic background rgb 'white'", ".svg"}}) {
    s += std::string("set terminal ") + terminal + " size " + std::to_string(figure.width) + "," +
         std::to_string(figure.height) + " font 'DejaVu Sans,11'\n";
    s += "set output " + GnuplotString(stem + extension) + "\n" + kStyle;
    for (const DataBlock& block : figure.data) {
      s += "$" + block.name + " << EOD\n" + block.rows + "EOD\n";
    }
    s += figure.script + "\nunset output\n";
  }
  return s;
}

// A private folder beside the figures (so that renames stay on one file system), removed with
// everything in it when the render ends, however it ends.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::filesystem::path& parent) {
    std::string name = (parent / ".posenc-plot-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::runtime_error("[plot] cannot create a scratch folder in '" + parent.string() +
                               "': " + std::strerror(errno));
    }
    path_ = name;
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `gnuplot figure.gp` in `folder`: an argument vector, no shell, so no file name or title is
// ever read as a command. Throws with gnuplot's messages when it cannot start or fails.
void RunGnuplot(const std::filesystem::path& folder) {
  const std::string messages_path = (folder / "messages.txt").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, folder.c_str());
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "messages.txt",
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  char program[] = "gnuplot", script[] = "figure.gp";
  char* argv[] = {program, script, nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, program, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw std::runtime_error(std::string("[plot] cannot start gnuplot (") + std::strerror(spawned) +
                             "); scripts/setup.sh installs it (Debian: gnuplot-nox)");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string messages;
    try {
      messages = ReadFileCapped("plot", messages_path, 1 << 20);
    } catch (const std::exception& e) {
      messages = std::string("(its messages could not be read: ") + e.what() + ")";
    }
    throw std::runtime_error(
        "[plot] gnuplot failed (is gnuplot installed? scripts/setup.sh "
        "installs it):\n" +
        messages);
  }
}

}  // namespace

std::string GnuplotString(std::string_view text) {
  // In single quotes gnuplot expands nothing (no backslash escapes, no `command`, no @macros);
  // the only special character is the quote itself, written twice. A line break would end the
  // command, so control characters are shown as '?'.
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "''";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      quoted += '?';
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

void Render(const Figure& figure, const std::filesystem::path& dir) {
  // gnuplot writes fixed names in a scratch folder; the files are then renamed into place, so a
  // failed render leaves earlier figures of the same name untouched.
  const ScratchFolder scratch(dir.empty() ? "." : dir);
  WriteFileAtomically("plot", (scratch.path() / "figure.gp").string(), Script(figure, "figure"));
  RunGnuplot(scratch.path());
  for (const char* extension : {".png", ".svg"}) {
    std::filesystem::rename(scratch.path() / (std::string("figure") + extension),
                            dir / (figure.file_stem + extension));
  }
  WriteFileAtomically("plot", (dir / (figure.file_stem + ".gp")).string(),
                      Script(figure, figure.file_stem));
}

}  // namespace posenc::plot
