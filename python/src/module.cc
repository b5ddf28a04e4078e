// The posenc._core extension module: thin bindings over the C++ library. Python only converts
// arrays and forwards; the math, the checks and the messages are the library's.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "bindings.h"
#include "posenc/error.h"
#include "posenc/positions.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "posenc: position encodings for transformers (C++ core).";
  // posenc.Error derives from ValueError, as posenc::Error derives from std::invalid_argument:
  // callers may catch either, and the message is the library's.
  pybind11::register_exception<posenc::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = POSENC_VERSION;  // the project's version, as `posenc --version` prints
  m.attr("MAX_OUTPUT_BYTES") = posenc::python::kMaxOutputBytes;
  m.attr("MAX_POSITION") = posenc::kMaxPosition;
  // The position rule in one place for the Python front ends too: the torch paths that do not
  // reach a binding (float64, float16, other devices) check their positions here first.
  m.def(
      "validate_positions",
      [](std::string_view function, const pybind11::object& positions, std::string_view name) {
        posenc::python::RequirePositions(
            function, posenc::python::Int64Array(positions, function, name), name);
      },
      pybind11::arg("function"), pybind11::arg("positions"), pybind11::arg("name") = "positions",
      R"(Raises posenc.Error unless every position (an int, or an int64 array of any shape) is in
[0, 2^32] (kMaxPosition), with the message of every other API: "[function] name[i][j] must be
<= 2^32 = 4294967296 (kMaxPosition, ...), got ...".)");
  // Python can hold an instance of a posenc class whose __init__ never ran or raised
  // (`KVCache.__new__(KVCache)`); pybind11 would hand its methods uninitialized memory.
  // posenc._arguments asks here first (pybind11's own flag of a built object).
  m.def(
      "_constructed",
      [](const pybind11::handle& object) {
        if (pybind11::detail::get_type_info(Py_TYPE(object.ptr())) == nullptr) {
          return true;  // not a pybind11 instance: pybind11's own argument check answers
        }
        auto* instance = reinterpret_cast<pybind11::detail::instance*>(object.ptr());
        return instance->get_value_and_holder().holder_constructed();
      },
      pybind11::arg("object"));
  posenc::python::BindRope(m);
  posenc::python::BindAbsolute(m);
  posenc::python::BindAlibi(m);
  posenc::python::BindAttention(m);
  posenc::python::BindHfConfig(m);
  posenc::python::BindRelativeBias(m);
  posenc::python::BindMRope(m);
  posenc::python::BindKvCache(m);
  posenc::python::BindKvCacheBatch(m);
}
