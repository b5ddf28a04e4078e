// The arrays of the rotation calls, shared by apply_rope* (rope_bindings.cc) and apply_mrope*
// (mrope_bindings.cc): which element type an activation array selects, the output array a call
// allocates when the caller gives none, and the shape an output must share with its input.
#pragma once

#include <string_view>

#include "arrays.h"

namespace posenc::python {

// Calls f(T{}) with T the element type of x: float, double, Float16, or BFloat16 when the caller
// says that x holds bfloat16 bits. float32, bfloat16 and float16 run the library's kernels;
// float64 runs its double-precision reference. `function` and `name` are for the message.
template <typename F>
auto DispatchElement(const py::object& x, bool bfloat16, std::string_view function,
                     std::string_view name, const F& f) {
  if (bfloat16) return f(BFloat16{});
  if (py::isinstance<py::array>(x)) {
    const auto array = py::reinterpret_borrow<py::array>(x);
    if (HoldsElement<double>(array)) return f(double{});
    if (HoldsElement<Float16>(array)) return f(Float16{});
    Require(HoldsElement<float>(array), function, name,
            "have dtype float32, float64 or float16 (or hold bfloat16 bits, with bfloat16=True)",
            DtypeName(array));
  }
  return f(float{});  // the float path also reports an argument that is not an array
}

// The caller's `out`, or a new C-contiguous array of the shape and dtype of `like` (within
// kMaxOutputBytes). `name` is like's argument name.
py::object OutputLike(const py::object& out, const py::object& like, std::string_view function,
                      std::string_view name);

// Throws posenc::Error unless arrays a and b have the same shape ("b.shape must equal a.shape").
void RequireSameShape(const py::object& a, const py::object& b, std::string_view function,
                      std::string_view a_name, std::string_view b_name);

}  // namespace posenc::python
