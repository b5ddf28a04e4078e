#include "serve/explorer_api.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "lesson/order_experiment.h"
#include "lesson/report.h"
#include "models/model_report_json.h"
#include "posenc/alibi.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/model_positions.h"
#include "posenc/model_report.h"
#include "posenc/rope.h"
#include "posenc/sinusoidal.h"
#include "rope_report.h"
#include "serve/embedded_files.h"
#include "serve/text.h"

namespace posenc::serve {
namespace {

using nlohmann::json;

constexpr std::string_view kFn = "serve";

// The query parameters of one request, read by name and type; Finish() refuses the ones no
// endpoint reads, so that a misspelt control is an error rather than a silent default.
class Params {
 public:
  explicit Params(const Query& query) : query_(query) {}

  int64_t Int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) {
    const std::string* text = Take(name);
    if (text == nullptr) return fallback;
    return ParseInt(name, *text, lo, hi);
  }

  double Real(const std::string& name, double fallback, double lo, double hi) {
    const std::string* text = Take(name);
    if (text == nullptr) return fallback;
    double value = 0.0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    const bool ok = error == std::errc() && end == text->data() + text->size() &&
                    std::isfinite(value) && value >= lo && value <= hi;
    Require(ok, kFn, name, Range("a number", lo, hi), Quoted(*text));
    return value;
  }

  // A comma-separated list of integers in [lo, hi], at most `most` of them.
  std::vector<int64_t> IntList(const std::string& name, std::vector<int64_t> fallback, int64_t lo,
                               int64_t hi, size_t most) {
    const std::string* text = Take(name);
    if (text == nullptr) return fallback;
    std::vector<int64_t> values;
    size_t begin = 0;
    while (begin <= text->size()) {
      const size_t end = std::min(text->find(',', begin), text->size());
      values.push_back(ParseInt(name, text->substr(begin, end - begin), lo, hi));
      Require(values.size() <= most, kFn, name, "hold at most " + std::to_string(most) + " values",
              Quoted(*text));
      begin = end + 1;
    }
    return values;
  }

  // A value from a fixed set of words.
  std::string Word(const std::string& name, const std::string& fallback,
                   const std::vector<std::string>& words) {
    const std::string* text = Take(name);
    if (text == nullptr) return fallback;
    std::string rule = "be one of";
    for (const std::string& w : words) rule += (w == words.front() ? " " : ", ") + w;
    Require(std::find(words.begin(), words.end(), *text) != words.end(), kFn, name, rule,
            Quoted(*text));
    return *text;
  }

  // Free text (a layer type or index), at most 64 characters.
  std::optional<std::string> Text(const std::string& name) {
    const std::string* text = Take(name);
    if (text == nullptr) return std::nullopt;
    Require(text->size() <= 64, kFn, name, "be at most 64 characters", Quoted(*text));
    return *text;
  }

  bool Has(const std::string& name) const { return query_.count(name) > 0; }

  void Finish() const {
    for (const auto& [name, value] : query_) {
      Require(read_.count(name) > 0, kFn, "query", "name only parameters of this endpoint",
              Quoted(name));
    }
  }

 private:
  const std::string* Take(const std::string& name) {
    read_.insert(name);
    const auto found = query_.find(name);
    return found == query_.end() ? nullptr : &found->second;
  }

  template <typename T>
  static std::string Range(std::string_view what, T lo, T hi) {
    std::ostringstream out;
    out << "be " << what << " in [" << lo << ", " << hi << "]";
    return out.str();
  }

  static int64_t ParseInt(const std::string& name, std::string_view text, int64_t lo, int64_t hi) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    const bool ok = !text.empty() && error == std::errc() && end == text.data() + text.size() &&
                    value >= lo && value <= hi;
    Require(ok, kFn, name, Range("an integer", lo, hi), Quoted(text));
    return value;
  }

  const Query& query_;
  std::set<std::string> read_;
};

// What the page needs to label a heatmap of `rows` x `columns` cells (cell k of an axis shows
// value k): each axis's title and tick values, and the colour scale: what a colour means, its
// range and round values within it, and what a masked (null) cell is, if any.
struct HeatmapScale {
  std::string x_title, y_title, colour_title;
  std::optional<std::string> masked;
};

// Ticks of an axis of `cells` cells: the multiples of the smallest round step (1, 2, 4, 5, 8,
// 10, 16, ...) that leaves at most 9 of them.
std::vector<int64_t> AxisTicks(int64_t cells) {
  static constexpr int64_t kSteps[] = {1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128};
  int64_t step = kSteps[std::size(kSteps) - 1];
  for (const int64_t s : kSteps) {
    if ((cells - 1) / s + 1 <= 9) {
      step = s;
      break;
    }
  }
  std::vector<int64_t> ticks;
  for (int64_t k = 0; k < cells; k += step) ticks.push_back(k);
  return ticks;
}

// Round values in [lo, hi]: the multiples of 1, 2, 2.5 or 5 x 10^e nearest a quarter of the
// range (just lo when the range is one value).
std::vector<double> ColourTicks(double lo, double hi) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 4;
  const double unit = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / unit;
  const double step = unit * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10);
  std::vector<double> ticks;
  const double first = std::ceil(lo / step);
  for (int i = 0; (first + i) * step <= hi; ++i) {
    const double k = first + i;
    // Rounded to 12 significant digits, so that 3 x 0.1 reads 0.3; "+ 0.0" turns -0 into 0.
    std::ostringstream text;
    text.precision(12);
    text << k * step;
    ticks.push_back(std::stod(text.str()) + 0.0);
  }
  return ticks;
}

// The heatmap description of a matrix (nullopt: a masked cell).
json Heatmap(const std::vector<std::vector<std::optional<double>>>& cells,
             const HeatmapScale& scale) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& row : cells) {
    for (const std::optional<double>& v : row) {
      if (v) lo = std::min(lo, *v), hi = std::max(hi, *v);
    }
  }
  const int64_t rows = static_cast<int64_t>(cells.size());
  const int64_t columns = rows > 0 ? static_cast<int64_t>(cells.front().size()) : 0;
  return {{"x", {{"title", scale.x_title}, {"cells", columns}, {"ticks", AxisTicks(columns)}}},
          {"y", {{"title", scale.y_title}, {"cells", rows}, {"ticks", AxisTicks(rows)}}},
          {"colour",
           {{"title", scale.colour_title},
            {"min", lo + 0.0},
            {"max", hi + 0.0},
            {"ticks", ColourTicks(lo, hi)},
            {"masked", scale.masked ? json(*scale.masked) : json(nullptr)}}}};
}

// Waves ("Try it now"): each pair of a d-wide sinusoidal table is a clock hand turning at
// base^(-2i/d) radians per position; the page shows the hands at one position and the waves of a
// few columns across positions.
json Waves(Params& p) {
  const Sinusoidal spec{.dim = p.Int("d", 64, 2, 1024),
                        .base = p.Real("base", 10000.0, 1.0001, 1e9)};
  Require(spec.dim % 2 == 0, kFn, "d", "be even (sin and cos pairs)", spec.dim);
  const int64_t position = p.Int("position", 0, 0, 100000);
  const int64_t span = p.Int("span", 100, 1, 100000);
  const int64_t samples = p.Int("samples", 201, 2, 1001);
  // By default columns 0, 2, 4 and 6, those of them that the table has (d = 4: 0 and 2).
  std::vector<int64_t> default_columns;
  for (int64_t c = 0; c <= 6 && c < spec.dim; c += 2) default_columns.push_back(c);
  const std::vector<int64_t> columns = p.IntList("columns", default_columns, 0, spec.dim - 1, 8);
  p.Finish();
  json pairs = json::array();
  for (int64_t i = 0; i < spec.dim / 2; ++i) {
    const double frequency = spec.Frequency(2 * i);
    const CosSin hand = RopeAngle(position, frequency);
    pairs.push_back({{"pair", i},
                     {"frequency", frequency},
                     {"wavelength", spec.Wavelength(2 * i)},
                     {"angle", std::atan2(hand.sin, hand.cos)},
                     {"sin", hand.sin},
                     {"cos", hand.cos}});
  }
  // Integer positions from `position` over `span`, at most `samples` of them.
  const int64_t step = std::max<int64_t>(1, (span + samples - 2) / (samples - 1));
  std::vector<int64_t> xs;
  for (int64_t x = position; x <= position + span; x += step) xs.push_back(x);
  json curves = json::array();
  for (const int64_t column : columns) {
    std::vector<double> values;
    values.reserve(xs.size());
    for (const int64_t x : xs) values.push_back(SinusoidalValue(spec, x, column));
    curves.push_back({{"column", column}, {"values", values}});
  }
  return {{"d", spec.dim},  {"base", spec.base}, {"position", position},
          {"pairs", pairs}, {"positions", xs},   {"curves", curves}};
}

// Similarity: the table itself and the dot product of one position's row with every row, which
// depends only on the distance (the lesson's 64 x 32 example: 20's neighbours come first).
json Similarity(Params& p) {
  const int64_t tokens = p.Int("positions", 64, 2, 512);
  const Sinusoidal spec{.dim = p.Int("d", 32, 2, 256),
                        .base = p.Real("base", 10000.0, 1.0001, 1e9)};
  Require(spec.dim % 2 == 0, kFn, "d", "be even (sin and cos pairs)", spec.dim);
  const int64_t query = p.Int("query", std::min<int64_t>(20, tokens - 1), 0, tokens - 1);
  p.Finish();
  std::vector<float> table(static_cast<size_t>(tokens * spec.dim));
  FillSinusoidalTable(spec, tokens, table);
  json rows = json::array();
  std::vector<std::vector<std::optional<double>>> cells;
  for (int64_t t = 0; t < tokens; ++t) {
    rows.push_back(
        std::vector<float>(table.begin() + t * spec.dim, table.begin() + (t + 1) * spec.dim));
    cells.emplace_back(table.begin() + t * spec.dim, table.begin() + (t + 1) * spec.dim);
  }
  std::vector<double> dots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < spec.dim; ++j) {
      dots[t] += SinusoidalValue(spec, query, j) * SinusoidalValue(spec, t, j);
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(tokens));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return dots[a] > dots[b]; });
  order.resize(std::min<size_t>(order.size(), 10));
  const json heatmap = Heatmap(cells, {.x_title = "column j of the table",
                                       .y_title = "position t",
                                       .colour_title = "PE(t, j): sin for even j, cos for odd j"});
  return {{"positions", tokens}, {"d", spec.dim},         {"query", query},    {"table", rows},
          {"dots", dots},        {"most_similar", order}, {"heatmap", heatmap}};
}

// RoPE: one pair's 2-D arrow turned by position x theta, and the score of a fixed q and k
// against their distance: it depends only on m - n, so (5, 2), (105, 102) and (1005, 1002) score
// alike.
json RopeScores(Params& p) {
  const int64_t d = p.Int("d", 64, 2, 1024);
  const double base = p.Real("base", 10000.0, 1.0001, 1e9);
  Require(d % 2 == 0, kFn, "d", "be even (pairs of features)", d);
  const int64_t position = p.Int("position", 5, 0, 1000000);
  const int64_t pair = p.Int("pair", 0, 0, d / 2 - 1);
  const int64_t reach = p.Int("distance", 32, 1, 1024);
  const std::vector<int64_t> m = p.IntList("m", {5, 105, 1005}, 0, 1000000, 16);
  const std::vector<int64_t> n = p.IntList("n", {2, 102, 1002}, 0, 1000000, 16);
  // The arrow: pair `pair` of a vector pointing at `start` radians, turned by RoPE at `position`
  // (the library's rotation of a head whose other pairs are zero).
  const double start = p.Real("start", 0.0, -4.0, 4.0);
  p.Finish();
  Require(m.size() == n.size(), kFn, "n",
          "hold as many positions as m (" + std::to_string(m.size()) + ")", n.size());
  const Rope rope = Rope::Default(d, base);
  std::vector<double> hand(d, 0.0);
  hand[pair] = std::cos(start);  // half-split: pair i is features (i, i + d/2)
  hand[pair + d / 2] = std::sin(start);
  const int64_t hand_pos[] = {position};
  ApplyRope(rope, hand_pos, Heads<double>::Dense(hand.data(), 1, 1, d));
  const double arrow_x = hand[pair], arrow_y = hand[pair + d / 2];

  // A fixed q and k (the same for every request), so that only positions move the score.
  std::vector<double> q(d), k(d);
  for (int64_t j = 0; j < d; ++j) {
    q[j] = std::cos(0.37 * j + 0.1);
    k[j] = std::sin(0.61 * j + 0.4);
  }
  const auto score = [&](int64_t qm, int64_t kn) {
    std::vector<double> qr(q), kr(k);
    const int64_t qpos[] = {qm}, kpos[] = {kn};
    ApplyRope(rope, qpos, Heads<double>::Dense(qr.data(), 1, 1, d));
    ApplyRope(rope, kpos, Heads<double>::Dense(kr.data(), 1, 1, d));
    return std::inner_product(qr.begin(), qr.end(), kr.begin(), 0.0);
  };
  std::vector<int64_t> distances;
  std::vector<double> scores;
  const int64_t anchor = reach;  // keys at `anchor`, queries at anchor + distance >= 0
  for (int64_t delta = -reach; delta <= reach; ++delta) {
    distances.push_back(delta);
    scores.push_back(score(anchor + delta, anchor));
  }
  json pairs = json::array();
  for (size_t i = 0; i < m.size(); ++i) {
    pairs.push_back({{"m", m[i]}, {"n", n[i]}, {"score", score(m[i], n[i])}});
  }
  return {{"d", d},
          {"base", base},
          {"position", position},
          {"pair", pair},
          {"theta", rope.inv_freq[pair]},
          {"start", {{"angle", start}, {"x", std::cos(start)}, {"y", std::sin(start)}}},
          {"arrow", {{"angle", std::atan2(arrow_y, arrow_x)}, {"x", arrow_x}, {"y", arrow_y}}},
          {"distances", distances},
          {"scores", scores},
          {"pairs", pairs}};
}

// The bundled configs' names ("llama3.1-8b", ...), from the embedded files.
std::vector<std::string> BundledConfigs() {
  std::vector<std::string> names;
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    constexpr std::string_view kPrefix = "configs/", kSuffix = ".json";
    if (file.name.starts_with(kPrefix)) {
      names.emplace_back(
          file.name.substr(kPrefix.size(), file.name.size() - kPrefix.size() - kSuffix.size()));
    }
  }
  return names;
}

// A Llama-shaped config whose only scaling is the rule and factor asked for: what the panel's
// sliders stretch.
struct Synthetic {
  std::string config;                // config.json text
  std::optional<int64_t> stretched;  // dynamic NTK: the length to show it at (factor x original)
};

Synthetic SyntheticConfig(Params& p) {
  const std::string rule =
      p.Word("rope_type", "yarn", {"default", "linear", "dynamic", "yarn", "llama3"});
  const double factor = p.Real("factor", 4.0, 1.0, 64.0);
  const int64_t original = p.Int("original", 4096, 128, 1 << 20);
  const int64_t head_dim = p.Int("head_dim", 128, 8, 256);
  Require(head_dim % 2 == 0, kFn, "head_dim", "be even (pairs of features)", head_dim);
  const double base = p.Real("base", 500000.0, 1.0001, 1e9);
  json config{{"model_type", "llama"},    {"hidden_size", head_dim * 8},
              {"num_attention_heads", 8}, {"head_dim", head_dim},
              {"rope_theta", base},       {"max_position_embeddings", original}};
  if (rule != "default") {
    json scaling{{"rope_type", rule}, {"factor", factor}};
    if (rule == "yarn" || rule == "llama3") {
      scaling["original_max_position_embeddings"] = original;
      config["max_position_embeddings"] = static_cast<int64_t>(std::llround(original * factor));
    }
    if (rule == "llama3") {
      scaling["low_freq_factor"] = 1.0;
      scaling["high_freq_factor"] = 4.0;
    }
    config["rope_scaling"] = scaling;
  }
  std::optional<int64_t> stretched;
  if (rule == "dynamic") stretched = std::llround(original * factor);
  return {config.dump(), stretched};
}

// Stretching: what a config's rope type does to each pair (kept, blended or interpolated), the
// attention factor and the layers, as `posenc inspect` tells it. The config is the request's
// body (uploaded or pasted), a bundled one (`config`), or a synthetic Llama (`rope_type`,
// `factor`, `original`, `head_dim`, `base`).
json Stretch(Params& p, std::optional<std::string_view> body) {
  const std::optional<std::string> bundled = p.Text("config");
  const std::optional<std::string> layer = p.Text("layer");
  int64_t seq_len = p.Int("seq_len", 0, 0, int64_t{1} << 40);
  std::string text;
  std::string source;
  if (body) {
    // A POST is an upload: an empty body is an error, not the synthetic model.
    Require(!body->empty(), kFn, "body", "be a config.json (a JSON object)", "an empty body");
    Require(IsUtf8(*body), kFn, "body", "be UTF-8 text (a config.json)",
            "bytes that are not UTF-8");
    Require(!bundled && !p.Has("rope_type"), kFn, "config",
            "come from one place: the body, config= or rope_type=", "more than one");
    text = std::string(*body);
    source = "uploaded";
  } else if (bundled) {
    const std::vector<std::string> names = BundledConfigs();
    std::string known;
    for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
    Require(std::find(names.begin(), names.end(), *bundled) != names.end(), kFn, "config",
            "be a bundled config (" + known + ")", Quoted(*bundled));
    text = std::string(Embedded("configs/" + *bundled + ".json"));
    source = *bundled;
  } else {
    Synthetic synthetic = SyntheticConfig(p);
    text = std::move(synthetic.config);
    source = "synthetic";
    // Dynamic NTK only stretches past its trained length: shown at factor x original unless
    // seq_len says otherwise.
    if (seq_len == 0 && synthetic.stretched) seq_len = *synthetic.stretched;
  }
  p.Finish();
  const ModelPositions model = DescribeModel(text);
  json out;
  if (!std::holds_alternative<RopeScheme>(model.scheme)) {
    out = ModelPositionsObject(model);
  } else {
    cli::ModelRopeOptions options;
    options.layer = layer.value_or("");
    options.error_function = std::string(kFn);  // "[serve] layer must ...", not the CLI's flag
    options.layer_parameter = "layer";
    if (seq_len > 0) options.seq_len = seq_len;
    cli::RopeReport report = cli::InspectRope(model, options);
    out = std::move(report.json);
    out["vision"] = report.vision_lines;
  }
  out["source"] = source;
  out["summary"] = LayerSummary(model);
  out["bundled"] = BundledConfigs();
  return out;
}

// The words of a sentence: letters and apostrophes, 1 to 16 of them, comma-separated.
std::vector<std::string> Words(Params& p) {
  const std::optional<std::string> text = p.Text("tokens");
  const std::string list = text.value_or("the,cat,sat,on,the,mat");
  std::vector<std::string> words;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string word = list.substr(begin, end - begin);
    const bool ok =
        !word.empty() && word.size() <= 16 && std::all_of(word.begin(), word.end(), [](char c) {
          return std::isalpha(static_cast<unsigned char>(c)) || c == '\'';
        });
    Require(ok, kFn, "tokens", "be words of 1 to 16 letters, comma-separated", Quoted(word));
    words.push_back(word);
    begin = end + 1;
  }
  Require(static_cast<int64_t>(words.size()) <= lesson::kOrderMaxTokens, kFn, "tokens",
          "hold at most " + std::to_string(lesson::kOrderMaxTokens) + " words", words.size());
  return words;
}

// A word's vector: the same word gets the same vector wherever it stands (FNV-1a of its
// lowercase letters seeds the demo's normal numbers).
std::vector<float> WordVector(const std::string& word) {
  uint64_t hash = 1469598103934665603ull;
  for (const char c : word) {
    hash = (hash ^ static_cast<unsigned char>(std::tolower(static_cast<unsigned char>(c)))) *
           1099511628211ull;
  }
  return lesson::RandomNormal(1, lesson::kOrderWidth, hash);
}

// Order: a sentence and a shuffle of it through one attention layer, with positions entering
// by each scheme. Without positions the outputs only move with their tokens; with any scheme
// (or a causal mask) they change.
json Order(Params& p) {
  const std::vector<std::string> words = Words(p);
  const int64_t n = static_cast<int64_t>(words.size());
  std::vector<int64_t> reversed(n);
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  const std::vector<int64_t> permutation = p.IntList("order", reversed, 0, n - 1, n);
  p.Finish();
  Require(static_cast<int64_t>(permutation.size()) == n, kFn, "order",
          "hold one index per token (" + std::to_string(n) + ")", permutation.size());
  std::vector<float> x;
  for (const std::string& word : words) {
    const std::vector<float> v = WordVector(word);
    x.insert(x.end(), v.begin(), v.end());
  }
  const auto rows = [](const std::vector<float>& flat) {
    json out = json::array();
    for (size_t t = 0; t < flat.size(); t += lesson::kOrderWidth) {
      out.push_back(std::vector<float>(flat.begin() + t, flat.begin() + t + lesson::kOrderWidth));
    }
    return out;
  };
  json schemes = json::array();
  for (const lesson::OrderResult& r : lesson::CompareOrders(x, permutation)) {
    schemes.push_back({{"scheme", r.scheme},
                       {"max_abs_diff", r.max_abs_diff},
                       {"order_blind", r.max_abs_diff < 1e-6},
                       {"attention", rows(r.attention)},
                       {"shuffled", rows(r.shuffled)}});
  }
  std::vector<std::string> shuffled;
  shuffled.reserve(permutation.size());
  for (const int64_t i : permutation) shuffled.push_back(words[i]);
  return {{"tokens", words},
          {"order", permutation},
          {"shuffled_tokens", shuffled},
          {"schemes", schemes}};
}

// Quick checks: every claim of the lesson with what posenc measured, for the page to ask first
// and reveal after. The experiments are deterministic, so they run once per server.
json Checks(Params& p) {
  p.Finish();
  static const json answer = [] {
    json sections = json::array();
    for (const lesson::Section& section : lesson::LessonSections()) {
      json claims = json::array();
      for (const lesson::Check& check : section.checks) {
        claims.push_back({{"claim", check.claim}, {"holds", check.holds}});
      }
      sections.push_back({{"id", section.id},
                          {"title", section.title},
                          {"claims", claims},
                          {"lines", section.lines}});
    }
    return json{{"sections", sections}};
  }();
  return answer;
}

// ALiBi: the slopes of a head count and each head's causal bias -slope (i - j).
json AlibiPanel(Params& p) {
  const Alibi alibi{.num_heads = p.Int("heads", 8, 1, 128),
                    .max_bias = p.Real("max_bias", 8.0, 0.01, 126.0)};
  const int64_t tokens = p.Int("tokens", 12, 1, 64);
  const int64_t head = p.Int("head", 0, 0, alibi.num_heads - 1);  // the one the heatmap shows
  p.Finish();
  const std::vector<double> slopes = AlibiSlopes(alibi);
  json biases = json::array();
  std::vector<std::vector<std::optional<double>>> cells;
  for (size_t h = 0; h < slopes.size(); ++h) {
    json rows = json::array();
    for (int64_t i = 0; i < tokens; ++i) {
      json row = json::array();
      std::vector<std::optional<double>> cell_row;
      for (int64_t j = 0; j < tokens; ++j) {
        // Causal: key j <= i. "+ 0.0" shows the diagonal as 0, not -0.
        const std::optional<double> bias =
            j <= i ? std::optional<double>(AlibiBias(slopes[h], i, j) + 0.0) : std::nullopt;
        row.push_back(bias ? json(*bias) : json(nullptr));
        cell_row.push_back(bias);
      }
      rows.push_back(row);
      if (static_cast<int64_t>(h) == head) cells.push_back(std::move(cell_row));
    }
    biases.push_back(rows);
  }
  const json heatmap = Heatmap(cells, {.x_title = "key position j",
                                       .y_title = "query position i",
                                       .colour_title = "bias added to the score: -slope (i - j)",
                                       .masked = "key after the query (causal mask)"});
  return {{"heads", alibi.num_heads}, {"max_bias", alibi.max_bias},
          {"tokens", tokens},         {"slopes", slopes},
          {"bias", biases},           {"head", head},
          {"heatmap", heatmap}};
}

using Handler = json (*)(Params&);

const std::map<std::string, Handler>& Handlers() {
  static const std::map<std::string, Handler> handlers{
      {"waves", &Waves},      {"similarity", &Similarity}, {"rope", &RopeScores},
      {"alibi", &AlibiPanel}, {"order", &Order},           {"checks", &Checks}};
  return handlers;
}

}  // namespace

const std::vector<std::string>& Endpoints() {
  static const std::vector<std::string> names{"waves",   "similarity", "order", "rope",
                                              "stretch", "alibi",      "checks"};
  return names;
}

nlohmann::json Answer(const std::string& endpoint, const Query& query,
                      std::optional<std::string_view> body) {
  // Every value is text the answer may quote, and JSON strings are UTF-8: checked first.
  for (const auto& [name, value] : query) {
    Require(IsUtf8(name), kFn, "query", "name parameters in UTF-8", Quoted(name));
    const bool plain =
        name.size() <= 40 && std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || c == '_';
        });  // a name that could be a parameter's is named as one; any other is quoted below
    Require(IsUtf8(value), kFn, plain ? name : "query", "be UTF-8 text", Quoted(value));
  }
  Params params(query);
  if (endpoint == "stretch") return Stretch(params, body);
  const auto found = Handlers().find(endpoint);
  Require(found != Handlers().end(), kFn, "endpoint",
          "be one of waves, similarity, order, rope, stretch, alibi, checks", Quoted(endpoint));
  Require(!body || body->empty(), kFn, "body", "be empty (only stretch reads one: a config.json)",
          std::to_string(body ? body->size() : 0) + " bytes");
  return found->second(params);
}

std::string_view Embedded(std::string_view name) {
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    if (file.name == name) return file.bytes;
  }
  Require(false, kFn, "name", "be an embedded file", Quoted(name));
  return {};
}

}  // namespace posenc::serve
