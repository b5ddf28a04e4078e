// posenc.MRope and apply_mrope*: multi-stream RoPE on numpy arrays (posenc/mrope.h), from a
// config (posenc/hf_config.h: MakeMRope, MakeVisionRope); the positions it turns by: Qwen-VL's
// get_rope_index (posenc/mrope_positions.h) and vision-tower patches (posenc/vision_positions.h).
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "config_layer.h"
#include "posenc/files.h"
#include "posenc/hf_config.h"
#include "posenc/model_positions.h"
#include "posenc/mrope.h"
#include "posenc/mrope_positions.h"
#include "posenc/npy.h"
#include "posenc/vision_positions.h"
#include "rope_arrays.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "mrope";

// The MRope, RopeDirection or Rope an argument holds; anything else is a posenc::Error naming it
// (pybind11 would print its whole signature instead).
template <typename T>
const T& Holds(const py::object& value, std::string_view name, std::string_view what) {
  Require(py::isinstance<T>(value), kFn, name, "be a " + std::string(what),
          std::string(py::str(py::type::of(value).attr("__name__"))));
  return value.cast<const T&>();
}
const MRope& MRopeOf(const py::object& value) {
  return Holds<MRope>(value, "mrope", "posenc.MRope");
}
RopeDirection DirectionOf(const py::object& value) {
  return Holds<RopeDirection>(value, "direction", "posenc.RopeDirection");
}

// Checked here, before any batch element reaches the library, so that the message names the
// argument whichever path (folded or per element) the call takes.
template <typename T>
void RequireHeadDim(const MRope& mrope, const BatchedHeads<T>& view) {
  if (view.first.head_dim == mrope.rope.head_dim) return;
  Require(false, kFn, std::string(view.name) + ".head_dim",
          "equal rope.head_dim (" + std::to_string(mrope.rope.head_dim) + ")", view.first.head_dim);
}

template <typename A, typename B>
void RequireSameTokens(const BatchedHeads<A>& first, const BatchedHeads<B>& view) {
  if (view.first.tokens == first.first.tokens) return;
  Require(
      false, kFn, std::string(view.name) + ".tokens",
      "equal " + std::string(first.name) + ".tokens (" + std::to_string(first.first.tokens) + ")",
      view.first.tokens);
}

// The position streams of a batch: int64 [streams, tokens] (shared by every batch element) or
// [streams, ..., tokens] with the batch's leading dims (streams of their own per element).
// numpy's strides are kept: an int64 ndarray with non-negative, aligned strides is read where it
// lies (only a reversed or misaligned one is copied); a sequence of ints is converted.
class BatchStreams {
 public:
  BatchStreams(const py::object& positions, const MRope& mrope,
               std::span<const int64_t> batch_shape, int64_t tokens)
      : array_(ReadArray(positions)) {
    const std::vector<int64_t> shape = ShapeOf(array_);
    const auto ndim = static_cast<int64_t>(shape.size());
    const auto batch_ndim = static_cast<int64_t>(batch_shape.size());
    std::vector<int64_t> shared{mrope.num_streams, tokens}, batched{mrope.num_streams};
    batched.insert(batched.end(), batch_shape.begin(), batch_shape.end());
    batched.push_back(tokens);
    shared_ = ndim == 2;
    const bool fits = (ndim == 2 || ndim == 2 + batch_ndim) && shape.back() == tokens &&
                      (shared_ || std::equal(batch_shape.begin(), batch_shape.end(),
                                             shape.begin() + 1, shape.end() - 1));
    std::string rule = "be (streams, tokens) = " + NpyShapeString(shared);
    if (batch_ndim > 0) rule += " or (streams, *batch, tokens) = " + NpyShapeString(batched);
    Require(fits, kFn, "positions.shape", rule, NpyShapeString(shape));
    RequirePositions(kFn, array_, "positions");  // every element's before any is run
    // Strides in elements; a unit dim's stride is never used, so it is 0.
    const auto stride = [&](int64_t i) {
      return shape[i] == 1
                 ? int64_t{0}
                 : static_cast<int64_t>(array_.strides(i)) / static_cast<int64_t>(sizeof(int64_t));
    };
    first_ = {.data = static_cast<const int64_t*>(array_.data()),
              .num_streams = shape[0],
              .tokens = tokens,
              .stream_stride = stride(0),
              .token_stride = stride(ndim - 1)};
    if (!shared_) {
      batch_shape_.assign(batch_shape.begin(), batch_shape.end());
      for (int64_t i = 1; i < ndim - 1; ++i) batch_strides_.push_back(stride(i));
    }
  }

  // The streams as the library's batch: shared by every element (no batch dims) or each
  // element's own.
  Batched<PositionStreams> Batch() const { return {first_, batch_shape_, batch_strides_}; }

 private:
  static py::array ReadArray(const py::object& positions) {
    if (!py::isinstance<py::array>(positions)) return Int64Array(positions, kFn, "positions");
    auto array = py::reinterpret_borrow<py::array>(positions);
    RequireDtype<int64_t>(array, kFn, "positions");
    bool in_place = reinterpret_cast<uintptr_t>(array.data()) % alignof(int64_t) == 0;
    for (py::ssize_t i = 0; i < array.ndim(); ++i) {
      in_place = in_place && (array.shape(i) == 1 ||
                              (array.strides(i) >= 0 &&
                               array.strides(i) % static_cast<py::ssize_t>(sizeof(int64_t)) == 0));
    }
    if (in_place) return array;
    return py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  }

  py::array array_;  // keeps first_.data alive
  PositionStreams first_;
  bool shared_ = true;
  std::vector<int64_t> batch_shape_, batch_strides_;  // empty when shared
};

template <typename T>
void RotateInPlace(const MRope& mrope, const py::object& positions, const py::object& x,
                   RopeDirection direction) {
  const auto view = ViewHeads<T>(x, kFn, "x");
  RequireHeadDim(mrope, view);
  const BatchStreams streams(positions, mrope, view.batch_shape, view.first.tokens);
  py::gil_scoped_release release;
  ApplyMRope<T>(mrope, streams.Batch(), view, direction);
}

template <typename T>
py::object RotateInto(const MRope& mrope, const py::object& positions, const py::object& x,
                      const py::object& out_arg, RopeDirection direction) {
  const IntoViews<T> views = ViewInto<T>(x, out_arg, kFn);
  RequireHeadDim(mrope, views.in);
  const BatchStreams streams(positions, mrope, views.in.batch_shape, views.in.first.tokens);
  {
    py::gil_scoped_release release;
    ApplyMRope<T>(mrope, streams.Batch(), views.in, views.dst, direction);
  }
  return views.out;
}

template <typename T>
void RotateQkInPlace(const MRope& mrope, const py::object& positions, const py::object& q,
                     const py::object& k, RopeDirection direction) {
  const auto [qv, kv] = ViewQk<T>(q, k, kFn);
  RequireSameTokens(qv, kv);
  RequireHeadDim(mrope, qv);
  RequireHeadDim(mrope, kv);
  const BatchStreams streams(positions, mrope, qv.batch_shape, qv.first.tokens);
  py::gil_scoped_release release;
  ApplyMRope<T>(mrope, streams.Batch(), qv, kv, direction);
}

template <typename T>
py::tuple RotateQkInto(const MRope& mrope, const py::object& positions, const py::object& q,
                       const py::object& k, const py::object& q_out_arg,
                       const py::object& k_out_arg, RopeDirection direction) {
  const QkIntoViews<T> views = ViewQkInto<T>(q, k, q_out_arg, k_out_arg, kFn);
  RequireSameTokens(views.q, views.k);
  RequireHeadDim(mrope, views.q);
  RequireHeadDim(mrope, views.k);
  const BatchStreams streams(positions, mrope, views.q.batch_shape, views.q.first.tokens);
  {
    py::gil_scoped_release release;
    ApplyMRope<T>(mrope, streams.Batch(), views.q, views.q_dst, views.k, views.k_dst, direction);
  }
  return py::make_tuple(views.q_out, views.k_out);
}

std::string Repr(const MRope& mrope) {
  const Rope& rope = mrope.rope;
  std::ostringstream out;
  out << "MRope(num_streams=" << mrope.num_streams << ", pair_stream=[";
  // Run-length: "0 x16, 1 x24, 2 x24" for blocks, the list itself when the streams alternate.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t s : mrope.pair_stream) {
    if (runs.empty() || runs.back().first != s) runs.emplace_back(s, 0);
    ++runs.back().second;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    out << (i ? ", " : "") << runs[i].first;
    if (runs[i].second > 1) out << " x" << runs[i].second;
  }
  out << "], head_dim=" << rope.head_dim << ", rotary_dim=" << rope.rotary_dim;
  if (rope.rotary_offset != 0) out << ", rotary_offset=" << rope.rotary_offset;
  out << ", layout=" << (rope.layout == RopeLayout::kHalfSplit ? "HALF_SPLIT" : "INTERLEAVED")
      << ", attention_factor=" << rope.attention_factor << ")";
  return out.str();
}

constexpr std::string_view kIndexFn = "mrope_index";
constexpr std::string_view kIndexConfigFn = "mrope_index_config";
// A config.json is read whole, as the other config readers do: at most 64 MiB.
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

// None, a posenc.MropeIndexRules or its name ("qwen2_5_vl_int_seconds").
std::optional<MropeIndexRules> RulesOf(const py::object& rules) {
  if (rules.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(rules)) return ParseMropeIndexRules(rules.cast<std::string>());
  Require(py::isinstance<MropeIndexRules>(rules), kIndexConfigFn, "rules",
          "be None, a posenc.MropeIndexRules or its name",
          std::string(py::str(py::type::of(rules).attr("__name__"))));
  return rules.cast<MropeIndexRules>();
}

// [batch, seq_len] int64 (ids, mask) as a C-contiguous array (a strided one is copied: ids are
// small).
py::array_t<int64_t> BatchTokens(const py::object& values, std::string_view name) {
  py::array_t<int64_t> array = Int64Array(values, kIndexFn, name);
  Require(array.ndim() == 2, kIndexFn, std::string(name) + ".shape", "be (batch, seq_len)",
          ShapeString(array));
  return array;
}

// None, an empty list or int [n, columns] rows: the rows of image_grid_thw, video_grid_thw
// (t, h, w) or of Pixtral's image sizes (rows, cols).
py::array_t<int64_t> Rows(const py::object& values, std::string_view function,
                          std::string_view name, int64_t columns, std::string_view row,
                          std::string_view noun = "grid") {
  if (values.is_none()) return py::array_t<int64_t>(std::vector<int64_t>{0, columns});
  py::array_t<int64_t> array = Int64Array(values, function, name);
  if (array.size() == 0 && array.ndim() == 1)
    return py::array_t<int64_t>(std::vector<int64_t>{0, columns});
  Require(array.ndim() == 2 && array.shape(1) == columns, function, std::string(name) + ".shape",
          "be (" + std::string(noun) + "s, " + std::to_string(columns) + "): one " +
              std::string(row) + " per " + std::string(noun),
          ShapeString(array));
  return array;
}
std::vector<VisionGrid> Grids(const py::object& values, std::string_view function,
                              std::string_view name) {
  const py::array_t<int64_t> array = Rows(values, function, name, 3, "(t, h, w)");
  std::vector<VisionGrid> grids;
  grids.reserve(array.shape(0));
  for (py::ssize_t i = 0; i < array.shape(0); ++i) {
    grids.push_back({.t = array.at(i, 0), .h = array.at(i, 1), .w = array.at(i, 2)});
  }
  return grids;
}

// None or real numbers [n] (float32 as the Qwen2.5-VL processor gives them: widened exactly).
std::vector<double> Seconds(const py::object& values) {
  if (values.is_none()) return {};
  py::array array = py::array::ensure(values);
  if (!array) PyErr_Clear();
  const bool real = array && (array.size() == 0 || array.dtype().kind() == 'f' ||
                              array.dtype().kind() == 'i' || array.dtype().kind() == 'u');
  Require(real, kIndexFn, "second_per_grid_ts", "be a sequence of real numbers",
          std::string(py::str(py::type::of(values).attr("__name__"))));
  Require(array.ndim() == 1, kIndexFn, "second_per_grid_ts.shape", "be 1-D", ShapeString(array));
  const auto doubles =
      py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(array);
  return {doubles.data(), doubles.data() + doubles.size()};
}

// An int64 array of `shape` holding `values` (moved, not copied, into the array's owner).
py::array_t<int64_t> ArrayOf(std::vector<int64_t> values, const std::vector<int64_t>& shape) {
  auto* owned = new std::vector<int64_t>(std::move(values));
  py::capsule free(owned, [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
  return py::array_t<int64_t>(shape, owned->data(), free);
}

py::tuple RopeIndex(const QwenVlTokens& tokens, const py::object& input_ids,
                    const py::object& image_grid_thw, const py::object& video_grid_thw,
                    const py::object& second_per_grid_ts, const py::object& attention_mask) {
  const py::array_t<int64_t> ids = BatchTokens(input_ids, "input_ids");
  py::array_t<int64_t> mask;
  if (!attention_mask.is_none()) {
    mask = BatchTokens(attention_mask, "attention_mask");
    Require(ShapeOf(mask) == ShapeOf(ids), kIndexFn, "attention_mask.shape",
            "equal input_ids.shape " + ShapeString(ids), ShapeString(mask));
  }
  const std::vector<VisionGrid> images = Grids(image_grid_thw, kIndexFn, "image_grid_thw");
  const std::vector<VisionGrid> videos = Grids(video_grid_thw, kIndexFn, "video_grid_thw");
  const std::vector<double> seconds = Seconds(second_per_grid_ts);
  const auto span = [](const py::array_t<int64_t>& a) {
    return a ? std::span<const int64_t>(a.data(), static_cast<size_t>(a.size()))
             : std::span<const int64_t>();
  };
  MropeIndex index = QwenVlRopeIndex(tokens, span(ids), ids.shape(0), ids.shape(1), images, videos,
                                     seconds, span(mask));
  const int64_t batch = index.batch, seq_len = index.tokens;
  return py::make_tuple(ArrayOf(std::move(index.positions), {3, batch, seq_len}),
                        ArrayOf(std::move(index.rope_deltas), {batch, 1}));
}

constexpr std::string_view kConfigFn = "hf_config";

// "bloom (alibi)": what a config describes, for messages.
std::string Described(const ModelPositions& model) {
  const std::string model_type =
      std::visit([](const auto& s) { return s.model_type; }, model.scheme);
  return model_type + " (" + std::string(LayerSchemeName(model.MainScheme())) + ")";
}

// MakeMRope of a described config: M-RoPE for a Qwen-VL config, one stream for 1-D RoPE.
MRope MRopeFromModel(const ModelPositions& model, const std::optional<std::string>& layer_type,
                     const std::optional<int64_t>& layer, const RopeFrequencyOptions& frequencies) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  Require(rope != nullptr, kConfigFn, "config", "describe a RoPE model", Described(model));
  return MakeMRope(*rope, ChooseRopeLayer(model, layer_type, layer), frequencies);
}

// MakeVisionRope of a described config's vision tower.
MRope VisionRopeFromModel(const ModelPositions& model) {
  const auto* rope = std::get_if<RopeScheme>(&model.scheme);
  Require(rope != nullptr && rope->vision.has_value(), kConfigFn, "config",
          "have a vision_config with 2-D RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Pixtral, Llama 4)",
          Described(model));
  return MakeVisionRope(*rope->vision);
}

// A VisionPositions as an int64 [2, tokens] array (moved, not copied).
py::array_t<int64_t> StreamsArray(VisionPositions positions) {
  return ArrayOf(std::move(positions.data), {positions.num_streams, positions.tokens});
}

constexpr const char* kArrayContract = R"(
Shapes: x (or q, k) is an array [..., tokens, heads, head_dim] whose last dim is contiguous;
other strides are free (a transposed [batch, heads, seq, dim] array is fine), and nothing is
copied. positions is int64 [streams, tokens] (shared by the batch) or [streams, ..., tokens]
(the batch dims: streams of their own per batch element; Hugging Face's position_ids [3, batch,
seq]); stream s of token t turns the pairs whose pair_stream is s. Its strides are free too
(positions[:, ::2], a transpose of [tokens, streams]): it is read where it lies. float32, float16
and bfloat16 (bits in an int16/uint16 array, with bfloat16=True) run the library's kernels
(float32 arithmetic, one rounding to the storage type); float64 runs the library's
double-precision reference. Raises ValueError (posenc.Error) naming the argument and the rule;
nothing is written when an argument is bad.)";

}  // namespace

void BindMRope(py::module_& m) {
  py::class_<MRope>(m, "MRope", R"(Multi-stream RoPE (posenc/mrope.h): RoPE whose pairs turn by
different position streams.

A token carries num_streams positions; pair i of each head turns by
phi_i = positions[pair_stream[i]][t] * rope.inv_freq[i]. The rotation otherwise is rope's (layout,
rotary_dim, rotary_offset, attention_factor). With one stream, or every stream holding the same
position (text tokens of an M-RoPE model), it is exactly 1-D RoPE, bit for bit.

Builders: sections (Qwen2-VL / Qwen2.5-VL M-RoPE in blocks, Qwen3-VL interleaved), qwen_vision,
pixtral and llama4_vision (2-D RoPE of vision towers: streams (row, column), Llama 4 (column + 1,
row + 1)), one_stream. Immutable and always valid.)")
      .def(py::init([](const py::object& rope, std::vector<int64_t> pair_stream,
                       std::optional<int64_t> num_streams) {
             MRope mrope;
             mrope.rope = Holds<Rope>(rope, "rope", "posenc.Rope");
             mrope.num_streams = num_streams.value_or(
                 pair_stream.empty()
                     ? 1
                     : 1 + *std::max_element(pair_stream.begin(), pair_stream.end()));
             mrope.pair_stream = std::move(pair_stream);
             mrope.Validate();
             return mrope;
           }),
           py::arg("rope"), py::arg("pair_stream"), py::kw_only(),
           py::arg("num_streams") = py::none(),
           "An MRope with an explicit stream per pair (rope.rotary_dim / 2 entries, each in "
           "[0, num_streams)); num_streams defaults to max(pair_stream) + 1. Validated.")
      .def_static(
          "one_stream",
          [](const py::object& rope) {
            return MRope::OneStream(Holds<Rope>(rope, "rope", "posenc.Rope"));
          },
          py::arg("rope"), "1-D RoPE as one stream.")
      .def_static(
          "sections",
          [](const py::object& rope, std::vector<int64_t> sections, bool interleaved) {
            return MRope::Sections(
                Holds<Rope>(rope, "rope", "posenc.Rope"), sections,
                interleaved ? MropeSections::kInterleaved : MropeSections::kBlocks);
          },
          py::arg("rope"), py::arg("sections"), py::arg("interleaved") = false,
          R"(M-RoPE over rope's pairs (its inv_freq, layout, scaling and offset kept): one stream
per section (Hugging Face's mrope_section: time, height, width), the sections adding up to
rope.rotary_dim / 2.

interleaved False (Qwen2-VL, Qwen2.5-VL): blocks, stream s takes sections[s] consecutive pairs
([16, 24, 24]: pairs 0-15 time, 16-39 height, 40-63 width). True (Qwen3-VL, mrope_interleaved,
Hugging Face's apply_interleaved_mrope): with n sections, pair i takes stream s = i % n when
s > 0 and i < n * sections[s], time otherwise ([24, 20, 20]: (t h w) x 20, then t t t t).)")
      .def_static("qwen_vision", &MRope::QwenVision, py::arg("head_dim"),
                  py::arg("theta") = 10000.0,
                  R"(The Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision tower: streams (row, column);
pairs [0, head_dim / 4) turn by the row, the rest by the column, both at
theta^(-2j / (head_dim / 2)); half-split. head_dim a multiple of 4.)")
      .def_static("pixtral", &MRope::Pixtral, py::arg("head_dim"), py::arg("theta") = 10000.0,
                  R"(Pixtral's vision encoder: streams (row, column); with f_j = theta^(-2j /
head_dim), pairs [0, head_dim / 4) turn by the row at f_0, f_2, ..., the rest by the column at
f_1, f_3, ...; half-split. head_dim a multiple of 4.)")
      .def_static("llama4_vision", &MRope::Llama4Vision, py::arg("head_dim"),
                  py::arg("theta") = 10000.0,
                  R"(Llama 4's vision encoder: streams (column + 1, row + 1), the class token at
(0, 0); n = head_dim / 2 interleaved pairs, pairs [0, n / 2) by stream 0 and the rest by stream
1, both at theta^(-2j / n). head_dim a multiple of 4.)")
      .def_property_readonly(
          "rope", [](const MRope& mrope) { return mrope.rope; },
          "The rotation (a copy): layout, rotary_dim, rotary_offset, attention_factor, inv_freq.")
      .def_property_readonly(
          "num_streams", [](const MRope& mrope) { return mrope.num_streams; },
          "Position streams per token (1 to MAX_STREAMS).")
      .def_property_readonly(
          "pair_stream", [](const MRope& mrope) { return mrope.pair_stream; },
          "rotary_dim / 2 stream indices: the stream that turns pair i (a copy).")
      .def_property_readonly("head_dim", [](const MRope& mrope) { return mrope.rope.head_dim; })
      .def_readonly_static("MAX_STREAMS", &MRope::kMaxStreams)
      .def("validate", &MRope::Validate, "Raises ValueError naming the field, value and rule.")
      .def("__eq__",
           [](const MRope& a, const py::object& other) {
             return py::isinstance<MRope>(other) && a == other.cast<const MRope&>();
           })
      .def(py::pickle(
          [](const MRope& mrope) {
            return py::make_tuple(mrope.rope, mrope.pair_stream, mrope.num_streams);
          },
          [](const py::tuple& state) {
            Require(state.size() == 3, "mrope", "pickled state", "hold 3 fields", state.size());
            MRope mrope{
                .rope = StateField<Rope>(state, 0, "mrope", "rope", "be a posenc.Rope"),
                .num_streams = StateField<int64_t>(state, 2, "mrope", "num_streams", "be an int"),
                .pair_stream = StateField<std::vector<int64_t>>(state, 1, "mrope", "pair_stream",
                                                                "be a list of ints")};
            mrope.Validate();
            return mrope;
          }))
      .def("__repr__", &Repr);

  py::enum_<MropeIndexRules>(m, "MropeIndexRules", R"(How Qwen-VL's get_rope_index numbers
video frames (posenc/mrope_positions.h); the 4.x rules number text and images alike.

QWEN2_VL: transformers v4.45.0, frame i at time i. QWEN2_5_VL: v4.49.0 (and vLLM), frame i at
trunc(float32(i * seconds_per_grid) * tokens_per_second). QWEN2_5_VL_INT_SECONDS: later 4.5x
releases, the seconds truncated to an integer first (0.5 s puts every frame at 0). QWEN3_VL:
v4.57.0, each frame its own run with timestamps as text between, time 0 in each.
QWEN2_VL_TRANSFORMERS5, QWEN2_5_VL_TRANSFORMERS5, QWEN3_VL_TRANSFORMERS5: transformers 5
(checked against 5.23.0): text after a run resumes at base + max(h, w) / merge, padded slots 0,
the delta over the unpadded row, no mask-only branch; Qwen2.5-VL frame i at
trunc(float32(i) * float32(tokens_per_second * seconds_per_grid)), images at time i.)")
      .value("QWEN2_VL", MropeIndexRules::kQwen2Vl)
      .value("QWEN2_5_VL", MropeIndexRules::kQwen2_5Vl)
      .value("QWEN2_5_VL_INT_SECONDS", MropeIndexRules::kQwen2_5VlIntSeconds)
      .value("QWEN3_VL", MropeIndexRules::kQwen3Vl)
      .value("QWEN2_VL_TRANSFORMERS5", MropeIndexRules::kQwen2VlTransformers5)
      .value("QWEN2_5_VL_TRANSFORMERS5", MropeIndexRules::kQwen2_5VlTransformers5)
      .value("QWEN3_VL_TRANSFORMERS5", MropeIndexRules::kQwen3VlTransformers5)
      .def_property_readonly(
          "rule_name",
          [](MropeIndexRules rules) { return std::string(MropeIndexRulesName(rules)); },
          "\"qwen2_vl\", \"qwen2_5_vl\", \"qwen2_5_vl_int_seconds\", \"qwen3_vl\" or one of "
          "them + \"_transformers5\" (not qwen2_5_vl_int_seconds).");

  py::class_<QwenVlTokens>(m, "QwenVlTokens", R"(The token ids and sizes that Qwen-VL's
get_rope_index reads from a config (posenc/mrope_positions.h), and the numbering rules.
From a config: posenc.qwen_vl_tokens(config, rules=None).)")
      .def(py::init([](int64_t image_token_id, int64_t video_token_id,
                       int64_t vision_start_token_id, int64_t spatial_merge_size,
                       int64_t tokens_per_second, const py::object& rules) {
             QwenVlTokens tokens{.image_token_id = image_token_id,
                                 .video_token_id = video_token_id,
                                 .vision_start_token_id = vision_start_token_id,
                                 .spatial_merge_size = spatial_merge_size,
                                 .tokens_per_second = tokens_per_second,
                                 .rules = RulesOf(rules).value_or(MropeIndexRules::kQwen2Vl)};
             tokens.Validate();
             return tokens;
           }),
           py::kw_only(), py::arg("image_token_id"), py::arg("video_token_id"),
           py::arg("vision_start_token_id"), py::arg("spatial_merge_size") = 2,
           py::arg("tokens_per_second") = 0, py::arg("rules") = MropeIndexRules::kQwen2Vl,
           "Explicit ids and sizes; validated.")
      .def_static(
          "from_config_text",
          [](std::string_view text, const py::object& rules) {
            return QwenVlTokensFromConfig(text, RulesOf(rules));
          },
          py::arg("json_text"), py::arg("rules") = py::none(),
          "From a Qwen-VL config.json given as text; see posenc.qwen_vl_tokens.")
      .def_static(
          "from_config_file",
          [](const std::filesystem::path& path, const py::object& rules) {
            return QwenVlTokensFromConfig(
                ReadFileCapped(kIndexConfigFn, path.string(), kMaxConfigBytes), RulesOf(rules));
          },
          py::arg("path"), py::arg("rules") = py::none(),
          "From a Qwen-VL config.json file (at most 64 MiB); see posenc.qwen_vl_tokens.")
      .def_readonly("image_token_id", &QwenVlTokens::image_token_id)
      .def_readonly("video_token_id", &QwenVlTokens::video_token_id)
      .def_readonly("vision_start_token_id", &QwenVlTokens::vision_start_token_id)
      .def_readonly("spatial_merge_size", &QwenVlTokens::spatial_merge_size)
      .def_readonly("tokens_per_second", &QwenVlTokens::tokens_per_second)
      .def_readonly("rules", &QwenVlTokens::rules)
      .def("__repr__", [](const QwenVlTokens& t) {
        std::ostringstream out;
        out << "QwenVlTokens(image_token_id=" << t.image_token_id
            << ", video_token_id=" << t.video_token_id
            << ", vision_start_token_id=" << t.vision_start_token_id
            << ", spatial_merge_size=" << t.spatial_merge_size
            << ", tokens_per_second=" << t.tokens_per_second << ", rules='"
            << MropeIndexRulesName(t.rules) << "')";
        return out.str();
      });

  m.def(
      "qwen_vl_rope_index_of_tokens",
      [](const py::object& tokens, const py::object& input_ids, const py::object& image_grid_thw,
         const py::object& video_grid_thw, const py::object& second_per_grid_ts,
         const py::object& attention_mask) {
        Require(py::isinstance<QwenVlTokens>(tokens), kIndexFn, "tokens",
                "be a posenc.QwenVlTokens",
                std::string(py::str(py::type::of(tokens).attr("__name__"))));
        return RopeIndex(tokens.cast<const QwenVlTokens&>(), input_ids, image_grid_thw,
                         video_grid_thw, second_per_grid_ts, attention_mask);
      },
      py::arg("tokens"), py::arg("input_ids"), py::arg("image_grid_thw") = py::none(),
      py::arg("video_grid_thw") = py::none(), py::arg("second_per_grid_ts") = py::none(),
      py::arg("attention_mask") = py::none(),
      "(position_ids int64 [3, batch, seq_len], rope_deltas int64 [batch, 1]); see "
      "posenc.get_rope_index.");

  DefLayerReaders(m, "mrope_from_hf_config", &MRopeFromModel,
                  "The MRope of a config.json given as text; see posenc.mrope_from_hf_config.",
                  "The MRope of a config.json file; see posenc.mrope_from_hf_config.");
  m.def(
      "vision_rope_from_hf_config_text",
      [](std::string_view json_text) { return VisionRopeFromModel(DescribeModel(json_text)); },
      py::arg("json_text"),
      "The vision tower's MRope of a config.json given as text; see "
      "posenc.vision_rope_from_hf_config.");
  m.def(
      "vision_rope_from_hf_config_file",
      [](const std::filesystem::path& path) {
        return VisionRopeFromModel(LoadModelPositions(path));
      },
      py::arg("path"),
      "The vision tower's MRope of a config.json file; see posenc.vision_rope_from_hf_config.");

  m.def(
      "qwen_vision_positions",
      [](const py::object& grid_thw, int64_t spatial_merge_size) {
        const std::vector<VisionGrid> grids = Grids(grid_thw, "qwen_vision_positions", "grid_thw");
        return StreamsArray(QwenVisionPositions(grids, spatial_merge_size));
      },
      py::arg("grid_thw"), py::arg("spatial_merge_size") = 2,
      R"(int64 [2, tokens]: (row, column) of every patch of the Qwen2-VL / Qwen2.5-VL / Qwen3-VL
vision tower, in rot_pos_emb's order (merge blocks row by row, their patches row by row; each
video frame repeats its image's list). grid_thw: int [n, 3] rows (t, h, w), image_grid_thw or
video_grid_thw.)");
  m.def(
      "qwen_vision_window_order",
      [](const py::object& grid_thw, int64_t spatial_merge_size, int64_t window_units) {
        const std::vector<VisionGrid> grids =
            Grids(grid_thw, "qwen_vision_window_order", "grid_thw");
        QwenWindowOrder order = QwenVisionWindowOrder(grids, spatial_merge_size, window_units);
        const auto merged = static_cast<int64_t>(order.window_index.size());
        const auto offsets = static_cast<int64_t>(order.cu_window_seqlens.size());
        return py::make_tuple(ArrayOf(std::move(order.window_index), {merged}),
                              ArrayOf(std::move(order.cu_window_seqlens), {offsets}));
      },
      py::arg("grid_thw"), py::arg("spatial_merge_size") = 2, py::arg("window_units") = 4,
      R"((window_index, cu_window_seqlens), int64, as Qwen2.5-VL's get_window_index gives them
(cu_window_seqlens without its repeated offsets, as forward's unique_consecutive leaves it):
merged token window_index[k] goes to slot k; window-layer attention stays inside each range of
cu_window_seqlens. window_units: window_size / spatial_merge_size / patch_size (112 / 2 / 14 = 4).)");
  m.def(
      "qwen_vision_positions_in_window_order",
      [](const py::object& grid_thw, int64_t spatial_merge_size, int64_t window_units) {
        const std::vector<VisionGrid> grids =
            Grids(grid_thw, "qwen_vision_window_order", "grid_thw");
        return StreamsArray(
            QwenVisionPositionsInWindowOrder(grids, spatial_merge_size, window_units));
      },
      py::arg("grid_thw"), py::arg("spatial_merge_size") = 2, py::arg("window_units") = 4,
      "int64 [2, tokens]: qwen_vision_positions gathered by the window order, the positions "
      "Qwen2.5-VL's tower rotates by.");
  m.def(
      "pixtral_vision_positions",
      [](const py::object& images) {
        const py::array_t<int64_t> rows =
            Rows(images, "pixtral_vision_positions", "images", 2, "(rows, cols)", "image");
        std::vector<PatchRowsCols> sizes;
        sizes.reserve(rows.shape(0));
        for (py::ssize_t i = 0; i < rows.shape(0); ++i) {
          sizes.push_back({.rows = rows.at(i, 0), .cols = rows.at(i, 1)});
        }
        return StreamsArray(PixtralVisionPositions(sizes));
      },
      py::arg("images"),
      "int64 [2, tokens]: (row, column) of Pixtral's patches, row-major per image, images one "
      "after another. images: int [n, 2] rows (patch rows, patch columns).");
  m.def(
      "llama4_vision_positions",
      [](int64_t side) { return StreamsArray(Llama4VisionPositions(side)); }, py::arg("side"),
      "int64 [2, side^2 + 1]: Llama 4's (column + 1, row + 1) of the side x side patches "
      "row-major, then (0, 0) for the class token. side = image_size / patch_size.");

  m.def(
      "apply_mrope",
      [](const py::object& mrope, const py::object& positions, const py::object& x,
         const py::object& direction, const py::object& out, bool bfloat16) {
        const MRope& spec = MRopeOf(mrope);
        const RopeDirection dir = DirectionOf(direction);
        return DispatchElement(x, bfloat16, kFn, "x", [&](auto element) {
          return RotateInto<decltype(element)>(spec, positions, x, out, dir);
        });
      },
      py::arg("mrope"), py::arg("positions"), py::arg("x"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("out") = py::none(),
      py::arg("bfloat16") = false,
      (std::string("Returns x rotated by multi-stream RoPE, into `out` (same shape and dtype, "
                   "must not overlap x) or a new C-contiguous array.\n") +
       kArrayContract)
          .c_str());

  m.def(
      "apply_mrope_inplace",
      [](const py::object& mrope, const py::object& positions, const py::object& x,
         const py::object& direction, bool bfloat16) {
        const MRope& spec = MRopeOf(mrope);
        const RopeDirection dir = DirectionOf(direction);
        DispatchElement(x, bfloat16, kFn, "x", [&](auto element) {
          RotateInPlace<decltype(element)>(spec, positions, x, dir);
        });
      },
      py::arg("mrope"), py::arg("positions"), py::arg("x"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("bfloat16") = false,
      (std::string("Rotates x in place.\n") + kArrayContract).c_str());

  m.def(
      "apply_mrope_qk",
      [](const py::object& mrope, const py::object& positions, const py::object& q,
         const py::object& k, const py::object& direction, const py::object& q_out,
         const py::object& k_out, bool bfloat16) {
        const MRope& spec = MRopeOf(mrope);
        const RopeDirection dir = DirectionOf(direction);
        return DispatchElement(q, bfloat16, kFn, "q", [&](auto element) {
          return RotateQkInto<decltype(element)>(spec, positions, q, k, q_out, k_out, dir);
        });
      },
      py::arg("mrope"), py::arg("positions"), py::arg("q"), py::arg("k"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("q_out") = py::none(),
      py::arg("k_out") = py::none(), py::arg("bfloat16") = false,
      (std::string("Returns (q_out, k_out): q [..., tokens, num_heads, head_dim] and k [..., "
                   "tokens, num_kv_heads, head_dim] (same batch dims and tokens, any head "
                   "counts) rotated with the angles of their shared positions.\n") +
       kArrayContract)
          .c_str());

  m.def(
      "apply_mrope_qk_inplace",
      [](const py::object& mrope, const py::object& positions, const py::object& q,
         const py::object& k, const py::object& direction, bool bfloat16) {
        const MRope& spec = MRopeOf(mrope);
        const RopeDirection dir = DirectionOf(direction);
        DispatchElement(q, bfloat16, kFn, "q", [&](auto element) {
          RotateQkInPlace<decltype(element)>(spec, positions, q, k, dir);
        });
      },
      py::arg("mrope"), py::arg("positions"), py::arg("q"), py::arg("k"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("bfloat16") = false,
      (std::string("Rotates q and k in place (they must not share memory).\n") + kArrayContract)
          .c_str());
}

}  // namespace posenc::python
