#include "demo/plot.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace posenc::demo {
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

std::string Script(const Figure& figure, const std::string& terminal,
                   const std::filesystem::path& output) {
  std::ostringstream s;
  s << "set terminal " << terminal << " size " << figure.width << "," << figure.height
    << " font 'DejaVu Sans,11'\n";
  s << "set output '" << output.string() << "'\n" << kStyle;
  for (const DataBlock& block : figure.data) {
    s << "$" << block.name << " << EOD\n" << block.rows << "EOD\n";
  }
  s << figure.script << "\nunset output\n";
  return s.str();
}

}  // namespace

void Render(const Figure& figure, const std::filesystem::path& dir) {
  const auto script_path = dir / (figure.file_stem + ".gp");
  {
    std::ofstream out(script_path);
    out << Script(figure, "pngcairo enhanced", dir / (figure.file_stem + ".png"));
    out << Script(figure, "svg enhanced dynamic background rgb 'white'",
                  dir / (figure.file_stem + ".svg"));
  }
  const std::string command = "gnuplot '" + script_path.string() + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("[demo] cannot start gnuplot");
  std::string messages;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) messages += buffer;
  const int status = pclose(pipe);
  if (status != 0) {
    throw std::runtime_error("[demo] gnuplot failed on " + script_path.string() +
                             " (is gnuplot installed? scripts/setup.sh installs it):\n" + messages);
  }
}

}  // namespace posenc::demo
