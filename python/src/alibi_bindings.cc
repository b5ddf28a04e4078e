// ALiBi slopes and biases on numpy arrays (posenc/alibi.h).
#include <pybind11/stl.h>

#include "arrays.h"
#include "bindings.h"
#include "posenc/alibi.h"
#include "posenc/npy.h"
#include "posenc/positions.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "alibi";

// Fills out[h, i, j] = AlibiBias(slopes[h], query_pos[i], key_pos[j]) for a C-contiguous out.
template <typename T>
void FillBias(const std::vector<double>& slopes, std::span<const int64_t> query_pos,
              std::span<const int64_t> key_pos, T* out) {
  for (double slope : slopes) {
    for (int64_t i : query_pos) {
      for (int64_t j : key_pos) *out++ = static_cast<T>(AlibiBias(slope, i, j));
    }
  }
}

}  // namespace

void BindAlibi(py::module_& m) {
  py::class_<Alibi>(m, "Alibi", R"(ALiBi (Press et al. 2022): head h adds
bias(i, j) = -slope[h] * (i - j) to its scores. max_bias = 8 gives the paper's slopes; head_offset
and shard_heads select a tensor-parallel shard (shard_heads = 0: all heads from head_offset).)")
      .def(py::init(
               [](int64_t num_heads, double max_bias, int64_t head_offset, int64_t shard_heads) {
                 Alibi alibi{num_heads, max_bias, head_offset, shard_heads};
                 alibi.Validate();
                 return alibi;
               }),
           py::arg("num_heads"), py::kw_only(), py::arg("max_bias") = 8.0,
           py::arg("head_offset") = 0, py::arg("shard_heads") = 0)
      .def_readwrite("num_heads", &Alibi::num_heads)
      .def_readwrite("max_bias", &Alibi::max_bias)
      .def_readwrite("head_offset", &Alibi::head_offset)
      .def_readwrite("shard_heads", &Alibi::shard_heads)
      .def("validate", &Alibi::Validate)
      .def("__eq__",
           [](const Alibi& a, const py::object& other) {
             return py::isinstance<Alibi>(other) && a == other.cast<const Alibi&>();
           })
      .def(py::pickle(
          [](const Alibi& alibi) {
            return py::make_tuple(alibi.num_heads, alibi.max_bias, alibi.head_offset,
                                  alibi.shard_heads);
          },
          [](const py::tuple& state) {
            Require(state.size() == 4, "alibi", "pickled state", "hold 4 fields", state.size());
            constexpr std::string_view kAlibi = "alibi", kInt = "be an int";
            Alibi alibi{StateField<int64_t>(state, 0, kAlibi, "num_heads", kInt),
                        StateField<double>(state, 1, kAlibi, "max_bias", "be a float"),
                        StateField<int64_t>(state, 2, kAlibi, "head_offset", kInt),
                        StateField<int64_t>(state, 3, kAlibi, "shard_heads", kInt)};
            alibi.Validate();
            return alibi;
          }))
      .def("local_heads", &Alibi::LocalHeads, "The number of heads this shard holds.");

  m.def(
      "alibi_slopes",
      [](const Alibi& alibi) {
        alibi.Validate();
        const int64_t heads[] = {alibi.LocalHeads()};
        RequireOutputSize(heads, sizeof(double), "alibi", "local_heads", "float64");
        const std::vector<double> slopes = AlibiSlopes(alibi);
        return py::array_t<double>(static_cast<py::ssize_t>(slopes.size()), slopes.data());
      },
      py::arg("alibi"),
      "float64 [local_heads]: the slopes of heads head_offset .. head_offset + local_heads - 1.");

  m.def(
      "alibi_bias",
      [](const Alibi& alibi, const py::object& query_positions, const py::object& key_positions,
         const py::object& out_arg) {
        py::array_t<int64_t> query_array, key_array;
        const std::span<const int64_t> query_pos =
            IntList(query_positions, query_array, kFn, "query_positions");
        const std::span<const int64_t> key_pos =
            key_positions.is_none() ? query_pos
                                    : IntList(key_positions, key_array, kFn, "key_positions");
        // Checked here so that the message names the Python arguments.
        ValidatePositions(kFn, query_pos, static_cast<int64_t>(query_pos.size()),
                          "query_positions");
        ValidatePositions(kFn, key_pos, static_cast<int64_t>(key_pos.size()), "key_positions");
        alibi.Validate();
        const std::vector<int64_t> shape = {alibi.LocalHeads(),
                                            static_cast<int64_t>(query_pos.size()),
                                            static_cast<int64_t>(key_pos.size())};
        // Before the slopes, which are as many as the heads.
        if (out_arg.is_none()) RequireOutputSize(shape, sizeof(float), kFn, "out.shape", "float32");
        const std::vector<double> slopes = AlibiSlopes(alibi);
        if (!out_arg.is_none() && py::isinstance<py::array_t<double>>(out_arg)) {
          auto out = py::reinterpret_borrow<py::array_t<double>>(out_arg);
          Require(
              ShapeOf(out) == shape && (out.flags() & py::array::c_style) != 0 && out.writeable(),
              kFn, "out", "be a writeable C-contiguous array of shape " + NpyShapeString(shape),
              ShapeString(out));
          double* data = out.mutable_data();
          {
            py::gil_scoped_release release;
            FillBias(slopes, query_pos, key_pos, data);
          }
          return py::object(out);
        }
        py::array_t<float> out = OutputArray(out_arg, shape, kFn);
        float* data = out.mutable_data();
        {
          py::gil_scoped_release release;
          FillBias(slopes, query_pos, key_pos, data);
        }
        return py::object(out);
      },
      py::arg("alibi"), py::arg("query_positions"), py::arg("key_positions") = py::none(),
      py::kw_only(), py::arg("out") = py::none(),
      "[local_heads, queries, keys]: out[h, i, j] = -slope[h] * (query_positions[i] - "
      "key_positions[j]) for int64 position lists (key_positions defaults to the queries'); "
      "into `out` (float32 or float64, C-contiguous) or a new float32 array.");
}

}  // namespace posenc::python
