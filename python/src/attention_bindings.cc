// Multi-head attention with causal mask, GQA, RoPE and ALiBi on numpy arrays
// (posenc/attention.h).
#include <pybind11/stl.h>

#include "arrays.h"
#include "batch.h"
#include "bindings.h"
#include "posenc/attention.h"
#include "posenc/npy.h"
#include "posenc/positions.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "attention";

template <typename A, typename B>
void RequireBatchOf(const BatchedHeads<A>& q, const BatchedHeads<B>& view, std::string_view name) {
  Require(view.batch_shape == q.batch_shape, kFn, std::string(name) + ".shape[:-3]",
          "equal q's batch dims " + NpyShapeString(q.batch_shape),
          NpyShapeString(view.batch_shape));
}

// posenc.attention on q, k and v of element type T (float, or BFloat16 bits); out is float32.
template <typename T>
py::object AttentionOf(const py::object& q_arg, const py::object& k_arg, const py::object& v_arg,
                       const py::object& query_positions, const py::object& key_positions,
                       AttentionOptions options, const py::object& out_arg) {
  const auto q = ViewHeads<const T>(q_arg, kFn, "q");
  const auto k = ViewHeads<const T>(k_arg, kFn, "k");
  const auto v = ViewHeads<const T>(v_arg, kFn, "v");
  RequireBatchOf(q, k, "k");
  RequireBatchOf(q, v, "v");
  std::vector<int64_t> out_shape = q.batch_shape;
  out_shape.insert(out_shape.end(), {q.first.tokens, q.first.num_heads, v.first.head_dim});
  if (out_arg.is_none()) RequireOutputSize(out_shape, sizeof(float), kFn, "out.shape", "float32");
  const py::object out_object =
      out_arg.is_none() ? py::object(py::array_t<float>(out_shape)) : out_arg;
  const auto out = ViewHeads<float>(out_object, kFn, "out");
  const std::vector<int64_t> given = ShapeOf(AsArray(out_object, kFn, "out"));
  Require(given == out_shape, kFn, "out.shape", "be " + NpyShapeString(out_shape),
          NpyShapeString(given));
  BatchPositions query_pos(query_positions, q.batch_shape, q.first.tokens, kFn,
                           "query_positions");
  BatchPositions key_pos(key_positions.is_none() ? query_positions : key_positions,
                         k.batch_shape, k.first.tokens, kFn, "key_positions");
  // Batch elements share their geometry, so the first call validates every element's views;
  // positions differ per element and are all checked here, before anything is written.
  ValidatePositions(kFn, query_pos.All(), static_cast<int64_t>(query_pos.All().size()),
                    "query_positions");
  ValidatePositions(kFn, key_pos.All(), static_cast<int64_t>(key_pos.All().size()),
                    "key_positions");
  if (IsEmpty(q) || v.first.head_dim == 0) return out_object;  // an empty out: nothing to do
  RequireDisjointBatch(kFn, q, k, v, out);
  // The library refuses an out whose byte range meets an input's within one element, a stricter
  // test than the exact one above; the later elements are checked here before the first runs.
  for (int64_t b = 1; b < q.BatchCount(); ++b) {
    for (const auto& [input, name] : {std::pair{q.At(b), "q"}, {k.At(b), "k"}, {v.At(b), "v"}}) {
      Require(!Overlaps(out.At(b), input), kFn, "out", "not share memory with q, k or v",
              std::string("a view overlapping ") + name);
    }
  }
  {
    py::gil_scoped_release release;
    for (int64_t b = 0; b < q.BatchCount(); ++b) {
      Attention(options, q.At(b), k.At(b), v.At(b), query_pos.At(b), key_pos.At(b), out.At(b));
    }
  }
  return out_object;
}

}  // namespace

void BindAttention(py::module_& m) {
  m.def(
      "attention",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, bool causal,
         std::optional<Alibi> alibi, std::optional<Rope> rope, double scale, int64_t window,
         const py::object& out, bool bfloat16) {
        const AttentionOptions options{causal, std::move(alibi), std::move(rope), scale, window};
        return bfloat16 ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions,
                                                options, out)
                        : AttentionOf<float>(q, k, v, query_positions, key_positions, options,
                                             out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("causal") = false,
      py::arg("alibi") = py::none(), py::arg("rope") = py::none(), py::arg("scale") = 0.0,
      py::arg("window") = 0, py::arg("out") = py::none(), py::arg("bfloat16") = false,
      R"(Multi-head scaled dot-product attention on float32 arrays (or bfloat16, see below):

  out[i, h] = sum_j softmax_j(scale * q'[i, h] . k'[j, g] + bias_h(i, j)) v[j, g]

q [..., q_tokens, num_heads, head_dim], k [..., kv_tokens, num_kv_heads, head_dim],
v [..., kv_tokens, num_kv_heads, value_dim] -> out [..., q_tokens, num_heads, value_dim]
(batch dims equal; last dims contiguous; other strides free). q' and k' are rotated by `rope`
when given; bias_h is the ALiBi bias of `alibi` when given; g = h / (num_heads / num_kv_heads)
(grouped-query attention). With causal, key j is visible to query i when
key_positions[j] <= query_positions[i]. With window > 0 (a sliding window), key j is visible only
when query_positions[i] - key_positions[j] < window: with causal, each query sees itself and the
window - 1 keys before it; 0 means no window. Positions are int64 [tokens] or [..., tokens];
key_positions defaults to query_positions. scale 0 means 1 / sqrt(head_dim).

bfloat16=True: q, k and v hold bfloat16 bits in int16 or uint16 arrays (from PyTorch:
tensor.view(torch.int16).numpy()); out stays float32. Products are exact and sums float32; on
CPUs with AVX512-BF16 the softmax weights are rounded to bfloat16 for the weighted values (each
output within 2^-9 max|v| of the exact result), at about 1.8x the float32 speed.)");
}

}  // namespace posenc::python
