// Multi-head attention with causal mask, GQA, RoPE and ALiBi on numpy arrays
// (posenc/attention.h).
#include <pybind11/stl.h>

#include "arrays.h"
#include "batch.h"
#include "bindings.h"
#include "posenc/attention.h"
#include "posenc/npy.h"
#include "posenc/self_extend.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "attention";

template <typename A, typename B>
void RequireBatchOf(const BatchedHeads<A>& q, const BatchedHeads<B>& view, std::string_view name) {
  Require(view.batch_shape == q.batch_shape, kFn, std::string(name) + ".shape[:-3]",
          "equal q's batch dims " + NpyShapeString(q.batch_shape),
          NpyShapeString(view.batch_shape));
}

// Attention or Self-Extend on one batch element: call(validate_only, q, k, v, query_pos,
// key_pos, out) makes the checks alone, or the checks and the computation.
struct PlainAttention {
  AttentionOptions options;
  template <typename T>
  void operator()(bool validate_only, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                  std::span<const int64_t> qp, std::span<const int64_t> kp,
                  Heads<float> out) const {
    validate_only ? ValidateAttention(options, q, k, v, qp, kp, out)
                  : Attention(options, q, k, v, qp, kp, out);
  }
};

struct GroupedAttention {
  AttentionOptions options;
  SelfExtend se;
  template <typename T>
  void operator()(bool validate_only, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                  std::span<const int64_t> qp, std::span<const int64_t> kp,
                  Heads<float> out) const {
    validate_only ? ValidateSelfExtendAttention(options, se, q, k, v, qp, kp, out)
                  : SelfExtendAttention(options, se, q, k, v, qp, kp, out);
  }
};

// posenc.attention (or self_extend_attention) on q, k and v of element type T (float, or
// BFloat16 bits); out is float32.
template <typename T, typename Call>
py::object AttentionOf(const py::object& q_arg, const py::object& k_arg, const py::object& v_arg,
                       const py::object& query_positions, const py::object& key_positions,
                       const Call& call, const py::object& out_arg) {
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
  // Never folded into tokens: a query would see the keys of other batch elements.
  const auto run = [&](bool validate_only, int64_t b) {
    call(validate_only, q.At(b), k.At(b), v.At(b), query_pos.At(b), key_pos.At(b), out.At(b));
  };
  if (q.BatchCount() == 0) {  // no element, but the shapes are still the library's to check
    call(true, NoTokens(q), NoTokens(k), NoTokens(v), std::span<const int64_t>(),
         std::span<const int64_t>(), NoTokens(out));
  } else {
    RunEachElement(kFn, q.BatchCount(), run, q, k, v, out);
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
        const PlainAttention call{{causal, std::move(alibi), std::move(rope), scale, window}};
        return bfloat16
                   ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions, call, out)
                   : AttentionOf<float>(q, k, v, query_positions, key_positions, call, out);
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

  m.def(
      "self_extend_attention",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, int64_t group_size,
         int64_t neighbor_window, const Rope& rope, bool causal, double scale, int64_t window,
         const py::object& out, bool bfloat16) {
        AttentionOptions options{causal, std::nullopt, rope, scale, window};
        const GroupedAttention call{std::move(options), SelfExtend{group_size, neighbor_window}};
        return bfloat16
                   ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions, call, out)
                   : AttentionOf<float>(q, k, v, query_positions, key_positions, call, out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("group_size"),
      py::arg("neighbor_window"), py::arg("rope"), py::arg("causal") = false,
      py::arg("scale") = 0.0, py::arg("window") = 0, py::arg("out") = py::none(),
      py::arg("bfloat16") = false,
      R"(Self-Extend attention (posenc/self_extend.h, Jin et al. 2024): a RoPE model reads past its
trained context with no training. Keys closer than neighbor_window (W) to the query are scored at
their own positions; farther keys at floor(pos / group_size) for keys and
floor(pos / G) + W - floor(W / G) for queries; one softmax over both. Shapes, positions, causal,
scale and window as posenc.attention (masks in the original positions); rope is required, and
q and k are the un-rotated projections. Runs the tiled kernel twice (no T x T buffer).)");
}

}  // namespace posenc::python
