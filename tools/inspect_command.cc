// posenc inspect: what a Hugging Face config.json does to positions. For RoPE: the rule, the
// dimensions, every pair's frequency and wavelength before and after scaling against the original
// context, the attention factor, cos and sin at chosen positions, and a wavelength chart.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <sstream>

#include "commands.h"
#include "model_rope.h"
#include "models/model_report_json.h"
#include "plot/plot.h"
#include "posenc/alibi.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/model_report.h"
#include "posenc/positions.h"
#include "printable.h"
#include "rope_report.h"

namespace posenc::cli {
namespace {

using Json = nlohmann::json;

// "0-28" style ranges of the pairs in one class.
std::string Ranges(const std::vector<PairRow>& rows, PairClass c) {
  std::string out;
  size_t count = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].treatment != c || (i > 0 && rows[i - 1].treatment == c)) continue;
    size_t end = i;
    while (end + 1 < rows.size() && rows[end + 1].treatment == c) ++end;
    count += end - i + 1;
    out +=
        (out.empty() ? "" : ", ") + std::to_string(i) + (end > i ? "-" + std::to_string(end) : "");
  }
  return std::to_string(count) + (out.empty() ? "" : " (pairs " + out + ")");
}

void RenderChart(const std::filesystem::path& path, const std::vector<PairRow>& rows,
                 std::optional<int64_t> context, const std::string& title) {
  std::string data;
  char line[96];
  for (size_t i = 0; i < rows.size(); ++i) {
    // gnuplot skips NaN: unrotated pairs have no wavelength.
    auto shown = [](double v) { return std::isfinite(v) ? v : std::nan(""); };
    std::snprintf(line, sizeof line, "%zu %.9g %.9g\n", i, shown(rows[i].original_wavelength),
                  shown(rows[i].wavelength));
    data += line;
  }
  std::string script = "set title " + plot::GnuplotString(title) +
                       " noenhanced\n"
                       "set xlabel 'pair i'\nset ylabel 'wavelength (positions)'\n"
                       "set logscale y\nset format y '10^{%L}'\nset key top left\n"
                       "set xrange [0:" +
                       std::to_string(rows.size() - 1) + "]\n";
  if (context) {
    script += "set arrow from graph 0, first " + std::to_string(*context) + " to graph 1, first " +
              std::to_string(*context) +
              " nohead dt 2 lc rgb '#444444'\nset label 'original context " +
              std::to_string(*context) + "' at graph 0.02, first " + std::to_string(*context) +
              " offset 0,0.7 tc rgb '#444444'\n";
  }
  script +=
      "plot $wavelengths using 1:2 with linespoints ls 1 pt 7 ps 0.5 title 'before scaling', "
      "\\\n     $wavelengths using 1:3 with linespoints ls 2 pt 7 ps 0.5 title 'after scaling'";
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::filesystem::create_directories(dir);
  plot::Render({.file_stem = path.stem().string(),
                .caption = title,
                .data = {{"wavelengths", data}},
                .script = script},
               dir);
}

std::string Number(const Json& value) {
  if (value.is_null()) return "-";
  std::ostringstream s;
  s.precision(10);
  s << value.get<double>();
  return s.str();
}

// dual_chunk_attention_config (docs/DUAL_CHUNK.md): the chunks, where each part rotates the
// query, and what that does to the context.
void PrintDualChunk(const Json& r) {
  const Json& d = r["dual_chunk_attention"];
  const std::string l = d["chunk_length"].dump(), c = d["chunk_size"].dump();
  std::cout << "dual chunk    chunk_size " << c << ", local_size " << d["local_size"]
            << ", original_max_position_embeddings " << d["original_max_position_embeddings"]
            << " (dual chunk attention, as vLLM serves it)\n"
            << "              chunks of " << l << " positions: keys rotate at pos mod " << l
            << "; queries at pos mod " << l << " for keys in their chunk, min(pos mod " << l
            << " + " << l << ", " << c << ") for the chunk before, " << d["inter_query_position"]
            << " for earlier chunks\n"
            << "              no scored distance exceeds " << c << " at any length";
  if (!r["max_position_embeddings"].is_null()) {
    std::cout << ": max_position_embeddings " << Number(r["max_position_embeddings"])
              << " is reached by chunking, not by RoPE scaling";
  }
  std::cout << "\n";
  if (d["original_max_position_embeddings"] != 0) {
    std::cout << "              logits x f^2, f = max(1, 0.1 ln(n / "
              << d["original_max_position_embeddings"] << ") + 1) for n tokens";
    if (!d["length_scaling_at_max_position_embeddings"].is_null()) {
      std::cout << ": f = " << Number(d["length_scaling_at_max_position_embeddings"]) << " at "
                << Number(r["max_position_embeddings"]);
    }
    std::cout << "\n";
  }
}

void PrintRope(const Json& r, const std::vector<PairRow>& rows,
               const std::vector<std::string>& vision_lines) {
  std::cout << "scheme        RoPE ("
            << (r["model_type"] == "" ? "model_type not given"
                                      : Printable(r["model_type"].get<std::string>()))
            << "), " << r["layout"].get<std::string>() << " pairs, " << r["num_attention_heads"]
            << " heads (" << r["num_key_value_heads"] << " kv)\n";
  if (r["layer_types"].size() > 1) {
    std::cout << "layer types   " << Printable(r["layer_types"].dump()) << "; showing "
              << Printable(r["layer_type"].get<std::string>());
    if (!r["layer"].is_null()) std::cout << " (layer " << r["layer"] << ")";
    std::cout << "\n";
  } else if (!r["layer"].is_null()) {
    std::cout << "showing       layer " << r["layer"] << "\n";
  }
  std::cout << "rope_type     " << r["rope_type"].get<std::string>() << "   theta "
            << Number(r["rope_theta"]) << "   head_dim " << r["head_dim"] << "   rotary_dim "
            << r["rotary_dim"] << "\n"
            << "precision     " << r["precision"].get<std::string>() << "   seq_len "
            << (r["seq_len"].is_null() ? "- (construction time)" : r["seq_len"].dump()) << "\n"
            << "context       original " << Number(r["original_context"])
            << "   max_position_embeddings " << Number(r["max_position_embeddings"]) << "\n"
            << (r["yarn_rules"].is_null()
                    ? ""
                    : "yarn          rules " + r["yarn_rules"].get<std::string>() +
                          " (--yarn-rules: transformers5, transformers4_50, transformers4_51)\n")
            << "attention     factor " << Number(r["attention_factor"])
            << " (multiplies cos and sin, so logits gain its square)\n";
  const int64_t head_dim = r["head_dim"], rotary_dim = r["rotary_dim"], offset = r["rotary_offset"];
  if (offset > 0 || rotary_dim < head_dim) {
    // DeepSeek MLA: 192 = 128 unrotated + 64 rotated; ChatGLM: 128 = 64 rotated + 64 unrotated.
    std::cout << "rotary        features [" << offset << ", " << offset + rotary_dim
              << ") rotate: head_dim " << head_dim << " =";
    const char* plus = "";
    if (offset > 0) std::cout << " " << offset << " unrotated", plus = " +";
    std::cout << plus << " " << rotary_dim << " rotated";
    if (head_dim - offset - rotary_dim > 0) {
      std::cout << " + " << head_dim - offset - rotary_dim << " unrotated";
    }
    std::cout << "\n";
  }
  if (!r["mrope"].is_null()) {
    // "sections [16, 24, 24] in blocks: pairs 0-15 time, 16-39 height, 40-63 width"
    std::cout << "mrope         " << Printable(r["mrope"]["pairs"].get<std::string>()) << "\n"
              << "              text tokens (equal streams) rotate as this 1-D RoPE; image and "
                 "video tokens need 3-D positions (time, height, width)\n";
  }
  for (size_t i = 0; i < vision_lines.size(); ++i) {
    std::cout << (i == 0 ? "vision        " : "              ") << Printable(vision_lines[i])
              << "\n";
  }
  if (r.contains("softmax_scale_multiplier")) {
    std::cout << "softmax       DeepSeek multiplies the softmax scale by "
              << Number(r["softmax_scale_multiplier"]) << " (g(s, mscale_all_dim)^2)";
    if (r.contains("softmax_scale")) std::cout << ": " << Number(r["softmax_scale"]);
    std::cout << "\n";
  }
  if (r.contains("dual_chunk_attention")) PrintDualChunk(r);
  for (PairClass c : {PairClass::kExtrapolated, PairClass::kBlended, PairClass::kInterpolated,
                      PairClass::kUnrotated}) {
    std::printf("%-13s %s\n", Name(c), Ranges(rows, c).c_str());
  }
  std::printf("\n%5s  %-14s %-14s %-14s %-9s %s\n", "pair", "inv_freq", "wavelength", "before",
              "ratio", "class");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("%5zu  %-14.8g %-14.8g %-14.8g %-9.5g %s\n", i, rows[i].inv_freq,
                rows[i].wavelength, rows[i].original_wavelength, rows[i].ratio,
                Name(rows[i].treatment));
  }
  if (r.contains("positions")) {
    std::cout << "\ncos and sin (attention factor not applied)\n";
    for (size_t p = 0; p < r["positions"].size(); ++p) {
      std::cout << "pos " << r["positions"][p] << "\n";
      for (size_t i = 0; i < r["cos"][p].size(); ++i) {
        std::printf("  pair %3zu  cos % .17g  sin % .17g\n", i, r["cos"][p][i].get<double>(),
                    r["sin"][p][i].get<double>());
      }
    }
  }
  for (const auto& note : r["notes"]) {
    std::cout << "note: " << Printable(note.get<std::string>()) << "\n";
  }
  if (r.contains("chart"))
    std::cout << "chart: " << Printable(r["chart"].get<std::string>()) << "\n";
}

// The run-length per-layer view, after the model-level report.
void PrintLayers(const ModelPositions& model) {
  const std::vector<std::string> lines = LayerSummary(model);
  if (lines.empty()) {
    std::cout << "layers        not given (the config has no layer count)\n";
    return;
  }
  std::cout << "\nper layer\n";
  for (const std::string& line : lines) std::cout << "  " << Printable(line) << "\n";
}

// The chart is written as <folder>/<stem>.png beside .svg and .gp: the name must say so.
void ValidateChartPath(const std::string& chart) {
  const std::filesystem::path path = chart;
  Require(path.extension() == ".png" && !path.stem().empty(), "inspect", "--chart",
          "name a .png file (the .svg and .gp are written beside it)", "'" + chart + "'");
  std::error_code ignored;
  Require(!std::filesystem::is_directory(path, ignored), "inspect", "--chart",
          "name a file, not a folder", "'" + chart + "'");
}

// Only RoPE has wavelengths to draw; a chart asked for elsewhere is an error, not silence.
void RequireNoChart(const std::optional<std::string>& chart, const std::string& scheme) {
  Require(!chart, "inspect", "--chart",
          "be left out for this config (only RoPE configs have "
          "wavelengths to draw)",
          "a config whose scheme is " + scheme);
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  struct Options {
    ModelRopeOptions model;
    bool json = false;
    std::optional<std::string> chart;
  };
  auto options = std::make_shared<Options>();
  CLI::App* inspect =
      app.add_subcommand("inspect", "Show what a Hugging Face config.json does to positions");
  inspect->footer(
      "Prints the scheme; for RoPE the rope type, head_dim, rotary_dim, every pair's inverse "
      "frequency and wavelength before and after scaling against the original context "
      "(extrapolated: frequency kept; interpolated: divided by the rule's full factor; blended: "
      "in between), the attention factor, DeepSeek's softmax multiplier, Qwen2.5-1M's dual "
      "chunk attention (chunks, query positions, length scaling), cos and sin at "
      "--positions, and a wavelength chart (--chart). Then each layer, run-length coded where "
      "layers differ: RoPE (theta, rope type) or NoPE, sliding window, chunked attention, query "
      "scale, bidirectional attention. Also: rotary_offset (DeepSeek: head_dim 192 = 128 "
      "unrotated + 64 rotated), M-RoPE sections (which pairs turn by time, height and width), "
      "the vision tower's 2-D RoPE (Qwen-VL, Pixtral, Llama 4: which pairs turn by row and by "
      "column), T5 relative-bias buckets, OPT's table offset, and the defaults the config left to "
      "its class (notes).");
  options->model.AddTo(inspect, "default: none (the frequencies the model is built with)");
  inspect->add_flag("--json", options->json,
                    "Print one JSON object: scheme, rope_type, head_dim, rotary_dim, "
                    "rotary_offset, mrope_section, mrope (sections, layout, pair_stream, "
                    "pairs), vision_rope (kind, head_dim, theta, patch grid, pair_stream, "
                    "inv_freq, pairs), inv_freq (full double precision), "
                    "attention_factor, wavelength, pair_class, dual_chunk_attention (chunk_size, "
                    "local_size, original_max_position_embeddings, chunk_length, "
                    "inter_query_position, largest_scored_distance, "
                    "length_scaling_at_max_position_embeddings), layers (index, scheme, "
                    "layer_type, rope_theta, rope_type, sliding_window, attention_chunk_size, "
                    "query_scale, causal, symmetric_window), ...; with "
                    "--positions also positions, cos and sin [position][pair] (attention factor "
                    "not applied)");
  inspect->add_option("--chart", options->chart,
                      "Draw wavelength per pair before and after scaling with gnuplot into this "
                      "PNG file (an SVG and the gnuplot script are written beside it)");
  inspect->callback([options] {
    if (options->chart) ValidateChartPath(*options->chart);
    const ModelPositions model = LoadModelPositions(options->model.config);
    Json out;
    if (std::holds_alternative<RopeScheme>(model.scheme)) {
      RopeReport report = InspectRope(model, options->model);
      if (options->chart) {
        RenderChart(*options->chart, report.rows, report.original_context, report.title);
        report.json["chart"] = *options->chart;
      }
      if (!options->json) {
        PrintRope(report.json, report.rows, report.vision_lines);
        PrintLayers(model);
        return;
      }
      out = std::move(report.json);
    } else {
      out = ModelPositionsObject(model);
      RequireNoChart(options->chart, out["scheme"].get<std::string>());
      Require(options->model.layer.empty(), "inspect", "--layer",
              "be left out for this config (only RoPE configs have layers to choose from)",
              options->model.layer);
      if (const auto* alibi = std::get_if<AlibiScheme>(&model.scheme)) {
        out["slopes"] =
            AlibiSlopes(Alibi{.num_heads = alibi->num_heads, .max_bias = alibi->max_bias});
      }
    }
    if (options->json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    for (const auto& [key, value] : out.items()) {
      if (key == "layers" || key == "notes" || (key == "config_prefix" && value == "")) continue;
      std::cout << key << ": "
                << Printable(value.is_string() ? value.get<std::string>() : value.dump());
      if (key == "offset" && value.get<int64_t>() > 0) {
        std::cout << " (row of position 0: the table has max_positions + " << value.dump()
                  << " rows)";
      } else if (key == "bidirectional") {
        std::cout << " (the encoder's " << out["encoder_layers"].dump() << " layers; the decoder's "
                  << out["decoder_layers"].dump()
                  << " are causal, keys after the query in bucket 0)";
      } else if (key == "bias_in_every_layer" && !value.get<bool>()) {
        std::cout << " (the first layer of each stack holds the table; the others reuse it)";
      }
      std::cout << "\n";
    }
    for (const auto& note : out["notes"]) {
      std::cout << "note: " << Printable(note.get<std::string>()) << "\n";
    }
    PrintLayers(model);
  });
}

}  // namespace posenc::cli
