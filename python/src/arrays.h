// Conversions from numpy arrays to posenc's views, shared by the bindings.
//
// Only shapes and strides are read: activations are never copied. An array
// [..., tokens, heads, head_dim] becomes one Heads view when its leading (batch) dims step over
// each other like a C-contiguous batch, so one kernel call covers the batch; otherwise (e.g. a
// transposed Hugging Face [batch, heads, seq, dim] tensor) it becomes one view per batch element.
// Every problem is a posenc::Error with the library's message pattern, so Python sees a
// ValueError that reads like the C++ one.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/batch.h"
#include "posenc/error.h"
#include "posenc/heads.h"
#include "posenc/npy.h"
#include "posenc/storage.h"

namespace posenc::python {

namespace py = pybind11;

// The numpy name of an array's dtype ("float32", "int64", ...), for messages.
std::string DtypeName(const py::array& array);

// Python's repr of an array's shape: "(2, 3)".
std::string ShapeString(const py::array& array);

// The numpy array `value` itself (never a converted copy, which in-place calls would silently
// write to); anything else is a posenc::Error naming the argument.
py::array AsArray(const py::object& value, std::string_view function, std::string_view name);

// Attention's sinks keyword: None (no sinks: empty) or a 1-D float32 array [num_heads], copied
// (any stride). Its length and values are the library's to check (AttentionOptions::sinks).
std::vector<float> SinkValues(const py::object& value, std::string_view function);

// The size of an array's elements in bytes, asked of numpy. pybind11 before 2.12 (Debian 12 has
// 2.10) reads py::array::itemsize() from the dtype descriptor's numpy 1 layout, in which numpy 2
// moved the element size: under numpy 2 it returns another field's bits.
inline ssize_t ItemSize(const py::array& array) {
  return array.dtype().attr("itemsize").cast<ssize_t>();
}

// Whether `array` holds elements of type T, and T's name in messages. float16 is numpy's own;
// bfloat16 has no numpy dtype, so its bits travel in a 2-byte integer array (from PyTorch:
// tensor.view(torch.int16)), a reinterpretation that copies nothing. The dtype's character code
// ('e' float16, 'h' int16, 'H' uint16) sits where numpy 1 and 2 both keep it (see ItemSize).
template <typename T>
bool HoldsElement(const py::array& array) {
  if constexpr (std::is_same_v<T, Float16>) {
    return array.dtype().char_() == 'e';
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return array.dtype().char_() == 'h' || array.dtype().char_() == 'H';
  } else {
    return py::isinstance<py::array_t<T>>(array);
  }
}
template <typename T>
std::string ElementName() {
  if constexpr (std::is_same_v<T, Float16>) {
    return "float16";
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return "int16 or uint16 (bfloat16 bits)";
  } else {
    return py::str(py::dtype::of<T>());
  }
}

// Throws posenc::Error unless `array` holds T ("[function] name must have dtype float32, got
// float64"), and, when `writable`, unless numpy allows writing to it.
template <typename T>
void RequireDtype(const py::array& array, std::string_view function, std::string_view name,
                  bool writable = false) {
  // Names are Python calls (numpy's dtype.__str__): formed only for the message.
  if (!HoldsElement<T>(array)) {
    Require(false, function, name, "have dtype " + ElementName<T>(), DtypeName(array));
  }
  Require(!writable || array.writeable(), function, name, "be writeable", "a read-only array");
}

// An array [..., tokens, heads, head_dim] as a batch of Heads views (element strides).
template <typename T>
using BatchedHeads = Batched<Heads<T>>;

// Throws posenc::Error unless `view` has the batch shape of `first` (names for the message).
template <typename A, typename B>
void RequireSameBatch(const BatchedHeads<A>& first, const BatchedHeads<B>& view,
                      std::string_view function, std::string_view first_name,
                      std::string_view name) {
  Require(view.batch_shape == first.batch_shape, function, std::string(name) + ".shape[:-3]",
          "equal " + std::string(first_name) + "'s batch dims " + NpyShapeString(first.batch_shape),
          NpyShapeString(view.batch_shape));
}

// Reads a numpy array of dtype std::remove_const_t<T> laid out [..., tokens, heads, head_dim] (at
// least 3 dims, head_dim contiguous, strides multiples of the item size). `name` is the argument's
// name in messages. A T that is not const requires a writeable array.
template <typename T>
BatchedHeads<T> ViewHeads(const py::object& value, std::string_view function,
                          std::string_view name) {
  using Element = std::remove_const_t<T>;
  const py::array array = AsArray(value, function, name);
  RequireDtype<Element>(array, function, name, !std::is_const_v<T>);
  const auto ndim = static_cast<int64_t>(array.ndim());
  Require(ndim >= 3, function, std::string(name) + ".shape",
          "be [..., tokens, heads, head_dim] (at least 3 dims)", ShapeString(array));
  constexpr auto kItem = static_cast<int64_t>(sizeof(Element));
  std::vector<int64_t> strides(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    const auto bytes = static_cast<int64_t>(array.strides(i));
    Require(bytes % kItem == 0, function, std::string(name) + ".strides[" + std::to_string(i) + "]",
            "be a multiple of the item size (" + std::to_string(kItem) + " bytes)", bytes);
    strides[i] = bytes / kItem;
  }
  const auto shape = [&](int64_t i) { return static_cast<int64_t>(array.shape(i)); };
  // An empty array has nothing to lay out (numpy and torch give it arbitrary strides).
  Require(array.size() == 0 || shape(ndim - 1) == 1 || strides[ndim - 1] == 1, function,
          std::string(name) + ".strides[-1]",
          "be the item size (" + std::to_string(kItem) +
              " bytes): head_dim must be contiguous; use np.ascontiguousarray or "
              "tensor.contiguous()",
          strides[ndim - 1] * kItem);
  BatchedHeads<T> batched;
  batched.name = name;
  batched.batch_shape.assign(array.shape(), array.shape() + ndim - 3);
  batched.batch_strides.assign(strides.begin(), strides.end() - 3);
  // numpy's data() of a read-only array is const; writability was checked above.
  batched.first = {static_cast<T*>(const_cast<void*>(array.data())),
                   shape(ndim - 3),
                   shape(ndim - 2),
                   shape(ndim - 1),
                   strides[ndim - 3],
                   strides[ndim - 2]};
  return batched;
}

// The positions of a batch: int64 [tokens] (shared by every batch element) or
// [..., tokens] with the batch's leading dims (one list per element). Python sequences of ints
// are accepted; an ndarray of another dtype is an error, never a silent cast.
class BatchPositions {
 public:
  // `batch_shape` and `tokens` are those of the activations the positions belong to.
  BatchPositions(const py::object& positions, std::span<const int64_t> batch_shape, int64_t tokens,
                 std::string_view function, std::string_view name = "positions");

  // The positions as the library's batch: one list shared by every element, or a list each.
  BatchedPositions Batch() const;
  int64_t ListSize() const { return tokens_; }

 private:
  py::array_t<int64_t> array_;  // keeps all_ alive
  std::span<const int64_t> all_;
  std::vector<int64_t> batch_shape_;
  int64_t tokens_ = 0;
  bool shared_ = true;
};

// The one position rule of every API (posenc/positions.h: each position in [0, kMaxPosition]),
// checked over a whole int64 array of any shape before any work. The first bad entry is named as
// Python indexes it, name[i][j]...; a 0-d array is named `name` alone.
void RequirePositions(std::string_view function, const py::array& positions, std::string_view name);

// Field `index` of a pickled state as T. A tampered state whose field has the wrong type is a
// posenc::Error naming the field ("[rope] pickled state[0] (head_dim) must be an int, got str"),
// not pybind11's "Unable to cast".
template <typename T>
T StateField(const py::tuple& state, size_t index, std::string_view function,
             std::string_view field, std::string_view rule) {
  try {
    return state[index].cast<T>();
  } catch (const py::cast_error&) {
    throw Error(ErrorMessage(
        function, "pickled state[" + std::to_string(index) + "] (" + std::string(field) + ")", rule,
        std::string(py::str(py::type::of(state[index]).attr("__name__")))));
  }
}

// An int64 C-contiguous array from `values`: an ndarray must already be int64 (a strided one is
// copied: positions and ids are small); a sequence of Python ints is converted.
py::array_t<int64_t> Int64Array(const py::object& values, std::string_view function,
                                std::string_view name);

// A 1-D int64 list (ids, positions with no batch), as a span valid while `array` lives.
std::span<const int64_t> IntList(const py::object& values, py::array_t<int64_t>& array,
                                 std::string_view function, std::string_view name);

// The cap on every array the bindings allocate for a result: 16 GiB. A result past it is refused
// before anything is allocated (a caller who means it passes `out=`, where offered).
constexpr int64_t kMaxOutputBytes = int64_t{1} << 34;

// Throws posenc::Error unless an array of `shape` and `item_bytes` per element fits under
// kMaxOutputBytes (the product is checked for overflow). A negative size is left to the check
// that names it. `dtype` is the element's name in the message.
// Whether an array of this shape fits kMaxOutputBytes (RequireOutputSize's test, without the
// message).
bool OutputFits(std::span<const int64_t> shape, int64_t item_bytes);

void RequireOutputSize(std::span<const int64_t> shape, int64_t item_bytes,
                       std::string_view function, std::string_view name, std::string_view dtype);

// A new C-contiguous float32 array of `shape` (within kMaxOutputBytes), or `out` after checking
// its dtype, shape and contiguity.
py::array_t<float> OutputArray(const py::object& out, const std::vector<int64_t>& shape,
                               std::string_view function, std::string_view name = "out");

// Shape of an array as a vector.
std::vector<int64_t> ShapeOf(const py::array& array);

}  // namespace posenc::python
