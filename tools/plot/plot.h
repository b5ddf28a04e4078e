// Figures drawn by gnuplot, for the lesson, `posenc inspect` and the study: each figure is a
// gnuplot script body plus inline data blocks, rendered twice, to PNG (pngcairo) and to SVG, so
// the HTML report and a reader of the PNGs see the same picture.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace posenc::plot {

// A named inline data block ($name << EOD ... EOD) for the script.
struct DataBlock {
  std::string name;  // without the '$'
  std::string rows;  // whitespace-separated columns, one row per line; blank lines allowed
};

struct Figure {
  std::string file_stem;  // e.g. "sinusoidal_heatmap": writes .png and .svg
  std::string caption;
  int width = 900;
  int height = 500;
  std::vector<DataBlock> data;
  std::string script;  // gnuplot commands after the terminal is set
};

// Renders the figure into dir/file_stem.{png,svg} and keeps the script as dir/file_stem.gp, so a
// reader can restyle or re-run it. gnuplot is started without a shell and writes into a scratch
// folder; the files are renamed into place only when it succeeds. Throws std::runtime_error with
// gnuplot's message when gnuplot is missing or fails.
void Render(const Figure& figure, const std::filesystem::path& dir);

// text as a gnuplot string literal that gnuplot reads back as data, never as commands: every
// title, label or file name that comes from outside (a config's model_type, a path) goes
// through it. Control characters, which gnuplot strings cannot hold, become '?'.
std::string GnuplotString(std::string_view text);

}  // namespace posenc::plot
