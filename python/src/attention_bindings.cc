// Multi-head attention with causal mask, GQA, RoPE and ALiBi on numpy arrays
// (posenc/attention.h).
#include <pybind11/stl.h>

#include "arrays.h"
#include "bindings.h"
#include "posenc/attention.h"
#include "posenc/attention_backward.h"
#include "posenc/dual_chunk.h"
#include "posenc/npy.h"
#include "posenc/self_extend.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "attention";

template <typename A, typename B>
void RequireBatchOf(const BatchedHeads<A>& q, const BatchedHeads<B>& view, std::string_view name,
                    std::string_view function = kFn) {
  Require(view.batch_shape == q.batch_shape, function, std::string(name) + ".shape[:-3]",
          "equal q's batch dims " + NpyShapeString(q.batch_shape),
          NpyShapeString(view.batch_shape));
}

// posenc.attention's keywords as options; the fields not named keep their defaults (named
// here, not listed in braces, which would leave the rest to -Wmissing-field-initializers).
// scale None is the library's 0: 1 / sqrt(head_dim), as in posenc.torch.
// options.sinks points into `sinks`, which must outlive the options.
AttentionOptions KeywordOptions(bool causal, std::optional<Alibi> alibi, std::optional<Rope> rope,
                                std::optional<double> scale, int64_t window, double softcap = 0.0,
                                std::span<const float> sinks = {}) {
  AttentionOptions options;
  options.causal = causal;
  options.alibi = alibi;
  options.rope = std::move(rope);
  options.scale = scale.value_or(0.0);
  options.window = window;
  options.softcap = softcap;
  options.sinks = sinks;
  return options;
}

// Attention, Self-Extend or dual chunk attention over a batch: call(q, k, v, query_pos, key_pos,
// out) runs the library's batched form.
struct PlainAttention {
  AttentionOptions options;
  template <typename T>
  void operator()(const BatchedHeads<const T>& q, const BatchedHeads<const T>& k,
                  const BatchedHeads<const T>& v, const BatchedPositions& qp,
                  const BatchedPositions& kp, const BatchedHeads<float>& out) const {
    Attention(options, q, k, v, qp, kp, out);
  }
};

struct GroupedAttention {
  AttentionOptions options;
  SelfExtend se;
  template <typename T>
  void operator()(const BatchedHeads<const T>& q, const BatchedHeads<const T>& k,
                  const BatchedHeads<const T>& v, const BatchedPositions& qp,
                  const BatchedPositions& kp, const BatchedHeads<float>& out) const {
    SelfExtendAttention(options, se, q, k, v, qp, kp, out);
  }
};

struct DualChunkCall {
  AttentionOptions options;
  DualChunk dca;
  template <typename T>
  void operator()(const BatchedHeads<const T>& q, const BatchedHeads<const T>& k,
                  const BatchedHeads<const T>& v, const BatchedPositions& qp,
                  const BatchedPositions& kp, const BatchedHeads<float>& out) const {
    DualChunkAttention(options, dca, q, k, v, qp, kp, out);
  }
};

// posenc.attention (or self_extend_attention, dual_chunk_attention) on q, k and v of element type T (float, or
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
  const BatchPositions query_pos(query_positions, q.batch_shape, q.first.tokens, kFn,
                                 "query_positions");
  const BatchPositions key_pos(key_positions.is_none() ? query_positions : key_positions,
                               k.batch_shape, k.first.tokens, kFn, "key_positions");
  {
    py::gil_scoped_release release;
    call(q, k, v, query_pos.Batch(), key_pos.Batch(), out);
  }
  return out_object;
}

constexpr std::string_view kForwardFn = "attention_forward";
constexpr std::string_view kBackwardFn = "attention_backward";

// q, k and v of a training call, their batch dims checked before the positions are read (the
// order of posenc.attention's checks, so the same mistake gets the same message).
template <typename T>
struct QkvViews {
  BatchedHeads<const T> q, k, v;

  QkvViews(std::string_view function, const py::object& q_arg, const py::object& k_arg,
           const py::object& v_arg)
      : q(ViewHeads<const T>(q_arg, function, "q")),
        k(ViewHeads<const T>(k_arg, function, "k")),
        v(ViewHeads<const T>(v_arg, function, "v")) {
    RequireBatchOf(q, k, "k", function);
    RequireBatchOf(q, v, "v", function);
  }
};

// The inputs of a training call with their positions, read as posenc.attention reads them.
template <typename T>
struct TrainingInputs : QkvViews<T> {
  BatchPositions query_pos, key_pos;
  std::vector<int64_t> out_shape;  // [..., q_tokens, num_heads, value_dim]
  std::vector<int64_t> lse_shape;  // [..., q_tokens, num_heads]

  TrainingInputs(std::string_view function, const py::object& q_arg, const py::object& k_arg,
                 const py::object& v_arg, const py::object& query_positions,
                 const py::object& key_positions)
      : QkvViews<T>(function, q_arg, k_arg, v_arg),
        query_pos(query_positions, this->q.batch_shape, this->q.first.tokens, function,
                  "query_positions"),
        key_pos(key_positions.is_none() ? query_positions : key_positions, this->k.batch_shape,
                this->k.first.tokens, function, "key_positions") {
    lse_shape = this->q.batch_shape;
    lse_shape.insert(lse_shape.end(), {this->q.first.tokens, this->q.first.num_heads});
    out_shape = lse_shape;
    out_shape.push_back(this->v.first.head_dim);
  }
};

// A new float32 array of `shape`, refused past the cap before anything is allocated.
py::array_t<float> NewFloatArray(const std::vector<int64_t>& shape, std::string_view function,
                                 std::string_view name) {
  RequireOutputSize(shape, sizeof(float), function, std::string(name) + ".shape", "float32");
  return py::array_t<float>(shape);
}

// posenc.attention_forward: out and the true log-sum-exp, both new float32 arrays.
template <typename T>
py::tuple ForwardOf(const AttentionOptions& options, const py::object& q_arg,
                    const py::object& k_arg, const py::object& v_arg,
                    const py::object& query_positions, const py::object& key_positions) {
  const TrainingInputs<T> in(kForwardFn, q_arg, k_arg, v_arg, query_positions, key_positions);
  py::array_t<float> out_array = NewFloatArray(in.out_shape, kForwardFn, "out");
  py::array_t<float> lse_array = NewFloatArray(in.lse_shape, kForwardFn, "lse");
  const auto out = ViewHeads<float>(out_array, kForwardFn, "out");
  const std::span<float> lse(lse_array.mutable_data(), static_cast<size_t>(lse_array.size()));
  {
    py::gil_scoped_release release;
    AttentionForward(options, in.q, in.k, in.v, in.query_pos.Batch(), in.key_pos.Batch(), out, lse);
  }
  return py::make_tuple(out_array, lse_array);
}

// A float32 argument of the backward pass with exactly `shape`.
BatchedHeads<const float> SavedHeads(const py::object& value, std::string_view name,
                                     const std::vector<int64_t>& shape) {
  auto view = ViewHeads<const float>(value, kBackwardFn, name);
  const std::vector<int64_t> given = ShapeOf(AsArray(value, kBackwardFn, name));
  Require(given == shape, kBackwardFn, std::string(name) + ".shape",
          "be " + NpyShapeString(shape) + " (q's tokens and heads, v's value_dim)",
          NpyShapeString(given));
  return view;
}

// posenc.attention_backward: dq, dk and dv, new float32 arrays shaped like q, k and v, and with
// sinks their gradient [num_heads], summed over the batch elements in order.
template <typename T>
py::tuple BackwardOf(const AttentionOptions& options, const py::object& q_arg,
                     const py::object& k_arg, const py::object& v_arg,
                     const py::object& query_positions, const py::object& key_positions,
                     const py::object& out_arg, const py::object& lse_arg,
                     const py::object& d_out_arg) {
  const TrainingInputs<T> in(kBackwardFn, q_arg, k_arg, v_arg, query_positions, key_positions);
  const auto out = SavedHeads(out_arg, "out", in.out_shape);
  const auto d_out = SavedHeads(d_out_arg, "d_out", in.out_shape);
  const py::array lse_array = AsArray(lse_arg, kBackwardFn, "lse");
  RequireDtype<float>(lse_array, kBackwardFn, "lse");
  Require(ShapeOf(lse_array) == in.lse_shape, kBackwardFn, "lse.shape",
          "be " + NpyShapeString(in.lse_shape) + " (q's tokens and heads)", ShapeString(lse_array));
  // The library reads each element's lse as one dense span.
  Require((lse_array.flags() & py::array::c_style) != 0, kBackwardFn, "lse", "be C-contiguous",
          "a strided array");
  const std::span<const float> lse(static_cast<const float*>(lse_array.data()),
                                   static_cast<size_t>(lse_array.size()));
  const auto shape_of = [](const auto& view) {
    std::vector<int64_t> shape = view.batch_shape;
    shape.insert(shape.end(), {view.first.tokens, view.first.num_heads, view.first.head_dim});
    return shape;
  };
  py::array_t<float> dq_array = NewFloatArray(shape_of(in.q), kBackwardFn, "dq");
  py::array_t<float> dk_array = NewFloatArray(shape_of(in.k), kBackwardFn, "dk");
  py::array_t<float> dv_array = NewFloatArray(shape_of(in.v), kBackwardFn, "dv");
  // With sinks, their gradient [num_heads], summed over the batch elements. Made as dq is, and
  // written through its pointer: pybind11 before 2.12 (Debian 12 has 2.10) sizes a 1-D
  // array_t(count)'s strides and mutable_at()'s index with the element size read in numpy 1's
  // descriptor layout, which numpy 2 changed (every head's gradient then read as one).
  const bool sinks = !options.sinks.empty();
  py::array_t<float> d_sinks = NewFloatArray(
      {sinks ? static_cast<int64_t>(options.sinks.size()) : 0}, kBackwardFn, "d_sinks");
  const BatchedAttentionGradients grads{
      ViewHeads<float>(dq_array, kBackwardFn, "dq"),
      ViewHeads<float>(dk_array, kBackwardFn, "dk"),
      ViewHeads<float>(dv_array, kBackwardFn, "dv"),
      {},
      {d_sinks.mutable_data(), static_cast<size_t>(d_sinks.size())}};
  {
    py::gil_scoped_release release;
    AttentionBackward(options, in.q, in.k, in.v, in.query_pos.Batch(), in.key_pos.Batch(), out, lse,
                      d_out, grads);
  }
  if (!sinks) return py::make_tuple(dq_array, dk_array, dv_array);
  return py::make_tuple(dq_array, dk_array, dv_array, d_sinks);
}

}  // namespace

void BindAttention(py::module_& m) {
  m.def(
      "attention",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, bool causal,
         std::optional<Alibi> alibi, std::optional<Rope> rope, std::optional<double> scale,
         int64_t window, double softcap, const py::object& sinks_arg, const py::object& out,
         bool bfloat16) {
        const std::vector<float> sinks = SinkValues(sinks_arg, kFn);
        const PlainAttention call{
            KeywordOptions(causal, alibi, std::move(rope), scale, window, softcap, sinks)};
        return bfloat16 ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions, call, out)
                        : AttentionOf<float>(q, k, v, query_positions, key_positions, call, out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("causal") = false,
      py::arg("alibi") = py::none(), py::arg("rope") = py::none(), py::arg("scale") = py::none(),
      py::arg("window") = 0, py::arg("softcap") = 0.0, py::arg("sinks") = py::none(),
      py::arg("out") = py::none(), py::arg("bfloat16") = false,
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
key_positions defaults to query_positions. scale None (or 0) means 1 / sqrt(head_dim).

softcap > 0 (Gemma 2's attn_logit_softcapping): each scaled score s becomes
softcap * tanh(s / softcap) before the ALiBi bias and the masks; 0 (default) is off. sinks
(gpt-oss): None or a float32 array [num_heads], one logit per query head that joins every row's
softmax denominator and adds no value: out = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sinks[h]));
a query that sees no key still gets zeros.

bfloat16=True: q, k and v hold bfloat16 bits in int16 or uint16 arrays (from PyTorch:
tensor.view(torch.int16).numpy()); out stays float32. Products are exact and sums float32; on
CPUs with AVX512-BF16 the softmax weights are rounded to bfloat16 for the weighted values (each
output within 2^-9 max|v| of the exact result), at about 1.8x the float32 speed.)");

  m.def(
      "attention_forward",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, bool causal,
         std::optional<Alibi> alibi, std::optional<Rope> rope, std::optional<double> scale,
         int64_t window, double softcap, const py::object& sinks_arg, bool bfloat16) {
        const std::vector<float> sinks = SinkValues(sinks_arg, kForwardFn);
        const AttentionOptions options =
            KeywordOptions(causal, alibi, std::move(rope), scale, window, softcap, sinks);
        return bfloat16 ? ForwardOf<BFloat16>(options, q, k, v, query_positions, key_positions)
                        : ForwardOf<float>(options, q, k, v, query_positions, key_positions);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("causal") = false,
      py::arg("alibi") = py::none(), py::arg("rope") = py::none(), py::arg("scale") = py::none(),
      py::arg("window") = 0, py::arg("softcap") = 0.0, py::arg("sinks") = py::none(),
      py::arg("bfloat16") = false,
      R"(The forward pass of training (posenc/attention_backward.h): posenc.attention with the same
arguments, returning (out, lse), both new float32 arrays: out [..., q_tokens, num_heads,
value_dim] and lse [..., q_tokens, num_heads], each row's log-sum-exp of its visible scores
(-inf for a row that sees no key); with sinks, the sink is part of it
(log(sum_j exp(s_j) + exp(sinks[h])), sinks[h] for a row that sees no key).
attention_backward takes both back.)");

  m.def(
      "attention_backward",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, const py::object& out,
         const py::object& lse, const py::object& d_out, bool causal, std::optional<Alibi> alibi,
         std::optional<Rope> rope, std::optional<double> scale, int64_t window, double softcap,
         const py::object& sinks_arg, bool bfloat16) {
        const std::vector<float> sinks = SinkValues(sinks_arg, kBackwardFn);
        const AttentionOptions options =
            KeywordOptions(causal, alibi, std::move(rope), scale, window, softcap, sinks);
        return bfloat16 ? BackwardOf<BFloat16>(options, q, k, v, query_positions, key_positions,
                                               out, lse, d_out)
                        : BackwardOf<float>(options, q, k, v, query_positions, key_positions, out,
                                            lse, d_out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("out"), py::arg("lse"),
      py::arg("d_out"), py::arg("causal") = false, py::arg("alibi") = py::none(),
      py::arg("rope") = py::none(), py::arg("scale") = py::none(), py::arg("window") = 0,
      py::arg("softcap") = 0.0, py::arg("sinks") = py::none(), py::arg("bfloat16") = false,
      R"(The backward pass of attention_forward (FlashAttention-2 style: scores recomputed tile by
tile from q, k and lse, no T x T buffer): given the same q, k, v, positions and options, its out
and lse, and d_out, the gradient of a loss with respect to out (float32, out's shape; any strides
with the last dim contiguous), returns (dq, dk, dv), new float32 arrays shaped like q, k and v.
q and k are the un-rotated inputs: with rope they are rotated again inside, and dq, dk are the
gradients with respect to the un-rotated q and k. ALiBi slopes and masks are constants. A query
that sees no key gives zero gradients. Deterministic: the same bits for any number of threads.
bfloat16=True reads q, k and v as attention_forward does (bfloat16 bits) and computes in
float32; the gradients stay float32. With softcap, dq and dk go through tanh's derivative. With
sinks, returns (dq, dk, dv, d_sinks): d_sinks [num_heads] float32, the gradient of the sinks
summed over the batch, -sum_i exp(sinks[h] - lse_i) (d_out_i . out_i) over the rows of head h.)");

  m.def(
      "self_extend_attention",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, int64_t group_size,
         int64_t neighbor_window, const Rope& rope, bool causal, std::optional<double> scale,
         int64_t window, const py::object& out, bool bfloat16) {
        const GroupedAttention call{KeywordOptions(causal, std::nullopt, rope, scale, window),
                                    SelfExtend{group_size, neighbor_window}};
        return bfloat16 ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions, call, out)
                        : AttentionOf<float>(q, k, v, query_positions, key_positions, call, out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("group_size"),
      py::arg("neighbor_window"), py::arg("rope"), py::arg("causal") = false,
      py::arg("scale") = py::none(), py::arg("window") = 0, py::arg("out") = py::none(),
      py::arg("bfloat16") = false,
      R"(Self-Extend attention (posenc/self_extend.h, Jin et al. 2024): a RoPE model reads past its
trained context with no training. Keys closer than neighbor_window (W) to the query are scored at
their own positions; farther keys at floor(pos / group_size) for keys and
floor(pos / G) + W - floor(W / G) for queries; one softmax over both. Shapes, positions, causal,
scale and window as posenc.attention (masks in the original positions); rope is required, and
q and k are the un-rotated projections. Runs the tiled kernel twice (no T x T buffer).)");

  m.def(
      "dual_chunk_attention",
      [](const py::object& q, const py::object& k, const py::object& v,
         const py::object& query_positions, const py::object& key_positions, int64_t chunk_size,
         int64_t local_size, int64_t original_max_position_embeddings, const Rope& rope,
         std::optional<double> scale, const py::object& out, bool bfloat16) {
        const DualChunkCall call{
            KeywordOptions(true, std::nullopt, rope, scale, 0),
            DualChunk{chunk_size, local_size, original_max_position_embeddings}};
        return bfloat16 ? AttentionOf<BFloat16>(q, k, v, query_positions, key_positions, call, out)
                        : AttentionOf<float>(q, k, v, query_positions, key_positions, call, out);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("query_positions"),
      py::arg("key_positions") = py::none(), py::kw_only(), py::arg("chunk_size"),
      py::arg("local_size"), py::arg("original_max_position_embeddings") = 0, py::arg("rope"),
      py::arg("scale") = py::none(), py::arg("out") = py::none(), py::arg("bfloat16") = false,
      R"(Dual chunk attention (posenc/dual_chunk.h, docs/DUAL_CHUNK.md; An et al. 2024), as
Qwen2.5-1M's dual_chunk_attention_config and vLLM define it: a RoPE model reads far past its
trained context with no training. With L = chunk_size - local_size, keys rotate at pos mod L;
a query at position i rotates at i mod L for keys in its own chunk (floor(pos / L)),
min(i mod L + L, chunk_size) for keys in the chunk before, min(2 L - 1, chunk_size) for earlier
keys; one causal softmax over all of them, so no scored distance exceeds chunk_size. With
original_max_position_embeddings M > 0 the scores gain f^2, f = max(1, 0.1 ln(n / M) + 1),
n = the largest key position + 1. Always causal; shapes, positions, scale, out and bfloat16 as
posenc.attention; rope is required, and q and k are the un-rotated projections. Requires
chunk_size > local_size >= 1. Runs the tiled kernel once per part (no T x T buffer); a decode
step is one query against the cached keys.)");
}

}  // namespace posenc::python
