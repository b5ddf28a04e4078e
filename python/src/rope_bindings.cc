// posenc.Rope and apply_rope*: RoPE on numpy arrays (posenc/rope.h).
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "arrays.h"
#include "bindings.h"
#include "posenc/rope.h"
#include "rope_arrays.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "rope";

template <typename T>
void RotateInPlace(const Rope& rope, const py::object& positions, const py::object& x,
                   RopeDirection direction) {
  const auto view = ViewHeads<T>(x, kFn, "x");
  const BatchPositions pos(positions, view.batch_shape, view.first.tokens, kFn);
  py::gil_scoped_release release;
  ApplyRope<T>(rope, pos.Batch(), view, direction);
}

template <typename T>
py::object RotateInto(const Rope& rope, const py::object& positions, const py::object& x,
                      const py::object& out_arg, RopeDirection direction) {
  const IntoViews<T> views = ViewInto<T>(x, out_arg, kFn);
  const BatchPositions pos(positions, views.in.batch_shape, views.in.first.tokens, kFn);
  {
    py::gil_scoped_release release;
    ApplyRope<T>(rope, pos.Batch(), views.in, views.dst, direction);
  }
  return views.out;
}

template <typename T>
void RotateQkInPlace(const Rope& rope, const py::object& positions, const py::object& q,
                     const py::object& k, RopeDirection direction) {
  const auto [qv, kv] = ViewQk<T>(q, k, kFn);
  const BatchPositions pos(positions, qv.batch_shape, qv.first.tokens, kFn);
  py::gil_scoped_release release;
  ApplyRope<T>(rope, pos.Batch(), qv, kv, direction);
}

template <typename T>
py::tuple RotateQkInto(const Rope& rope, const py::object& positions, const py::object& q,
                       const py::object& k, const py::object& q_out_arg,
                       const py::object& k_out_arg, RopeDirection direction) {
  const QkIntoViews<T> views = ViewQkInto<T>(q, k, q_out_arg, k_out_arg, kFn);
  const BatchPositions pos(positions, views.q.batch_shape, views.q.first.tokens, kFn);
  {
    py::gil_scoped_release release;
    ApplyRope<T>(rope, pos.Batch(), views.q, views.q_dst, views.k, views.k_dst, direction);
  }
  return py::make_tuple(views.q_out, views.k_out);
}

std::string Repr(const Rope& rope) {
  std::ostringstream out;
  out << "Rope(head_dim=" << rope.head_dim << ", rotary_dim=" << rope.rotary_dim;
  if (rope.rotary_offset != 0) out << ", rotary_offset=" << rope.rotary_offset;
  out << ", layout=" << (rope.layout == RopeLayout::kHalfSplit ? "HALF_SPLIT" : "INTERLEAVED")
      << ", attention_factor=" << rope.attention_factor << ", inv_freq=[" << rope.inv_freq.size()
      << " values])";
  return out.str();
}

constexpr const char* kArrayContract = R"(
Shapes: x (or q, k) is an array [..., tokens, heads, head_dim] whose last dim is contiguous;
other strides are free (a transposed [batch, heads, seq, dim] array is fine), and nothing is
copied. positions is int64 [tokens] (shared by the batch) or [..., tokens] (one list per batch
element). float32, float16 and bfloat16 (bits in an int16/uint16 array, with bfloat16=True) run
the library's kernels (float32 arithmetic, one rounding to the storage type); float64 runs the
library's double-precision reference. Raises ValueError (posenc.Error) naming the argument and
the rule; nothing is written when an argument is bad.)";

}  // namespace

void BindRope(py::module_& m) {
  py::enum_<RopeLayout>(m, "RopeLayout", R"(Which features form a rotated pair.

HALF_SPLIT: pair i = (i, i + rotary_dim/2) (GPT-NeoX, Llama in Hugging Face).
INTERLEAVED: pair i = (2i, 2i + 1) (RoFormer, GPT-J, Meta's reference).)")
      .value("HALF_SPLIT", RopeLayout::kHalfSplit)
      .value("INTERLEAVED", RopeLayout::kInterleaved);

  py::enum_<RopeDirection>(m, "RopeDirection", R"(FORWARD: y = a R(+phi) x, the embedding.
INVERSE: a R(-phi), the transpose of FORWARD: its backward pass (and its undo when a == 1).)")
      .value("FORWARD", RopeDirection::kForward)
      .value("INVERSE", RopeDirection::kInverse);

  py::class_<Rope>(m, "Rope", R"(A RoPE configuration (posenc/rope.h).

Pair i of each head is turned by phi = pos * inv_freq[i]; cos and sin are multiplied by
attention_factor. Features [rotary_offset, rotary_offset + rotary_dim) rotate, pairs counted from
rotary_offset; all others pass through (rotary_offset 0: the first rotary_dim features; DeepSeek
V2/V3 MLA: head_dim 192, rotary_offset 128, rotary_dim 64).)")
      .def(py::init([](int64_t head_dim, int64_t rotary_dim, RopeLayout layout,
                       std::vector<double> inv_freq, double attention_factor,
                       int64_t rotary_offset) {
             Rope rope{.head_dim = head_dim,
                       .rotary_dim = rotary_dim,
                       .layout = layout,
                       .inv_freq = std::move(inv_freq),
                       .attention_factor = attention_factor,
                       .rotary_offset = rotary_offset};
             rope.Validate();
             return rope;
           }),
           py::arg("head_dim"), py::arg("rotary_dim"), py::arg("layout"), py::arg("inv_freq"),
           py::arg("attention_factor") = 1.0, py::kw_only(), py::arg("rotary_offset") = 0,
           "A Rope with explicit frequencies (e.g. from a scaling rule); validated.")
      .def_static(
          "default",
          [](int64_t head_dim, double base, RopeLayout layout, std::optional<int64_t> rotary_dim,
             int64_t rotary_offset) {
            // None, as in posenc.torch.RotaryEmbedding, is the library's 0: all the rest.
            return Rope::Default(head_dim, base, layout, rotary_dim.value_or(0), rotary_offset);
          },
          py::arg("head_dim"), py::arg("base") = 10000.0,
          py::arg("layout") = RopeLayout::kHalfSplit, py::arg("rotary_dim") = py::none(),
          py::kw_only(), py::arg("rotary_offset") = 0,
          "Plain RoPE: inv_freq[i] = base^(-2i / rotary_dim) over the rotary_dim features from "
          "rotary_offset (rotary_dim None means head_dim - rotary_offset).")
      .def_readwrite("head_dim", &Rope::head_dim)
      .def_readwrite("rotary_dim", &Rope::rotary_dim)
      .def_readwrite("rotary_offset", &Rope::rotary_offset,
                     "The first rotated feature; features before it pass through (default 0).")
      .def_readwrite("layout", &Rope::layout)
      .def_readwrite("inv_freq", &Rope::inv_freq,
                     "rotary_dim / 2 frequencies (a copy: assign the whole list to change them)")
      .def_readwrite("attention_factor", &Rope::attention_factor)
      .def("validate", &Rope::Validate, "Raises ValueError naming the field, value and rule.")
      .def("__eq__",
           [](const Rope& a, const py::object& other) {
             return py::isinstance<Rope>(other) && a == other.cast<const Rope&>();
           })
      // Plain fields, so that a Rope (and a module holding one) pickles, deep-copies and goes
      // through torch.save; a state read back is validated like any other Rope.
      .def(py::pickle(
          [](const Rope& rope) {
            return py::make_tuple(rope.head_dim, rope.rotary_dim, rope.layout, rope.inv_freq,
                                  rope.attention_factor, rope.rotary_offset);
          },
          [](const py::tuple& state) {
            Require(state.size() == 6, "rope", "pickled state", "hold 6 fields", state.size());
            constexpr std::string_view kRope = "rope", kInt = "be an int";
            Rope rope{
                .head_dim = StateField<int64_t>(state, 0, kRope, "head_dim", kInt),
                .rotary_dim = StateField<int64_t>(state, 1, kRope, "rotary_dim", kInt),
                .layout = StateField<RopeLayout>(state, 2, kRope, "layout", "be a RopeLayout"),
                .inv_freq = StateField<std::vector<double>>(state, 3, kRope, "inv_freq",
                                                            "be a list of floats"),
                .attention_factor =
                    StateField<double>(state, 4, kRope, "attention_factor", "be a float"),
                .rotary_offset = StateField<int64_t>(state, 5, kRope, "rotary_offset", kInt)};
            rope.Validate();
            return rope;
          }))
      .def("__repr__", &Repr);

  m.def(
      "default_inv_freq",
      [](double base, int64_t rotary_dim) {
        const std::vector<double> inv_freq = DefaultInvFreq(base, rotary_dim);
        return py::array_t<double>(static_cast<py::ssize_t>(inv_freq.size()), inv_freq.data());
      },
      py::arg("base"), py::arg("rotary_dim"),
      "float64 [rotary_dim / 2]: inv_freq[i] = base^(-2i / rotary_dim).");

  m.def(
      "rope_angle",
      [](int64_t pos, double inv_freq) {
        const CosSin cs = RopeAngle(pos, inv_freq);
        return py::make_tuple(cs.cos, cs.sin);
      },
      py::arg("pos"), py::arg("inv_freq"),
      "(cos, sin) of pos * inv_freq in double: the angle every kernel matches.");

  m.def(
      "apply_rope",
      [](const Rope& rope, const py::object& positions, const py::object& x,
         RopeDirection direction, const py::object& out, bool bfloat16) {
        return DispatchElement(x, bfloat16, kFn, "x", [&](auto element) {
          return RotateInto<decltype(element)>(rope, positions, x, out, direction);
        });
      },
      py::arg("rope"), py::arg("positions"), py::arg("x"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("out") = py::none(),
      py::arg("bfloat16") = false,
      (std::string("Returns x rotated by RoPE, into `out` (same shape and dtype, must not "
                   "overlap x) or a new C-contiguous array.\n") +
       kArrayContract)
          .c_str());

  m.def(
      "apply_rope_inplace",
      [](const Rope& rope, const py::object& positions, const py::object& x,
         RopeDirection direction, bool bfloat16) {
        DispatchElement(x, bfloat16, kFn, "x", [&](auto element) {
          RotateInPlace<decltype(element)>(rope, positions, x, direction);
        });
      },
      py::arg("rope"), py::arg("positions"), py::arg("x"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("bfloat16") = false,
      (std::string("Rotates x in place.\n") + kArrayContract).c_str());

  m.def(
      "apply_rope_qk",
      [](const Rope& rope, const py::object& positions, const py::object& q, const py::object& k,
         RopeDirection direction, const py::object& q_out, const py::object& k_out, bool bfloat16) {
        return DispatchElement(q, bfloat16, kFn, "q", [&](auto element) {
          return RotateQkInto<decltype(element)>(rope, positions, q, k, q_out, k_out, direction);
        });
      },
      py::arg("rope"), py::arg("positions"), py::arg("q"), py::arg("k"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("q_out") = py::none(),
      py::arg("k_out") = py::none(), py::arg("bfloat16") = false,
      (std::string("Returns (q_out, k_out): q [..., tokens, num_heads, head_dim] and k [..., "
                   "tokens, num_kv_heads, head_dim] (same batch dims and tokens, any head "
                   "counts) rotated with the angles of their shared positions.\n") +
       kArrayContract)
          .c_str());

  m.def(
      "apply_rope_qk_inplace",
      [](const Rope& rope, const py::object& positions, const py::object& q, const py::object& k,
         RopeDirection direction, bool bfloat16) {
        DispatchElement(q, bfloat16, kFn, "q", [&](auto element) {
          RotateQkInPlace<decltype(element)>(rope, positions, q, k, direction);
        });
      },
      py::arg("rope"), py::arg("positions"), py::arg("q"), py::arg("k"), py::kw_only(),
      py::arg("direction") = RopeDirection::kForward, py::arg("bfloat16") = false,
      (std::string("Rotates q and k in place (they must not share memory).\n") + kArrayContract)
          .c_str());
}

}  // namespace posenc::python
