#include "arrays.h"

#include <algorithm>

#include "posenc/npy.h"
#include "posenc/positions.h"

namespace posenc::python {

std::string DtypeName(const py::array& array) { return py::str(array.dtype()); }

std::vector<int64_t> ShapeOf(const py::array& array) {
  return std::vector<int64_t>(array.shape(), array.shape() + array.ndim());
}

std::string ShapeString(const py::array& array) { return NpyShapeString(ShapeOf(array)); }

py::array AsArray(const py::object& value, std::string_view function, std::string_view name) {
  Require(py::isinstance<py::array>(value), function, name, "be a numpy array",
          std::string(py::str(py::type::of(value).attr("__name__"))));
  return py::reinterpret_borrow<py::array>(value);
}

std::vector<float> SinkValues(const py::object& value, std::string_view function) {
  if (value.is_none()) return {};
  const py::array array = AsArray(value, function, "sinks");
  RequireDtype<float>(array, function, "sinks");
  Require(array.ndim() == 1, function, "sinks.shape", "be [num_heads] (1-D)", ShapeString(array));
  const auto values = py::array_t<float>(array).unchecked<1>();
  std::vector<float> sinks(static_cast<size_t>(values.shape(0)));
  for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = values(static_cast<py::ssize_t>(h));
  return sinks;
}

py::array_t<int64_t> Int64Array(const py::object& values, std::string_view function,
                                std::string_view name) {
  using Contiguous = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  if (py::isinstance<py::array>(values)) {
    RequireDtype<int64_t>(py::reinterpret_borrow<py::array>(values), function, name);
    return Contiguous::ensure(values);
  }
  // numpy's own conversion first, so that a list holding 0.5 is refused rather than truncated.
  py::array converted = py::array::ensure(values);
  if (!converted) PyErr_Clear();
  const bool integral = converted && (converted.size() == 0 || converted.dtype().kind() == 'i' ||
                                      converted.dtype().kind() == 'u');
  Require(integral, function, name, "be an int64 array or a sequence of ints",
          std::string(py::str(py::type::of(values).attr("__name__"))));
  return Contiguous::ensure(converted);
}

BatchPositions::BatchPositions(const py::object& positions, std::span<const int64_t> batch_shape,
                               int64_t tokens, std::string_view function, std::string_view name)
    : array_(Int64Array(positions, function, name)), tokens_(tokens) {
  const std::vector<int64_t> shape = ShapeOf(array_);
  std::vector<int64_t> batched(batch_shape.begin(), batch_shape.end());
  batched.push_back(tokens);
  shared_ = shape.size() == 1 && shape[0] == tokens;
  Require(shared_ || shape == batched, function, std::string(name) + ".shape",
          "be (tokens,) = " + NpyShapeString(std::vector<int64_t>{tokens}) + " or the batch's " +
              NpyShapeString(batched),
          NpyShapeString(shape));
  all_ = {array_.data(), static_cast<size_t>(array_.size())};
  if (!shared_) batch_shape_.assign(batch_shape.begin(), batch_shape.end());
  RequirePositions(function, array_, name);  // every element's before any is run
}

void RequirePositions(std::string_view function, const py::array& positions,
                      std::string_view name) {
  RequireDtype<int64_t>(positions, function, name);
  using Contiguous = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  const Contiguous array = Contiguous::ensure(positions);  // a strided one is copied: small
  const std::span<const int64_t> all(array.data(), static_cast<size_t>(array.size()));
  const auto bad =
      std::find_if(all.begin(), all.end(), [](int64_t p) { return p < 0 || p > kMaxPosition; });
  if (bad == all.end()) return;
  if (array.ndim() == 0) return ValidatePosition(function, name, *bad);
  // The bad entry's row is named by its index over the leading dims; ValidatePositions names
  // the entry within the row.
  const int64_t tokens = array.shape(array.ndim() - 1);
  const int64_t row = (bad - all.begin()) / tokens;
  std::vector<int64_t> index(static_cast<size_t>(array.ndim() - 1));
  for (int64_t rest = row, d = array.ndim() - 1; d-- > 0; rest /= array.shape(d)) {
    index[static_cast<size_t>(d)] = rest % array.shape(d);
  }
  std::string row_name(name);
  for (int64_t i : index) row_name.append("[").append(std::to_string(i)).append("]");
  const auto row_begin = static_cast<size_t>(row * tokens);
  ValidatePositions(function, all.subspan(row_begin, static_cast<size_t>(tokens)), tokens,
                    row_name);
}

BatchedPositions BatchPositions::Batch() const {
  if (shared_) return BatchedPositions(all_);
  std::vector<int64_t> strides(batch_shape_.size());
  int64_t stride = tokens_;
  for (size_t i = strides.size(); i-- > 0; stride *= batch_shape_[i]) strides[i] = stride;
  const std::span<const int64_t> first =
      all_.empty() ? std::span<const int64_t>() : all_.first(static_cast<size_t>(tokens_));
  return {first, batch_shape_, std::move(strides)};
}

std::span<const int64_t> IntList(const py::object& values, py::array_t<int64_t>& array,
                                 std::string_view function, std::string_view name) {
  array = Int64Array(values, function, name);
  Require(array.ndim() == 1, function, std::string(name) + ".shape", "be 1-D", ShapeString(array));
  return {array.data(), static_cast<size_t>(array.size())};
}

bool OutputFits(std::span<const int64_t> shape, int64_t item_bytes) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t n) { return n <= 0; })) return true;
  int64_t bytes = item_bytes;
  bool fits = true;
  for (int64_t n : shape) fits = fits && !__builtin_mul_overflow(bytes, n, &bytes);
  return fits && bytes <= kMaxOutputBytes;
}

void RequireOutputSize(std::span<const int64_t> shape, int64_t item_bytes,
                       std::string_view function, std::string_view name, std::string_view dtype) {
  Require(
      OutputFits(shape, item_bytes), function, name,
      "hold at most " + std::to_string(kMaxOutputBytes) +
          " bytes (16 GiB, the cap on arrays posenc allocates)",
      NpyShapeString(std::vector<int64_t>(shape.begin(), shape.end())) + " " + std::string(dtype));
}

py::array_t<float> OutputArray(const py::object& out, const std::vector<int64_t>& shape,
                               std::string_view function, std::string_view name) {
  if (out.is_none()) {
    RequireOutputSize(shape, sizeof(float), function, std::string(name) + ".shape", "float32");
    return py::array_t<float>(shape);
  }
  const py::array array = AsArray(out, function, name);
  RequireDtype<float>(array, function, name, /*writable=*/true);
  Require(ShapeOf(array) == shape, function, std::string(name) + ".shape",
          "be " + NpyShapeString(shape), ShapeString(array));
  Require((array.flags() & py::array::c_style) != 0, function, name, "be C-contiguous",
          "a strided array");
  return py::reinterpret_borrow<py::array_t<float>>(array);
}

}  // namespace posenc::python
