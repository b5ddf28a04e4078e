// The posenc._core extension module: thin bindings over the C++ library. Python only converts
// arrays and forwards; the math, the checks and the messages are the library's.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "bindings.h"
#include "posenc/error.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "posenc: position encodings for transformers (C++ core).";
  // posenc.Error derives from ValueError, as posenc::Error derives from std::invalid_argument:
  // callers may catch either, and the message is the library's.
  pybind11::register_exception<posenc::Error>(m, "Error", PyExc_ValueError);
  m.attr("MAX_OUTPUT_BYTES") = posenc::python::kMaxOutputBytes;
  posenc::python::BindRope(m);
  posenc::python::BindAbsolute(m);
  posenc::python::BindAlibi(m);
  posenc::python::BindAttention(m);
  posenc::python::BindHfConfig(m);
  posenc::python::BindRelativeBias(m);
  posenc::python::BindMRope(m);
  posenc::python::BindKvCache(m);
}
