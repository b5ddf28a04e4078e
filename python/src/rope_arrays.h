// The arrays of the rotation calls, shared by apply_rope* (rope_bindings.cc) and apply_mrope*
// (mrope_bindings.cc): which element type an activation array selects, the output array a call
// allocates when the caller gives none, the shape an output must share with its input, and the
// views of x (or q and k) and their outputs that every rotation reads them through.
#pragma once

#include <string_view>
#include <utility>

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
    if (!HoldsElement<float>(array)) {
      Require(false, function, name,
              "have dtype float32, float64 or float16 (or hold bfloat16 bits, with bfloat16=True)",
              DtypeName(array));
    }
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

// x read and out written by a rotation into an output: out is the caller's, or a new array like
// x when the caller gives None, and has x's shape.
template <typename T>
struct IntoViews {
  py::object out;
  BatchedHeads<const T> in;
  BatchedHeads<T> dst;
};
template <typename T>
IntoViews<T> ViewInto(const py::object& x, const py::object& out_arg, std::string_view function) {
  py::object out = OutputLike(out_arg, x, function, "x");
  RequireSameShape(x, out, function, "x", "out");
  auto in = ViewHeads<const T>(x, function, "x");
  auto dst = ViewHeads<T>(out, function, "out");
  return {std::move(out), std::move(in), std::move(dst)};
}

// q and k rotated in place: the same batch dims (their head counts may differ).
template <typename T>
std::pair<BatchedHeads<T>, BatchedHeads<T>> ViewQk(const py::object& q, const py::object& k,
                                                   std::string_view function) {
  auto qv = ViewHeads<T>(q, function, "q");
  auto kv = ViewHeads<T>(k, function, "k");
  RequireSameBatch(qv, kv, function, "q", "k");
  return {std::move(qv), std::move(kv)};
}

// q and k read and q_out and k_out written by a rotation into outputs, as ViewInto and ViewQk
// make them.
template <typename T>
struct QkIntoViews {
  py::object q_out, k_out;
  BatchedHeads<const T> q, k;
  BatchedHeads<T> q_dst, k_dst;
};
template <typename T>
QkIntoViews<T> ViewQkInto(const py::object& q, const py::object& k, const py::object& q_out_arg,
                          const py::object& k_out_arg, std::string_view function) {
  py::object q_out = OutputLike(q_out_arg, q, function, "q");
  py::object k_out = OutputLike(k_out_arg, k, function, "k");
  RequireSameShape(q, q_out, function, "q", "q_out");
  RequireSameShape(k, k_out, function, "k", "k_out");
  auto qi = ViewHeads<const T>(q, function, "q");
  auto ki = ViewHeads<const T>(k, function, "k");
  auto qo = ViewHeads<T>(q_out, function, "q_out");
  auto ko = ViewHeads<T>(k_out, function, "k_out");
  RequireSameBatch(qi, ki, function, "q", "k");
  return {std::move(q_out), std::move(k_out), std::move(qi),
          std::move(ki),    std::move(qo),    std::move(ko)};
}

}  // namespace posenc::python
