// Absolute positions on numpy arrays: sinusoidal (posenc/sinusoidal.h), the learned table
// (posenc/learned.h) and token + position embedding (posenc/embedding.h).
#include <pybind11/stl.h>

#include "arrays.h"
#include "bindings.h"
#include "posenc/embedding.h"
#include "posenc/learned.h"
#include "posenc/npy.h"
#include "posenc/sinusoidal.h"

namespace posenc::python {
namespace {

std::span<const int64_t> Flat(const py::array_t<int64_t>& array) {
  return {array.data(), static_cast<size_t>(array.size())};
}

std::span<float> Flat(py::array_t<float>& array) {
  return {array.mutable_data(), static_cast<size_t>(array.size())};
}

// positions.shape + (width,): the shape of one vector per position.
std::vector<int64_t> RowsShape(const py::array& positions, int64_t width) {
  std::vector<int64_t> shape = ShapeOf(positions);
  shape.push_back(width);
  return shape;
}

// A numpy view of a LearnedPositions buffer that keeps the owning Python object alive.
py::array_t<float> TableView(const py::object& self, std::span<float> data, int64_t rows,
                             int64_t cols) {
  return py::array_t<float>({rows, cols}, data.data(), self);
}

// The library allocates a table as large as the address space allows; the bindings hold it to
// their cap on allocations.
void RequireTableSize(int64_t max_positions, int64_t d_model) {
  const std::vector<int64_t> shape = {max_positions, d_model};
  RequireOutputSize(shape, sizeof(float), "learned", "[max_positions, d_model]", "float32");
}

}  // namespace

void BindAbsolute(py::module_& m) {
  py::class_<Sinusoidal>(m, "Sinusoidal", R"(Sinusoidal positions (Vaswani et al. 2017):
PE(p, 2i) = sin(p / base^(2i / dim)), PE(p, 2i + 1) = cos(p / base^(2i / dim)).)")
      .def(py::init([](int64_t dim, double base) {
             Sinusoidal spec{dim, base};
             spec.Validate();
             return spec;
           }),
           py::arg("dim"), py::arg("base") = 10000.0)
      .def_readwrite("dim", &Sinusoidal::dim)
      .def_readwrite("base", &Sinusoidal::base)
      .def("validate", &Sinusoidal::Validate)
      .def("frequency", &Sinusoidal::Frequency, py::arg("column"),
           "base^(-2 floor(column/2) / dim) radians per position.")
      .def("wavelength", &Sinusoidal::Wavelength, py::arg("column"),
           "2 pi / frequency(column), in positions.")
      .def("value", &SinusoidalValue, py::arg("pos"), py::arg("column"),
           "PE(pos, column) in double.");

  m.def(
      "sinusoidal_table",
      [](int64_t tokens, int64_t dim, double base) {
        const Sinusoidal spec{dim, base};
        spec.Validate();
        Require(tokens >= 0, "sinusoidal", "tokens", "be >= 0", tokens);
        const std::vector<int64_t> shape = {tokens, dim};
        RequireOutputSize(shape, sizeof(float), "sinusoidal", "[tokens, dim]", "float32");
        py::array_t<float> out(shape);
        std::span<float> values = Flat(out);
        py::gil_scoped_release release;
        FillSinusoidalTable(spec, tokens, values);
        return out;
      },
      py::arg("tokens"), py::arg("dim"), py::arg("base") = 10000.0,
      "float32 [tokens, dim]: row p is PE(p) for p = 0 .. tokens - 1 (what `posenc table "
      "sinusoidal` writes).");

  m.def(
      "sinusoidal",
      [](const py::object& positions, int64_t dim, double base, const py::object& out_arg) {
        const Sinusoidal spec{dim, base};
        spec.Validate();
        const py::array_t<int64_t> pos = Int64Array(positions, "sinusoidal", "positions");
        py::array_t<float> out = OutputArray(out_arg, RowsShape(pos, dim), "sinusoidal");
        const std::span<const int64_t> p = Flat(pos);
        const std::span<float> values = Flat(out);
        py::gil_scoped_release release;
        FillSinusoidal(spec, p, values);
        return out;
      },
      py::arg("positions"), py::arg("dim"), py::arg("base") = 10000.0, py::kw_only(),
      py::arg("out") = py::none(),
      "float32 [..., dim]: PE(positions[...]) for int64 positions [...] (each >= 0), into "
      "`out` (C-contiguous) or a new array.");

  py::class_<LearnedPositions>(m, "LearnedPositions", R"(A learned absolute position table
(GPT-2 style): float32 [max_positions, d_model]; position p reads row p, and a position at or past
max_positions is an error, never a wrap or clamp.)")
      .def(py::init([](int64_t max_positions, int64_t d_model) {
             RequireTableSize(max_positions, d_model);
             return LearnedPositions(max_positions, d_model);
           }),
           py::arg("max_positions"), py::arg("d_model"), "A zero table.")
      .def_static(
          "random",
          [](int64_t max_positions, int64_t d_model, uint64_t seed, double stddev) {
            RequireTableSize(max_positions, d_model);
            return LearnedPositions::Random(max_positions, d_model, seed, stddev);
          },
          py::arg("max_positions"), py::arg("d_model"), py::arg("seed"), py::arg("stddev") = 0.02,
          "A table drawn from N(0, stddev^2) with a fixed seed (reproducible).")
      .def_static("load", &LearnedPositions::Load, py::arg("path"),
                  "Loads a 2-D float32 or float64 .npy file [max_positions, d_model].")
      .def("save", &LearnedPositions::Save, py::arg("path"),
           "Saves the table as float32 .npy [max_positions, d_model].")
      .def_property_readonly("max_positions", &LearnedPositions::max_positions)
      .def_property_readonly("d_model", &LearnedPositions::d_model)
      .def_property_readonly(
          "table",
          [](const py::object& self) {
            auto& table = self.cast<LearnedPositions&>();
            return TableView(self, table.table(), table.max_positions(), table.d_model());
          },
          "float32 [max_positions, d_model]: a writeable view of the table (no copy).")
      .def_property_readonly(
          "grad",
          [](const py::object& self) {
            auto& table = self.cast<LearnedPositions&>();
            return TableView(self, table.grad(), table.max_positions(), table.d_model());
          },
          "float32 [max_positions, d_model]: a writeable view of the accumulated gradient.")
      .def(
          "lookup",
          [](const LearnedPositions& table, const py::object& positions,
             const py::object& out_arg) {
            const py::array_t<int64_t> pos = Int64Array(positions, "learned", "positions");
            py::array_t<float> out =
                OutputArray(out_arg, RowsShape(pos, table.d_model()), "learned");
            const std::span<const int64_t> p = Flat(pos);
            const std::span<float> values = Flat(out);
            py::gil_scoped_release release;
            table.Lookup(p, values);
            return out;
          },
          py::arg("positions"), py::kw_only(), py::arg("out") = py::none(),
          "Forward: float32 [..., d_model] with out[...] = table[positions[...]] for int64 "
          "positions [...].")
      .def(
          "accumulate_gradient",
          [](LearnedPositions& table, const py::object& positions, const py::object& grad_out) {
            const py::array_t<int64_t> pos = Int64Array(positions, "learned", "positions");
            const py::array grad = AsArray(grad_out, "learned", "grad_out");
            RequireDtype<float>(grad, "learned", "grad_out");
            const std::vector<int64_t> shape = RowsShape(pos, table.d_model());
            Require(ShapeOf(grad) == shape, "learned", "grad_out.shape",
                    "be positions.shape + (d_model,) = " + NpyShapeString(shape),
                    ShapeString(grad));
            const auto contiguous = py::array_t<float, py::array::c_style>::ensure(grad);
            const std::span<const int64_t> p = Flat(pos);
            const std::span<const float> g(contiguous.data(),
                                           static_cast<size_t>(contiguous.size()));
            py::gil_scoped_release release;
            table.AccumulateGradient(p, g);
          },
          py::arg("positions"), py::arg("grad_out"),
          "Backward: grad[positions[...]] += grad_out[...] for grad_out float32 [..., "
          "d_model]; repeated positions accumulate.")
      .def("zero_gradient", &LearnedPositions::ZeroGradient);

  m.def(
      "embed_tokens",
      [](const py::object& token_table, const py::object& ids, const py::object& positions,
         const py::object& scheme, const py::object& out_arg) {
        const py::array table = AsArray(token_table, "embed", "token_table");
        RequireDtype<float>(table, "embed", "token_table");
        Require(table.ndim() == 2, "embed", "token_table.shape", "be [vocab_size, d_model]",
                ShapeString(table));
        Require((table.flags() & py::array::c_style) != 0, "embed", "token_table",
                "be C-contiguous", "a strided array");
        const py::array_t<int64_t> id_array = Int64Array(ids, "embed", "ids");
        const py::array_t<int64_t> pos = Int64Array(positions, "embed", "positions");
        Require(ShapeOf(pos) == ShapeOf(id_array), "embed", "positions.shape",
                "equal ids.shape " + ShapeString(id_array), ShapeString(pos));
        const TokenTable tokens{
            {static_cast<const float*>(table.data()), static_cast<size_t>(table.size())},
            table.shape(0),
            table.shape(1)};
        const bool learned = py::isinstance<LearnedPositions>(scheme);
        Require(learned || py::isinstance<Sinusoidal>(scheme), "embed", "scheme",
                "be a Sinusoidal or a LearnedPositions",
                std::string(py::str(py::type::of(scheme).attr("__name__"))));
        const AbsolutePositions absolute =
            learned ? AbsolutePositions(std::cref(scheme.cast<const LearnedPositions&>()))
                    : AbsolutePositions(scheme.cast<Sinusoidal>());
        py::array_t<float> out = OutputArray(out_arg, RowsShape(id_array, tokens.d_model), "embed");
        const std::span<float> values = Flat(out);
        py::gil_scoped_release release;
        EmbedTokens(tokens, Flat(id_array), Flat(pos), absolute, values);
        return out;
      },
      py::arg("token_table"), py::arg("ids"), py::arg("positions"), py::arg("scheme"),
      py::kw_only(), py::arg("out") = py::none(),
      "float32 [..., d_model]: token_table[ids] + position(positions) for int64 ids and "
      "positions of the same shape [...], token_table float32 [vocab_size, d_model] "
      "(C-contiguous) and scheme a Sinusoidal or a LearnedPositions.");
}

}  // namespace posenc::python
