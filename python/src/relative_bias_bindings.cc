// T5's relative-position buckets (posenc/relative_bias.h).
#include <pybind11/numpy.h>

#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "posenc/error.h"
#include "posenc/relative_bias.h"

namespace posenc::python {

void BindRelativeBias(py::module_& m) {
  m.def(
      "relative_position_bucket",
      [](const py::object& relative_position, int64_t num_buckets, int64_t max_distance,
         bool bidirectional) {
        constexpr std::string_view kFn = "relative_position_bucket";
        const RelativeBuckets buckets{.num_buckets = num_buckets,
                                      .max_distance = max_distance,
                                      .bidirectional = bidirectional};
        buckets.Validate();
        const py::array_t<int64_t> in = Int64Array(relative_position, kFn, "relative_position");
        const std::vector<int64_t> shape = ShapeOf(in);
        RequireOutputSize(shape, sizeof(int64_t), kFn, "relative_position.shape", "int64");
        py::array_t<int64_t> out(shape);
        const int64_t* from = in.data();
        int64_t* to = out.mutable_data();
        for (py::ssize_t i = 0; i < in.size(); ++i)
          to[i] = RelativePositionBucket(buckets, from[i]);
        return out;
      },
      py::arg("relative_position"), py::arg("num_buckets") = 32, py::arg("max_distance") = 128,
      py::arg("bidirectional") = true,
      R"(T5's bucket of each relative position key_pos - query_pos (int64 array, any shape; a
sequence of ints is converted, floats are refused) -> int64 array of the same shape, each in
[0, num_buckets). Bit-exact with Hugging Face's T5Attention._relative_position_bucket.
bidirectional: the encoder's buckets (half for keys after the query); False: the decoder's
(keys after the query in bucket 0). |relative_position| must be <= 2^32.)");
}

}  // namespace posenc::python
