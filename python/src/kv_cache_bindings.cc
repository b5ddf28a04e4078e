// posenc.KVCache: one layer's KV cache of one sequence on numpy arrays (posenc/kv_cache.h): keys
// rotated once on append, attention of new queries against the cache, context shifts and
// attention sinks.
#include <Python.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/kv_cache.h"
#include "posenc/mrope.h"
#include "posenc/npy.h"
#include "posenc/rope.h"

namespace posenc::python {
namespace {

constexpr std::string_view kFn = "kv_cache";
constexpr std::string_view kRoll = "sink_window";

std::string TypeName(const py::object& value) {
  return py::str(py::type::of(value).attr("__name__"));
}

// An int argument (a Python int or anything with __index__, never a bool or a float), refused with
// posenc's message where pybind11 would print its signature.
int64_t IntArg(const py::object& value, std::string_view function, std::string_view name,
               std::string_view rule = "be an int") {
  const bool is_int = !py::isinstance<py::bool_>(value) && PyIndex_Check(value.ptr());
  Require(is_int, function, name, rule, TypeName(value));
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  Require(overflow == 0, function, name, "fit in int64", std::string(py::str(value)));
  return result;
}

// A real number (int or float, not a string).
double NumberArg(const py::object& value, std::string_view function, std::string_view name,
                 std::string_view rule) {
  const bool is_number = !PyComplex_Check(value.ptr()) && PyNumber_Check(value.ptr()) &&
                         !py::isinstance<py::str>(value);
  Require(is_number, function, name, rule, TypeName(value));
  const double result = PyFloat_AsDouble(value.ptr());
  if (result == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return result;
}

// None or a T (posenc.Rope, posenc.MRope, posenc.Alibi).
template <typename T>
std::optional<T> OptionalArg(const py::object& value, std::string_view function,
                             std::string_view name, std::string_view rule) {
  if (value.is_none()) return std::nullopt;
  Require(py::isinstance<T>(value), function, name, rule, TypeName(value));
  return value.cast<T>();
}

// k, v or q of one sequence: [tokens, heads, dim], no batch dims.
template <typename T>
Heads<T> SequenceView(const py::object& value, std::string_view name) {
  const BatchedHeads<T> view = ViewHeads<T>(value, kFn, name);
  if (view.batch_shape.empty()) return view.first;
  Require(false, kFn, std::string(name) + ".shape",
          "be [tokens, heads, dim] (one sequence per cache, no batch dims)",
          ShapeString(AsArray(value, kFn, name)));
  return {};
}

// Position streams [num_streams, tokens], int64 (a sequence of ints is converted), held by `array`.
PositionStreams StreamsView(const py::object& value, py::array_t<int64_t>& array,
                            std::string_view name) {
  array = Int64Array(value, kFn, name);
  Require(array.ndim() == 2, kFn, std::string(name) + ".shape", "be [streams, tokens] (2-D)",
          ShapeString(array));
  return PositionStreams::Dense(array.data(), array.shape(0), array.shape(1));
}

// A read-only numpy view of cache memory that keeps the cache (`owner`) alive.
template <typename Element>
py::array ReadOnlyView(const Element* data, std::vector<int64_t> shape, const py::object& owner) {
  py::array array(py::dtype::of<Element>(), std::move(shape), {}, data, owner);
  array.attr("setflags")(py::arg("write") = false);
  return array;
}

// The cache behind posenc.KVCache: float32 or bfloat16 storage, and a lock, as every call that
// reads or changes the cache runs with the GIL released.
class PyKvCache {
 public:
  PyKvCache(KvCacheOptions options, bool bfloat16) : cache_(Make(std::move(options), bfloat16)) {}

  // f(cache) with the cache's element type.
  template <typename F>
  decltype(auto) Visit(const F& f) {
    return std::visit([&](auto& cache) -> decltype(auto) { return f(cache); }, cache_);
  }
  bool BFloat16Storage() const { return std::holds_alternative<KvCache<BFloat16>>(cache_); }
  const KvCacheOptions& Options() {
    return Visit([](auto& cache) -> const KvCacheOptions& { return cache.options(); });
  }
  int64_t Size() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return Visit([](auto& cache) { return cache.size(); });
  }

  // f() with the GIL released and the cache locked. The lock is taken after the GIL is released
  // and given back before it is taken again, so a thread waiting for the lock never holds the GIL
  // that its holder needs.
  template <typename F>
  decltype(auto) Locked(const F& f) {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    return f();
  }
  std::mutex& Mutex() { return mutex_; }

 private:
  using Variant = std::variant<KvCache<float>, KvCache<BFloat16>>;
  static Variant Make(KvCacheOptions options, bool bfloat16) {
    if (bfloat16) return Variant(std::in_place_index<1>, std::move(options));
    return Variant(std::in_place_index<0>, std::move(options));
  }

  Variant cache_;
  std::mutex mutex_;
};

template <typename T>
void AppendTo(PyKvCache& self, KvCache<T>& cache, const py::object& positions_arg,
              const py::object& k_arg, const py::object& v_arg, const py::object& streams_arg) {
  const Heads<const T> k = SequenceView<const T>(k_arg, "k");
  const Heads<const T> v = SequenceView<const T>(v_arg, "v");
  py::array_t<int64_t> positions_array, streams_array;
  const std::span<const int64_t> positions =
      IntList(positions_arg, positions_array, kFn, "positions");
  if (streams_arg.is_none()) {
    self.Locked([&] { cache.Append(positions, k, v); });
    return;
  }
  Require(cache.options().mrope.has_value(), kFn, "streams",
          "be None for a cache without mrope (positions alone rotate its keys)", "an array");
  const PositionStreams streams = StreamsView(streams_arg, streams_array, "streams");
  self.Locked([&] { cache.Append(positions, streams, k, v); });
}

template <typename T>
py::object AttendTo(PyKvCache& self, const KvCache<T>& cache, const py::object& q_arg,
                    const py::object& query_pos_arg, const py::object& query_streams_arg,
                    const AttentionOptions& options, const py::object& out_arg) {
  const Heads<const T> q = SequenceView<const T>(q_arg, "q");
  py::array_t<int64_t> positions_array, streams_array;
  const std::span<const int64_t> query_pos =
      IntList(query_pos_arg, positions_array, kFn, "query_pos");
  std::optional<PositionStreams> query_streams;
  if (!query_streams_arg.is_none()) {
    Require(cache.options().mrope.has_value(), kFn, "query_streams",
            "be None for a cache without mrope (query_pos alone rotates q)", "an array");
    query_streams = StreamsView(query_streams_arg, streams_array, "query_streams");
  }
  const std::vector<int64_t> shape{q.tokens, q.num_heads, cache.options().value_dim};
  py::array_t<float> out = OutputArray(out_arg, shape, kFn);
  const Heads<float> out_view =
      Heads<float>::Dense(out.mutable_data(), q.tokens, q.num_heads, cache.options().value_dim);
  self.Locked([&] {
    query_streams ? cache.Attend(options, q, query_pos, *query_streams, out_view)
                  : cache.Attend(options, q, query_pos, out_view);
  });
  return out;
}

SinkPositions ModeOf(const py::object& mode) {
  const bool known = py::isinstance<py::str>(mode) &&
                     (mode.cast<std::string>() == "text" || mode.cast<std::string>() == "cache");
  Require(known, kRoll, "mode", "be 'text' or 'cache'", std::string(py::repr(mode)));
  return mode.cast<std::string>() == "text" ? SinkPositions::kText : SinkPositions::kCache;
}

// value_dim as both caches take it: None (or the library's 0) means head_dim.
int64_t ValueDimArg(const py::object& value_dim, std::string_view fn) {
  return value_dim.is_none() ? 0 : IntArg(value_dim, fn, "value_dim", "be None or an int");
}

// LongRoPE's long factors (KvCacheOptions::long_rope): None, or a posenc.Rope with the
// threshold L0 and the crossing rule "recompute" (Phi-3's generate()) or "keep_rotation".
void SetLongRope(KvCacheOptions& options, const py::object& long_rope, const py::object& threshold,
                 const py::object& crossing) {
  options.long_rope = OptionalArg<Rope>(long_rope, kFn, "long_rope",
                                        "be None or a posenc.Rope (LongRoPE's long factors)");
  options.long_rope_threshold =
      IntArg(threshold, kFn, "long_rope_threshold", "be an int (original_max_position_embeddings)");
  const bool known =
      py::isinstance<py::str>(crossing) && (crossing.cast<std::string>() == "recompute" ||
                                            crossing.cast<std::string>() == "keep_rotation");
  Require(known, kFn, "crossing", "be 'recompute' or 'keep_rotation'",
          std::string(py::repr(crossing)));
  options.crossing = crossing.cast<std::string>() == "recompute" ? LongRopeCrossing::kRecompute
                                                                 : LongRopeCrossing::kKeepRotation;
}

std::string CrossingName(LongRopeCrossing crossing) {
  return crossing == LongRopeCrossing::kRecompute ? "recompute" : "keep_rotation";
}

constexpr const char* kDoc = R"(One attention layer's KV cache of one sequence (posenc/kv_cache.h).

KVCache(capacity, kv_heads, head_dim, *, value_dim=None, rope=None, mrope=None, bfloat16=False,
        long_rope=None, long_rope_threshold=0, crossing="recompute")

Keys [capacity, kv_heads, head_dim] and values [capacity, kv_heads, value_dim] (value_dim None
means head_dim), allocated up front and filled from slot 0, with each slot's position. Keys are rotated
once, when they are appended, by `rope` (a posenc.Rope) or `mrope` (a posenc.MRope: positions
then also come as streams), or not at all (neither: NoPE, ALiBi); `attend` rotates only its
queries. Moving positions (context_shift, shift_positions, roll_sink_window in "cache" mode)
re-rotates the moved keys by the delta, with the angle formed exactly and unbiased rounding, so
that repeated shifts drift as a random walk (docs/KV_CACHE.md).

LongRoPE (Phi-3): `rope` holds the short factors and `long_rope` the long ones; an append (its
keys) or attend (its queries) whose positions reach long_rope_threshold (L0) turns with long_rope,
as Hugging Face's rotary module chooses per forward. crossing "recompute" (Phi-3's generate(),
which drops its cache at the crossing and recomputes the sequence): the append that would take a
cache of at most L0 tokens past L0 raises posenc.Error; clear() and append the recomputed
sequence. "keep_rotation": the cached keys keep the short factors, as a plain forward loop does.

One cache is one layer of one sequence: k, v and q are [tokens, heads, dim] with no batch dims.
Storage is float32, or bfloat16 with bfloat16=True (then k, v and q hold bfloat16 bits in int16 or
uint16 arrays, as from tensor.view(torch.int16).numpy(), and keys and values read back as int16).
Every problem raises posenc.Error before the cache changes. Calls release the GIL; one lock
serialises the calls on one cache.)";

// ---------------------------------------------------------------------------------------------
// posenc.KVCacheBatch: a batch of sequences of different lengths (KvCacheBatch).

constexpr std::string_view kBatchFn = "kv_cache_batch";

// k, v or q of a step: [batch, n, heads, dim], contiguous over batch and tokens, as [batch * n].
template <typename T>
Heads<T> StepView(const py::object& value, std::string_view name, int64_t batch) {
  BatchedHeads<T> view = ViewHeads<T>(value, kBatchFn, name);
  const bool shaped = view.batch_shape.size() == 1 && view.batch_shape[0] == batch;
  Require(shaped, kBatchFn, std::string(name) + ".shape",
          "be [batch = " + std::to_string(batch) + ", tokens, heads, dim]",
          ShapeString(AsArray(value, kBatchFn, name)));
  Require(FoldIntoTokens(view), kBatchFn, name, "step evenly over its batch dim (C-contiguous)",
          "strided");
  return view.first;
}

// positions [batch, n] as int64, held by `array`.
std::span<const int64_t> StepPositions(const py::object& value, py::array_t<int64_t>& array,
                                       std::string_view name, int64_t batch, int64_t n) {
  array = Int64Array(value, kBatchFn, name);
  const bool shaped = array.ndim() == 2 && array.shape(0) == batch && array.shape(1) == n;
  Require(shaped, kBatchFn, std::string(name) + ".shape",
          "be [batch = " + std::to_string(batch) + ", tokens = " + std::to_string(n) + "]",
          ShapeString(array));
  return {array.data(), static_cast<size_t>(batch * n)};
}

// The mask [batch, n]: bool, or integers (Hugging Face's attention_mask), nonzero = real token.
std::vector<uint8_t> StepMask(const py::object& value, int64_t batch, int64_t n) {
  const py::array array = py::array::ensure(value);
  const char kind = array ? array.dtype().kind() : 'O';
  Require(kind == 'b' || kind == 'i' || kind == 'u', kBatchFn, "mask",
          "be a bool or integer array [batch, tokens] (nonzero: a real token)",
          array ? std::string(py::str(array.dtype())) : TypeName(value));
  const bool shaped = array.ndim() == 2 && array.shape(0) == batch && array.shape(1) == n;
  Require(shaped, kBatchFn, "mask.shape",
          "be [batch = " + std::to_string(batch) + ", tokens = " + std::to_string(n) + "]",
          ShapeString(array));
  const auto flags = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(
      array.attr("astype")("bool"));
  return std::vector<uint8_t>(flags.data(), flags.data() + batch * n);
}

class PyKvCacheBatch {
 public:
  PyKvCacheBatch(int64_t batch, const KvCacheOptions& options, bool bfloat16)
      : cache_(bfloat16 ? Variant(std::in_place_index<1>, batch, options)
                        : Variant(std::in_place_index<0>, batch, options)) {}

  template <typename F>
  decltype(auto) Visit(const F& f) {
    return std::visit([&](auto& cache) -> decltype(auto) { return f(cache); }, cache_);
  }
  template <typename F>
  decltype(auto) Locked(const F& f) {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    return f();
  }
  bool BFloat16Storage() const { return std::holds_alternative<KvCacheBatch<BFloat16>>(cache_); }

 private:
  using Variant = std::variant<KvCacheBatch<float>, KvCacheBatch<BFloat16>>;
  Variant cache_;
  std::mutex mutex_;
};

constexpr const char* kBatchDoc = R"(A batch of sequences of different lengths (posenc/kv_cache.h,
KvCacheBatch): row b is a KVCache of its own, with its own size, positions and LongRoPE regime.

KVCacheBatch(batch, capacity, kv_heads, head_dim, *, value_dim=None, rope=None, bfloat16=False,
             long_rope=None, long_rope_threshold=0, crossing="recompute")

capacity is per row; the options are KVCache's (not mrope). A step passes k, v [batch, n, kv_heads,
dim] and q [batch, n, heads, dim], positions [batch, n] and a mask [batch, n] (bool, or Hugging
Face's int attention_mask; nonzero: a real token) whose real tokens form one run per row: a
left-padded prompt, one decode token per row, or none (a finished row). Pads never enter a cache,
their positions are not read and their outputs are zero. Every row is checked before any row
changes; errors name the row.)";

}  // namespace

void BindKvCacheBatch(py::module_& m) {
  py::class_<PyKvCacheBatch>(m, "KVCacheBatch", kBatchDoc)
      .def(py::init([](const py::object& batch, const py::object& capacity,
                       const py::object& kv_heads, const py::object& head_dim,
                       const py::object& value_dim, const py::object& rope, bool bfloat16,
                       const py::object& long_rope, const py::object& long_rope_threshold,
                       const py::object& crossing) {
             KvCacheOptions options;
             options.capacity = IntArg(capacity, kBatchFn, "capacity");
             options.kv_heads = IntArg(kv_heads, kBatchFn, "kv_heads");
             options.head_dim = IntArg(head_dim, kBatchFn, "head_dim");
             options.value_dim = ValueDimArg(value_dim, kBatchFn);
             options.rope = OptionalArg<Rope>(rope, kBatchFn, "rope", "be None or a posenc.Rope");
             SetLongRope(options, long_rope, long_rope_threshold, crossing);
             return std::make_unique<PyKvCacheBatch>(IntArg(batch, kBatchFn, "batch"), options,
                                                     bfloat16);
           }),
           py::arg("batch"), py::arg("capacity"), py::arg("kv_heads"), py::arg("head_dim"),
           py::kw_only(), py::arg("value_dim") = py::none(), py::arg("rope") = py::none(),
           py::arg("bfloat16") = false, py::arg("long_rope") = py::none(),
           py::arg("long_rope_threshold") = 0, py::arg("crossing") = "recompute")
      .def(
          "append",
          [](PyKvCacheBatch& self, const py::object& positions_arg, const py::object& mask_arg,
             const py::object& k_arg, const py::object& v_arg) {
            self.Visit([&](auto& cache) {
              using T = std::remove_cvref_t<decltype(*cache.Row(0).Keys().data)>;
              const int64_t batch = cache.batch();
              const Heads<const T> k = StepView<const T>(k_arg, "k", batch);
              const Heads<const T> v = StepView<const T>(v_arg, "v", batch);
              const int64_t n = k.tokens / batch;
              py::array_t<int64_t> positions_array;
              const auto positions =
                  StepPositions(positions_arg, positions_array, "positions", batch, n);
              const std::vector<uint8_t> mask = StepMask(mask_arg, batch, n);
              self.Locked([&] { cache.Append(positions, mask, k, v); });
            });
          },
          py::arg("positions"), py::arg("mask"), py::arg("k"), py::arg("v"),
          "Appends each row's real tokens (mask) of k, v [batch, n, kv_heads, dim] at positions "
          "[batch, n] to that row's cache.")
      .def(
          "attend",
          [](PyKvCacheBatch& self, const py::object& q_arg, const py::object& query_pos_arg,
             const py::object& mask_arg, const py::object& causal, const py::object& alibi,
             const py::object& scale, const py::object& window, const py::object& chunk_size,
             const py::object& softcap, const py::object& sinks_arg, const py::object& out_arg) {
            const std::vector<float> sinks = SinkValues(sinks_arg, kBatchFn);
            AttentionOptions options;
            options.causal = py::bool_(causal);
            options.alibi =
                OptionalArg<Alibi>(alibi, kBatchFn, "alibi", "be None or a posenc.Alibi");
            options.scale = scale.is_none() ? 0.0
                                            : NumberArg(scale, kBatchFn, "scale",
                                                        "be None or a number (None or 0: 1 / "
                                                        "sqrt(head_dim))");
            options.window = IntArg(window, kBatchFn, "window", "be an int (0: no window)");
            options.chunk_size =
                IntArg(chunk_size, kBatchFn, "chunk_size", "be an int (0: no chunks)");
            options.softcap = NumberArg(softcap, kBatchFn, "softcap", "be a number (0: off)");
            options.sinks = sinks;
            return self.Visit([&](auto& cache) {
              using T = std::remove_cvref_t<decltype(*cache.Row(0).Keys().data)>;
              const int64_t batch = cache.batch();
              const Heads<const T> q = StepView<const T>(q_arg, "q", batch);
              const int64_t n = q.tokens / batch;
              py::array_t<int64_t> positions_array;
              const auto query_pos =
                  StepPositions(query_pos_arg, positions_array, "query_pos", batch, n);
              const std::vector<uint8_t> mask = StepMask(mask_arg, batch, n);
              const int64_t value_dim = cache.Row(0).options().value_dim;
              py::array_t<float> out =
                  OutputArray(out_arg, {batch, n, q.num_heads, value_dim}, kBatchFn);
              const Heads<float> out_view =
                  Heads<float>::Dense(out.mutable_data(), batch * n, q.num_heads, value_dim);
              self.Locked([&] { cache.Attend(options, q, query_pos, mask, out_view); });
              return out;
            });
          },
          py::arg("q"), py::arg("query_pos"), py::arg("mask"), py::kw_only(),
          py::arg("causal") = false, py::arg("alibi") = py::none(), py::arg("scale") = py::none(),
          py::arg("window") = 0, py::arg("chunk_size") = 0, py::arg("softcap") = 0.0,
          py::arg("sinks") = py::none(), py::arg("out") = py::none(),
          "Each row's real queries of q [batch, n, heads, head_dim] at query_pos [batch, n] "
          "against that row's cache -> float32 [batch, n, heads, value_dim], zero at pads; the "
          "options are KVCache.attend's.")
      .def(
          "clear",
          [](PyKvCacheBatch& self, const py::object& row) {
            const int64_t b = IntArg(row, kBatchFn, "row");
            self.Visit([&](auto& cache) { self.Locked([&] { cache.Row(b).Clear(); }); });
          },
          py::arg("row"), "Empties row `row` (before appending its recomputed sequence).")
      .def_property_readonly(
          "batch",
          [](PyKvCacheBatch& self) { return self.Visit([](auto& c) { return c.batch(); }); },
          "Sequences (rows).")
      .def_property_readonly(
          "sizes",
          [](PyKvCacheBatch& self) {
            return self.Visit([&](auto& cache) {
              return self.Locked([&] {
                std::vector<int64_t> sizes;
                sizes.reserve(cache.batch());
                for (int64_t b = 0; b < cache.batch(); ++b) sizes.push_back(cache.Row(b).size());
                return sizes;
              });
            });
          },
          "Tokens cached in each row (a list).")
      .def(
          "positions",
          [](PyKvCacheBatch& self, const py::object& row) {
            const int64_t b = IntArg(row, kBatchFn, "row");
            return self.Visit([&](auto& cache) {
              return self.Locked([&] {
                const std::span<const int64_t> p = cache.Row(b).Positions();
                return std::vector<int64_t>(p.begin(), p.end());
              });
            });
          },
          py::arg("row"), "The positions cached in row `row` (a list, a copy).")
      .def_property_readonly("bfloat16", &PyKvCacheBatch::BFloat16Storage);
}

void BindKvCache(py::module_& m) {
  py::class_<PyKvCache>(m, "KVCache", kDoc)
      .def(py::init([](const py::object& capacity, const py::object& kv_heads,
                       const py::object& head_dim, const py::object& value_dim,
                       const py::object& rope, const py::object& mrope, bool bfloat16,
                       const py::object& long_rope, const py::object& long_rope_threshold,
                       const py::object& crossing) {
             KvCacheOptions options{
                 .capacity = IntArg(capacity, kFn, "capacity"),
                 .kv_heads = IntArg(kv_heads, kFn, "kv_heads"),
                 .head_dim = IntArg(head_dim, kFn, "head_dim"),
                 .value_dim = ValueDimArg(value_dim, kFn),
                 .rope = OptionalArg<Rope>(rope, kFn, "rope",
                                           "be None or a posenc.Rope (of a RotaryEmbedding: its "
                                           ".rope)"),
                 .mrope = OptionalArg<MRope>(mrope, kFn, "mrope",
                                             "be None or a posenc.MRope (of a "
                                             "MultimodalRotaryEmbedding: its .mrope)"),
                 .long_rope = std::nullopt,
                 .long_rope_threshold = 0,
                 .crossing = LongRopeCrossing::kRecompute};
             SetLongRope(options, long_rope, long_rope_threshold, crossing);
             return std::make_unique<PyKvCache>(std::move(options), bfloat16);
           }),
           py::arg("capacity"), py::arg("kv_heads"), py::arg("head_dim"), py::kw_only(),
           py::arg("value_dim") = py::none(), py::arg("rope") = py::none(),
           py::arg("mrope") = py::none(), py::arg("bfloat16") = false,
           py::arg("long_rope") = py::none(), py::arg("long_rope_threshold") = 0,
           py::arg("crossing") = "recompute")
      .def(
          "clear",
          [](PyKvCache& self) {
            self.Visit([&](auto& cache) { self.Locked([&] { cache.Clear(); }); });
          },
          "Empties the cache (capacity and options kept): before appending a recomputed "
          "sequence.")
      .def(
          "append",
          [](PyKvCache& self, const py::object& positions, const py::object& k, const py::object& v,
             const py::object& streams) {
            self.Visit([&](auto& cache) { AppendTo(self, cache, positions, k, v, streams); });
          },
          py::arg("positions"), py::arg("k"), py::arg("v"), py::kw_only(),
          py::arg("streams") = py::none(),
          R"(Appends n tokens to the next n slots: k [n, kv_heads, head_dim] rotated at
`positions` (int64 [n], each in [0, 2^32]), v [n, kv_heads, value_dim] copied. For an mrope cache,
`streams` int64 [num_streams, n] turns the keys and `positions` is the token order that causal
masks, windows and chunks follow. Past capacity, wrong shapes or dtypes, bad positions: a
posenc.Error, and the cache is untouched.)")
      .def(
          "attend",
          [](PyKvCache& self, const py::object& q, const py::object& query_pos,
             const py::object& causal, const py::object& alibi, const py::object& scale,
             const py::object& window, const py::object& chunk_size, const py::object& softcap,
             const py::object& sinks_arg, const py::object& query_streams, const py::object& out) {
            const std::vector<float> sinks = SinkValues(sinks_arg, kFn);
            AttentionOptions options;
            options.causal = py::bool_(causal);
            options.alibi = OptionalArg<Alibi>(alibi, kFn, "alibi", "be None or a posenc.Alibi");
            options.scale = scale.is_none() ? 0.0
                                            : NumberArg(scale, kFn, "scale",
                                                        "be None or a number (None or 0: 1 / "
                                                        "sqrt(head_dim))");
            options.window = IntArg(window, kFn, "window", "be an int (0: no window)");
            options.chunk_size = IntArg(chunk_size, kFn, "chunk_size", "be an int (0: no chunks)");
            options.softcap = NumberArg(softcap, kFn, "softcap", "be a number (0: off)");
            options.sinks = sinks;
            return self.Visit([&](auto& cache) {
              return AttendTo(self, cache, q, query_pos, query_streams, options, out);
            });
          },
          py::arg("q"), py::arg("query_pos"), py::kw_only(), py::arg("causal") = false,
          py::arg("alibi") = py::none(), py::arg("scale") = py::none(), py::arg("window") = 0,
          py::arg("chunk_size") = 0, py::arg("softcap") = 0.0, py::arg("sinks") = py::none(),
          py::arg("query_streams") = py::none(), py::arg("out") = py::none(),
          R"(Attention of q [n, heads, head_dim] at query_pos (int64 [n]) against every cached
token -> out float32 [n, heads, value_dim] (into `out`, C-contiguous float32, when given).

q is rotated by the cache's rope (a copy; for an mrope cache by query_streams [num_streams, n]),
the cached keys are not. The options are posenc.attention's, against the cached positions:
causal (key j visible when positions[j] <= query_pos[i]), alibi, scale (None or 0: 1 /
sqrt(head_dim)),
window (query_pos[i] - positions[j] < window; 0: none), chunk_size (Llama 4's chunks; 0: none),
softcap (Gemma 2's logit soft-capping; 0: off) and sinks (gpt-oss: None or float32 [heads]).
Heads may be a multiple of kv_heads (grouped-query attention).)")
      .def(
          "context_shift",
          [](PyKvCache& self, const py::object& n_keep, const py::object& n_discard) {
            const int64_t keep = IntArg(n_keep, kFn, "n_keep");
            const int64_t discard = IntArg(n_discard, kFn, "n_discard");
            self.Visit(
                [&](auto& cache) { self.Locked([&] { cache.ContextShift(keep, discard); }); });
          },
          py::arg("n_keep"), py::arg("n_discard"),
          R"(llama.cpp's context shift: keeps the first n_keep tokens, drops the next n_discard,
moves the rest down to slot n_keep and their positions by -n_discard, re-rotating their keys
(for mrope every stream moves). n_keep >= 0, n_discard >= 1, n_keep + n_discard <= size.)")
      .def(
          "remove",
          [](PyKvCache& self, const py::object& begin, const py::object& end) {
            const int64_t b = IntArg(begin, kFn, "begin"), e = IntArg(end, kFn, "end");
            self.Visit([&](auto& cache) { self.Locked([&] { cache.Remove(b, e); }); });
          },
          py::arg("begin"), py::arg("end"),
          "Drops slots [begin, end) and moves the later slots down, keeping their positions and "
          "keys as they are.")
      .def(
          "shift_positions",
          [](PyKvCache& self, const py::object& begin, const py::object& end,
             const py::object& delta) {
            const int64_t b = IntArg(begin, kFn, "begin"), e = IntArg(end, kFn, "end");
            const int64_t d = IntArg(delta, kFn, "delta");
            self.Visit([&](auto& cache) { self.Locked([&] { cache.ShiftPositions(b, e, d); }); });
          },
          py::arg("begin"), py::arg("end"), py::arg("delta"),
          "Moves the positions of slots [begin, end) by delta, re-rotating their keys by it; the "
          "new positions must stay in [0, 2^32].")
      .def(
          "roll_sink_window",
          [](PyKvCache& self, const py::object& sinks, const py::object& window,
             const py::object& incoming, const py::object& mode) {
            const int64_t s = IntArg(sinks, kRoll, "sinks"), w = IntArg(window, kRoll, "window");
            const int64_t n = IntArg(incoming, kRoll, "incoming");
            const SinkPositions positions = ModeOf(mode);
            return self.Visit([&](auto& cache) {
              return self.Locked([&] { return RollSinkWindow(cache, s, w, n, positions); });
            });
          },
          py::arg("sinks"), py::arg("window"), py::arg("incoming") = 1, py::arg("mode") = "text",
          R"(Attention sinks (StreamingLLM): makes room for `incoming` tokens in a cache kept as the
first `sinks` tokens plus a window of the last `window`, dropping the oldest non-sink tokens (as
few as needed). Returns the number dropped. mode "text": the kept keys keep their positions in the
text; "cache": positions are slots in the cache, so the window is shifted down by the number
dropped (context_shift(sinks, dropped)). sinks >= 0, window >= 1, incoming in [1, window],
sinks + window <= capacity.)")
      .def_property_readonly("size", &PyKvCache::Size,
                             "Tokens cached (slots [0, size) are filled).")
      .def("__len__", &PyKvCache::Size)
      .def_property_readonly(
          "capacity", [](PyKvCache& self) { return self.Options().capacity; }, "Slots.")
      .def_property_readonly("kv_heads", [](PyKvCache& self) { return self.Options().kv_heads; })
      .def_property_readonly("head_dim", [](PyKvCache& self) { return self.Options().head_dim; })
      .def_property_readonly("value_dim", [](PyKvCache& self) { return self.Options().value_dim; })
      .def_property_readonly("bfloat16", &PyKvCache::BFloat16Storage,
                             "Whether keys and values are stored as bfloat16.")
      .def_property_readonly(
          "rope", [](PyKvCache& self) { return self.Options().rope; },
          "The posenc.Rope that rotates the keys (a copy), or None.")
      .def_property_readonly(
          "mrope", [](PyKvCache& self) { return self.Options().mrope; },
          "The posenc.MRope that rotates the keys (a copy), or None.")
      .def_property_readonly(
          "long_rope", [](PyKvCache& self) { return self.Options().long_rope; },
          "LongRoPE's long-factor posenc.Rope (a copy), or None.")
      .def_property_readonly(
          "long_rope_threshold", [](PyKvCache& self) { return self.Options().long_rope_threshold; },
          "L0: positions from it on turn with long_rope.")
      .def_property_readonly(
          "crossing", [](PyKvCache& self) { return CrossingName(self.Options().crossing); },
          "'recompute' or 'keep_rotation' (see the class).")
      .def_property_readonly(
          "keys",
          [](const py::object& self_object) {
            PyKvCache& self = self_object.cast<PyKvCache&>();
            const std::lock_guard<std::mutex> lock(self.Mutex());
            return self.Visit([&](auto& cache) {
              const auto keys = cache.Keys();
              using Element = std::conditional_t<
                  std::is_same_v<std::remove_cvref_t<decltype(*keys.data)>, BFloat16>, int16_t,
                  float>;
              return ReadOnlyView(reinterpret_cast<const Element*>(keys.data),
                                  {keys.tokens, keys.num_heads, keys.head_dim}, self_object);
            });
          },
          R"(The cached keys, rotated: [size, kv_heads, head_dim], float32 (int16 bfloat16 bits for
a bfloat16 cache). A read-only view of the cache's memory, not a copy: it keeps the cache alive,
keeps the shape it had when taken (later appends do not extend it), and shows what later calls
write into those slots (a shift or removal moves other tokens into them). Copy it (np.array) to
keep a snapshot.)")
      .def_property_readonly(
          "values",
          [](const py::object& self_object) {
            PyKvCache& self = self_object.cast<PyKvCache&>();
            const std::lock_guard<std::mutex> lock(self.Mutex());
            return self.Visit([&](auto& cache) {
              const auto values = cache.Values();
              using Element = std::conditional_t<
                  std::is_same_v<std::remove_cvref_t<decltype(*values.data)>, BFloat16>, int16_t,
                  float>;
              return ReadOnlyView(reinterpret_cast<const Element*>(values.data),
                                  {values.tokens, values.num_heads, values.head_dim}, self_object);
            });
          },
          "The cached values: [size, kv_heads, value_dim], a read-only view as `keys` is.")
      .def_property_readonly(
          "positions",
          [](const py::object& self_object) {
            PyKvCache& self = self_object.cast<PyKvCache&>();
            const std::lock_guard<std::mutex> lock(self.Mutex());
            return self.Visit([&](auto& cache) {
              const std::span<const int64_t> positions = cache.Positions();
              return ReadOnlyView(positions.data(), {static_cast<int64_t>(positions.size())},
                                  self_object);
            });
          },
          "int64 [size]: each cached token's position, a read-only view as `keys` is.")
      .def("__repr__", [](PyKvCache& self) {
        const KvCacheOptions& o = self.Options();
        std::string out = "KVCache(size=" + std::to_string(self.Size()) +
                          ", capacity=" + std::to_string(o.capacity) +
                          ", kv_heads=" + std::to_string(o.kv_heads) +
                          ", head_dim=" + std::to_string(o.head_dim) +
                          ", value_dim=" + std::to_string(o.value_dim);
        out += o.rope ? ", rope" : o.mrope ? ", mrope" : ", no rotation";
        out += self.BFloat16Storage() ? ", bfloat16)" : ", float32)";
        return out;
      });
}

}  // namespace posenc::python
