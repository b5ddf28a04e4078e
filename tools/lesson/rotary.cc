// (g) RoPE: turn q and k by their positions; scores then depend only on the distance.
// (k) Multimodal RoPE: an image's tokens between text, each rotary pair turned by one of three
// position streams.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "lesson/section.h"
#include "posenc/mrope.h"
#include "posenc/mrope_positions.h"
#include "posenc/rope.h"

namespace posenc::lesson {
namespace {

constexpr int64_t kDim = 16;

// q at position m scored against k at position n, both rotated by RoPE.
double Score(const Rope& rope, const std::vector<float>& q, const std::vector<float>& k, int64_t m,
             int64_t n) {
  std::vector<float> qm(kDim), kn(kDim);
  const std::vector<int64_t> pm = {m}, pn = {n};
  ApplyRope(rope, pm, Heads<const float>::Dense(q.data(), 1, 1, kDim),
            Heads<float>::Dense(qm.data(), 1, 1, kDim));
  ApplyRope(rope, pn, Heads<const float>::Dense(k.data(), 1, 1, kDim),
            Heads<float>::Dense(kn.data(), 1, 1, kDim));
  double dot = 0.0;
  for (int64_t d = 0; d < kDim; ++d) dot += double(qm[d]) * kn[d];
  return dot;
}

}  // namespace

Section RotaryEmbedding() {
  Section s{.id = "g", .title = "RoPE: positions as rotations of q and k"};

  // One pair turned by a quarter turn: inv_freq = pi/2 at position 1.
  Rope quarter{.head_dim = 2, .rotary_dim = 2, .inv_freq = {std::numbers::pi / 2}};
  std::vector<float> v = {2.0f, 1.0f}, turned(2);
  ApplyRope(quarter, std::vector<int64_t>{1}, Heads<const float>::Dense(v.data(), 1, 1, 2),
            Heads<float>::Dense(turned.data(), 1, 1, 2));
  const double before = std::hypot(v[0], v[1]), after = std::hypot(turned[0], turned[1]);
  s.lines.push_back("(2, 1) turned a quarter turn: " + FormatVector(turned) +
                    Format("; length %.4f before, %.4f after", before, after));
  s.checks.push_back({"(2, 1) turned a quarter gives (-1, 2)",
                      std::fabs(turned[0] + 1) < 1e-6 && std::fabs(turned[1] - 2) < 1e-6});
  s.checks.push_back(
      {"its length is 2.236 before and after",
       std::fabs(before - std::sqrt(5.0)) < 1e-6 && std::fabs(after - std::sqrt(5.0)) < 1e-6});
  s.numbers["quarter_turn"] = turned;

  const Rope rope = Rope::Default(kDim);
  const auto q = RandomNormal(1, kDim, 21), k = RandomNormal(1, kDim, 22);
  const int64_t pairs[][2] = {{5, 2}, {105, 102}, {1005, 1002}, {1000005, 1000002}, {7, 2}};
  s.lines.push_back("16-wide random q and k; score = rope(q, m) . rope(k, n):");
  for (const auto& [m, n] : pairs) {
    const double score = Score(rope, q, k, m, n);
    s.lines.push_back(Format("  (m, n) = (%lld, %lld), m - n = %lld: %.6f",
                             static_cast<long long>(m), static_cast<long long>(n),
                             static_cast<long long>(m - n), score));
    s.numbers["scores"].push_back({{"m", m}, {"n", n}, {"score", score}});
  }
  const double s52 = Score(rope, q, k, 5, 2);
  const bool equal = std::fabs(Score(rope, q, k, 105, 102) - s52) < 1e-5 &&
                     std::fabs(Score(rope, q, k, 1005, 1002) - s52) < 1e-5;
  s.checks.push_back({"scores at (5, 2), (105, 102) and (1005, 1002) are equal", equal});
  s.checks.push_back({"... and at (1000005, 1000002), a million positions on",
                      std::fabs(Score(rope, q, k, 1000005, 1000002) - s52) < 1e-5});
  s.checks.push_back({"(7, 2) differs", std::fabs(Score(rope, q, k, 7, 2) - s52) > 1e-3});

  std::string rows;
  for (int64_t distance = -40; distance <= 40; ++distance) {
    rows +=
        Format("%lld %.6f %.6f\n", static_cast<long long>(distance),
               Score(rope, q, k, 50 + distance, 50), Score(rope, q, k, 100000 + distance, 100000));
  }
  s.figures.push_back({.file_stem = "rope_score_vs_distance",
                       .caption = "RoPE score against m - n, with k at position 50 and at 100,000: "
                                  "the curves coincide",
                       .data = {{"scores", rows}},
                       .script = R"(set title 'RoPE: the score depends only on m - n'
set xlabel 'm - n'
set ylabel 'rope(q, m) · rope(k, n)'
set key bottom right box opaque
plot $scores using 1:2 with lines ls 1 lw 6 title 'n = 50', \
     $scores using 1:3 with lines ls 2 dt 2 title 'n = 100,000')"});
  return s;
}

namespace {

// q at positions (t, h, w) scored against k at (t', h', w'), both turned by M-RoPE.
double MropeScore(const MRope& mrope, const std::vector<float>& q, const std::vector<float>& k,
                  const int64_t (&pq)[3], const int64_t (&pk)[3]) {
  const int64_t dim = mrope.rope.head_dim;
  std::vector<float> qm(dim), kn(dim);
  ApplyMRope<float>(mrope, PositionStreams::Dense(pq, 3, 1),
                    Heads<const float>::Dense(q.data(), 1, 1, dim),
                    Heads<float>::Dense(qm.data(), 1, 1, dim));
  ApplyMRope<float>(mrope, PositionStreams::Dense(pk, 3, 1),
                    Heads<const float>::Dense(k.data(), 1, 1, dim),
                    Heads<float>::Dense(kn.data(), 1, 1, dim));
  double dot = 0.0;
  for (int64_t d = 0; d < dim; ++d) dot += double(qm[d]) * kn[d];
  return dot;
}

}  // namespace

Section MultimodalRope() {
  Section s{.id = "k", .title = "Multimodal RoPE: an image between text, three position streams"};

  // Qwen2-VL's M-RoPE at a quarter of its size: 16 pairs in blocks of 4 (time), 6 (height) and
  // 6 (width), as [16, 24, 24] splits its 64.
  constexpr int64_t kDim = 32;
  const std::vector<int64_t> sections = {4, 6, 6};
  const MRope mrope = MRope::Sections(Rope::Default(kDim), sections, MropeSections::kBlocks);
  const char* kStream[] = {"time", "height", "width"};

  // A Qwen2-VL prompt: 2 text tokens, <vision start>, an image of 4 x 6 patches merged 2 x 2
  // into 2 x 3 tokens, <vision end>, 2 text tokens; positions by get_rope_index
  // (posenc/mrope_positions.h): text counts on in all three streams, the image's tokens sit at
  // (start, start + row, start + column), and text after it resumes at the largest position + 1.
  constexpr int64_t kRows = 2, kCols = 3, kText = 3, kTokens = kText + kRows * kCols + kText;
  const QwenVlTokens ids{.image_token_id = 151655,
                         .video_token_id = 151656,
                         .vision_start_token_id = 151652,
                         .spatial_merge_size = 2,
                         .tokens_per_second = 0,
                         .rules = MropeIndexRules::kQwen2Vl};
  std::vector<int64_t> input_ids = {9707, 11, ids.vision_start_token_id};
  std::vector<std::string> labels = {"text 1", "text 2", "vision start"};
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      input_ids.push_back(ids.image_token_id);
      labels.push_back("image r" + std::to_string(r) + " c" + std::to_string(c));
    }
  }
  input_ids.insert(input_ids.end(), {151653, 3555, 374});
  labels.insert(labels.end(), {"vision end", "text 3", "text 4"});
  const VisionGrid grid{.t = 1, .h = 2 * kRows, .w = 2 * kCols};
  const std::vector<int64_t> positions =
      QwenVlRopeIndex(ids, input_ids, 1, kTokens, std::span(&grid, 1), {}, {}, {}).positions;
  const int64_t next = kText + std::max(kRows, kCols);  // largest image position + 1
  auto at = [&](int64_t stream, int64_t token) { return positions[stream * kTokens + token]; };

  s.lines.push_back("16 rotary pairs: pairs 0-3 turn by the time position, 4-9 by the height,");
  s.lines.push_back(
      "10-15 by the width (Qwen2-VL's [16, 24, 24] of 64 pairs, a quarter the size).");
  s.lines.push_back(
      "A prompt with an image of 4 x 6 patches, merged 2 x 2 into 2 x 3 tokens "
      "(get_rope_index's positions):");
  s.lines.push_back(Format("  %-13s %5s %7s %6s", "token", "time", "height", "width"));
  for (int64_t token = 0; token < kTokens; ++token) {
    s.lines.push_back(Format(
        "  %-13s %5lld %7lld %6lld", labels[token].c_str(), static_cast<long long>(at(0, token)),
        static_cast<long long>(at(1, token)), static_cast<long long>(at(2, token))));
    s.numbers["positions"].push_back(
        {{"token", labels[token]}, {"t", at(0, token)}, {"h", at(1, token)}, {"w", at(2, token)}});
  }
  s.numbers["pair_stream"] = mrope.pair_stream;
  s.lines.push_back(
      Format("The token after the image (vision end) sits at %lld: the image took "
             "max(2, 3) = 3 positions, not its 6 tokens.",
             static_cast<long long>(next)));

  bool time_constant = true, height_by_row = true, width_by_column = true;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t token = kText + r * kCols + c;
      time_constant &= at(0, token) == at(0, kText);
      height_by_row &= at(1, token) == at(1, kText + r * kCols);
      width_by_column &= at(2, token) == at(2, kText + c);
    }
  }
  height_by_row &= at(1, kText) != at(1, kText + kCols);
  width_by_column &= at(2, kText) != at(2, kText + 1);
  s.checks.push_back(
      {"across the image the time pairs see one position, the height pairs change "
       "only from row to row, the width pairs only from column to column",
       time_constant && height_by_row && width_by_column});
  s.checks.push_back(
      {"the token after a 2 x 3 image sits at position 6, three past the image's "
       "start",
       at(0, kText + kRows * kCols) == next && next == 6});

  // Text tokens carry one number in all three streams: M-RoPE is then 1-D RoPE, bit for bit.
  const std::vector<float> x = RandomNormal(kTokens, kDim, 31);
  std::vector<float> by_streams(x.size()), one_d(x.size());
  ApplyMRope<float>(mrope, PositionStreams::Dense(positions.data(), 3, kTokens),
                    Heads<const float>::Dense(x.data(), kTokens, 1, kDim),
                    Heads<float>::Dense(by_streams.data(), kTokens, 1, kDim));
  std::vector<int64_t> text_positions(kTokens);
  for (int64_t token = 0; token < kTokens; ++token) text_positions[token] = at(0, token);
  ApplyRope(mrope.rope, text_positions, Heads<const float>::Dense(x.data(), kTokens, 1, kDim),
            Heads<float>::Dense(one_d.data(), kTokens, 1, kDim));
  bool text_same = true, image_differs = false;
  for (int64_t token = 0; token < kTokens; ++token) {
    const bool same =
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): the claim is the same bits
        std::memcmp(&by_streams[token * kDim], &one_d[token * kDim], kDim * sizeof(float)) == 0;
    const bool text = token < kText || token >= kText + kRows * kCols;
    if (text) text_same &= same;
    if (!text && !same) image_differs = true;
  }
  s.checks.push_back(
      {"for the 6 text tokens (vision start and end included) M-RoPE equals 1-D "
       "RoPE at the same position, bit for bit",
       text_same});
  s.checks.push_back({"the image tokens, whose streams differ, do not", image_differs});

  // A score depends only on the differences of each stream.
  const auto q = RandomNormal(1, kDim, 32), k = RandomNormal(1, kDim, 33);
  const int64_t q1[3] = {3, 3, 3}, k1[3] = {3, 4, 5};                  // image r0 c0 and r1 c2
  const int64_t q2[3] = {1003, 503, 7003}, k2[3] = {1003, 504, 7005};  // same differences
  const int64_t k3[3] = {3, 5, 4};                                     // h and w swapped
  const double s1 = MropeScore(mrope, q, k, q1, k1), s2 = MropeScore(mrope, q, k, q2, k2),
               s3 = MropeScore(mrope, q, k, q1, k3);
  s.lines.push_back(Format("score of q at (3, 3, 3) with k at (3, 4, 5): %.6f", s1));
  s.lines.push_back(Format("             (1003, 503, 7003) with (1003, 504, 7005): %.6f", s2));
  s.lines.push_back(
      Format("             (3, 3, 3) with (3, 5, 4), rows and columns swapped: %.6f", s3));
  s.numbers["scores"] = {
      {"q_3_3_3_k_3_4_5", s1}, {"q_1003_503_7003_k_1003_504_7005", s2}, {"q_3_3_3_k_3_5_4", s3}};
  s.checks.push_back(
      {"a score depends only on the per-stream differences (dt, dh, dw): (0, 1, 2) "
       "scores the same at (3, 3, 3) and at (1003, 503, 7003)",
       std::fabs(s1 - s2) < 1e-5});
  s.checks.push_back({"... and tells (0, 1, 2) from (0, 2, 1): rows and columns are not confused",
                      std::fabs(s1 - s3) > 1e-3});

  // The figure: the position each pair turns by, token by token.
  std::string matrix;
  for (int64_t pair = 0; pair < kDim / 2; ++pair) {
    for (int64_t token = 0; token < kTokens; ++token) {
      matrix += std::to_string(at(mrope.pair_stream[pair], token)) + " ";
    }
    matrix += '\n';
  }
  std::string xtics = "set xtics (";
  for (int64_t token = 0; token < kTokens; ++token) {
    xtics += (token ? ", '" : "'") + labels[token] + "' " + std::to_string(token);
  }
  xtics += ") rotate by 40 right nomirror\n";
  std::string ytics = "set ytics (";
  int64_t first = 0;
  for (int64_t stream = 0; stream < 3; ++stream) {
    const int64_t last = first + sections[stream] - 1;
    ytics += Format("%s'%s pairs %lld-%lld' %.1f", stream ? ", " : "", kStream[stream],
                    static_cast<long long>(first), static_cast<long long>(last),
                    0.5 * static_cast<double>(first + last));
    first = last + 1;
  }
  ytics += ") nomirror\n";
  s.figures.push_back(
      {.file_stem = "mrope_positions_per_pair",
       .caption = "M-RoPE: the position each rotary pair turns by, for a Qwen2-VL prompt with a "
                  "2 x 3-token image between text. Text: every pair sees the same number. Image: "
                  "time pairs see one number, height pairs the row, width pairs the column",
       .width = 1000,
       .height = 560,
       .data = {{"seen", matrix}},
       .script = xtics + ytics +
                 "set title \"M-RoPE: which position each rotary pair turns by\\ntext: every "
                 "pair alike; image: time pairs fixed, height pairs follow the row, width pairs "
                 "the column\"\n"
                 "set xlabel 'token (the image is 4 x 6 patches, merged 2 x 2 into 2 x 3 "
                 "tokens)' offset 0,-1\n" +
                 R"(set ylabel 'rotary pair'
set xrange [-0.5:11.5]
set yrange [15.5:-0.5]
set cbrange [0:8]
set cblabel 'position'
set palette defined (0 '#f7fbff', 1 '#c6dbef', 2 '#6baed6', 3 '#2171b5')
set grid noxtics noytics
set bmargin 8
set arrow from 2.5, graph 0 to 2.5, graph 1 nohead lw 2 lc rgb '#d62728' front
set arrow from 8.5, graph 0 to 8.5, graph 1 nohead lw 2 lc rgb '#d62728' front
set arrow from graph 0, first 3.5 to graph 1, first 3.5 nohead lw 2 lc rgb '#333333' front
set arrow from graph 0, first 9.5 to graph 1, first 9.5 nohead lw 2 lc rgb '#333333' front
plot $seen matrix with image pixels notitle, \
     $seen matrix using 1:2:(sprintf('%d', $3)) with labels font ',10' notitle)"});
  return s;
}

}  // namespace posenc::lesson
