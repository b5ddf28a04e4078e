#include "batch_call.h"

namespace posenc::internal {

void RequireDisjointBatch(std::string_view function, std::span<const BatchRows> views) {
  for (size_t j = 0; j < views.size(); ++j) {
    const BatchRows& view = views[j];
    if (view.written && !view.rows.Nested()) {
      Require(false, function, view.name, "not have batch elements that share memory",
              "strides " + NpyShapeString(view.byte_strides));
    }
    for (size_t i = 0; i < j; ++i) {
      if (!(views[i].written || view.written) || !ShareRows(views[i].rows, view.rows)) continue;
      Require(false, function, view.name, "not share memory with " + std::string(views[i].name),
              "overlapping views");
    }
  }
}

std::optional<std::span<const int64_t>> FoldPositions(const BatchedPositions& positions,
                                                      int64_t count,
                                                      std::vector<int64_t>& repeated) {
  const std::span<const int64_t> list = positions.first;
  if (count == 1) return list;
  if (SharedByTheBatch(positions)) {
    repeated.clear();
    repeated.reserve(list.size() * static_cast<size_t>(count));
    for (int64_t b = 0; b < count; ++b) repeated.insert(repeated.end(), list.begin(), list.end());
    return std::span<const int64_t>(repeated);
  }
  // Lists of their own: one span when they lie end to end in batch order.
  auto step = static_cast<int64_t>(list.size());
  for (size_t i = positions.batch_shape.size(); i-- > 0;) {
    if (positions.batch_shape[i] == 1) continue;
    if (positions.batch_strides[i] != step) return std::nullopt;
    step *= positions.batch_shape[i];
  }
  return std::span<const int64_t>(list.data(), list.size() * static_cast<size_t>(count));
}

std::optional<PositionStreams> FoldPositions(const Batched<PositionStreams>& positions,
                                             int64_t count, std::vector<int64_t>&) {
  PositionStreams streams = positions.first;
  if (count == 1 || streams.tokens == 0) {
    streams.tokens *= count;
    return streams;
  }
  if (SharedByTheBatch(positions)) {
    if (streams.tokens != 1) return std::nullopt;
    streams.token_stride = 0;
  } else {
    int64_t step = streams.token_stride, extent = streams.tokens;
    bool have_inner = streams.tokens > 1;
    for (size_t i = positions.batch_shape.size(); i-- > 0;) {
      if (positions.batch_shape[i] == 1) continue;
      if (have_inner && positions.batch_strides[i] != step * extent) return std::nullopt;
      if (!have_inner) streams.token_stride = positions.batch_strides[i];
      step = positions.batch_strides[i], extent = positions.batch_shape[i], have_inner = true;
    }
  }
  streams.tokens *= count;
  return streams;
}

}  // namespace posenc::internal
