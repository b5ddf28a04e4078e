#include "rope_arrays.h"

#include <string>
#include <vector>

#include "posenc/npy.h"

namespace posenc::python {

py::object OutputLike(const py::object& out, const py::object& like, std::string_view function,
                      std::string_view name) {
  if (!out.is_none()) return out;
  const py::array array = AsArray(like, function, name);
  // `like` may be a broadcast view of far more elements than its memory holds.
  const std::vector<int64_t> shape = ShapeOf(array);
  const ssize_t item_size = ItemSize(array);
  if (!OutputFits(shape, item_size)) {  // the dtype's name is a Python call: only to fail
    RequireOutputSize(shape, item_size, function, "out.shape", DtypeName(array));
  }
  // C-contiguous strides from numpy's item size, given explicitly: pybind11 2.10 would derive
  // them from its own reading of the element size, wrong under numpy 2 (ItemSize).
  std::vector<int64_t> strides(shape.size());
  int64_t stride = item_size;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return py::array(array.dtype(), shape, strides);
}

void RequireSameShape(const py::object& a, const py::object& b, std::string_view function,
                      std::string_view a_name, std::string_view b_name) {
  const std::vector<int64_t> shape_a = ShapeOf(AsArray(a, function, a_name));
  const std::vector<int64_t> shape_b = ShapeOf(AsArray(b, function, b_name));
  Require(shape_b == shape_a, function, std::string(b_name) + ".shape",
          "equal " + std::string(a_name) + ".shape " + NpyShapeString(shape_a),
          NpyShapeString(shape_b));
}

}  // namespace posenc::python
