#include "posenc/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "attention_kernels.h"
#include "attention_reference_row.h"
#include "float32_range.h"
#include "posenc/error.h"
#include "posenc/positions.h"
#include "relative_bias_internal.h"

namespace posenc {
namespace {

constexpr std::string_view kFunction = "attention";

// "equal <what> (<value>)": the rule of every shape check below.
std::string Equal(std::string_view what, int64_t value) {
  return "equal " + std::string(what) + " (" + std::to_string(value) + ")";
}

// Whether q and k turn by RoPE (1-D or multi-stream) before scoring.
bool Rotates(const AttentionOptions& options) { return options.rope || options.mrope; }

// A dense copy of x (q when is_query, else k) rotated at its tokens' positions, in x's own
// storage type: by the standalone op (ApplyRope / ApplyMRope: the same SIMD kernel, so the fused
// path and the op can never disagree on the rotation), or by its double reference.
template <typename T>
std::vector<T> RotatedCopy(const AttentionOptions& options, bool is_query,
                           std::span<const int64_t> positions, Heads<const T> x, bool reference) {
  std::vector<T> buffer(static_cast<size_t>(x.tokens * x.num_heads * x.head_dim));
  const Heads<T> out = Heads<T>::Dense(buffer.data(), x.tokens, x.num_heads, x.head_dim);
  constexpr RopeDirection kForward = RopeDirection::kForward;
  if (options.mrope) {
    const PositionStreams& streams = is_query ? options.mrope_query_pos : options.mrope_key_pos;
    if (reference) {
      ApplyMRopeReference<T>(*options.mrope, streams, x, out, kForward);
    } else {
      ApplyMRope<T>(*options.mrope, streams, x, out, kForward);
    }
  } else if (reference) {
    ApplyRopeReference(*options.rope, positions, x, out, kForward);
  } else {
    ApplyRope(*options.rope, positions, x, out, kForward);
  }
  return buffer;
}

// T5's bias as the kernel reads it (AttentionKernelArgs::relative_bias): per head, the bias at
// every distance d in [-extent, extent], and whether farther distances need a bucket lookup.
// The buckets grow with |d| on each side up to the side's last; from `saturation` on, every
// distance is in the last bucket. The table spans saturation plus one key tile's reach, so
// that a tile of consecutive keys straddling the edge reads it without a lookup; a very large
// max_distance keeps the table small (kMaxDenseDistance) and looks farther buckets up.
struct RelativeBiasTable {
  std::vector<float> bias;  // [num_heads, 2 extent + 1]
  int64_t extent = 0;
  bool far_lookup = false;
};

RelativeBiasTable MakeRelativeBiasTable(const RelativeBias& relative) {
  constexpr int64_t kMaxDenseDistance = 4096;
  constexpr int64_t kTileReach = 256;  // >= the kernel's key tile, in keys
  const RelativeBuckets& buckets = relative.buckets;
  const auto bucket = [&](int64_t d) {
    return internal::RelativePositionBucketUnchecked(buckets, d);
  };
  const int64_t last_before = bucket(-kMaxPosition), last_after = bucket(kMaxPosition);
  const auto saturated = [&](int64_t n) {
    return bucket(-n) == last_before && bucket(n) == last_after;
  };
  // The smallest saturated distance, by bisection (buckets are monotone in |d|).
  int64_t low = 0, high = kMaxPosition;  // saturated(high), and not saturated below low
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (saturated(mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  RelativeBiasTable table;
  table.far_lookup = high > kMaxDenseDistance;
  table.extent = std::min(high, kMaxDenseDistance) + kTileReach;
  const int64_t width = 2 * table.extent + 1;
  table.bias.resize(static_cast<size_t>(relative.num_heads * width));
  for (int64_t d = -table.extent; d <= table.extent; ++d) {
    const int64_t b = bucket(d);
    for (int64_t h = 0; h < relative.num_heads; ++h) {
      table.bias[static_cast<size_t>(h * width + table.extent + d)] =
          relative.table[static_cast<size_t>(b * relative.num_heads + h)];
    }
  }
  return table;
}

double ScoreScale(const AttentionOptions& options, int64_t head_dim) {
  return internal::ResolvedScale(options.scale, head_dim);
}

// The fused kernel (attention_kernels-inl.h) on validated input: RoPE into per-call copies of q
// and k, ALiBi slopes and the scale resolved, then one dispatch.
template <typename T>
void FusedAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out) {
  std::vector<T> q_rotated, k_rotated;
  if (Rotates(options)) {
    q_rotated = RotatedCopy(options, true, query_pos, q, false);
    k_rotated = RotatedCopy(options, false, key_pos, k, false);
    q = Heads<const T>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim);
    k = Heads<const T>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  }
  std::vector<float> slopes;
  if (options.alibi) {
    for (const double slope : AlibiSlopes(*options.alibi)) {
      slopes.push_back(static_cast<float>(slope));
    }
  }

  const double scale = ScoreScale(options, q.head_dim);
  std::vector<float> query_scales;
  if (options.query_scale) {
    for (const int64_t pos : query_pos) {
      query_scales.push_back(static_cast<float>(scale * options.query_scale->At(pos)));
    }
  }
  RelativeBiasTable relative;
  if (options.relative_bias) relative = MakeRelativeBiasTable(*options.relative_bias);

  internal::AttentionKernelArgs args =
      internal::KernelArgsFor<T>(q, k, v, query_pos, key_pos, out);
  args.causal = options.causal;
  args.window = options.window;
  args.chunk_size = options.chunk_size;
  args.alibi_slopes = options.alibi ? slopes.data() : nullptr;
  args.scale = static_cast<float>(scale);
  args.query_scales = options.query_scale ? query_scales.data() : nullptr;
  if (options.relative_bias) {
    args.relative_bias = relative.bias.data();
    args.relative_extent = relative.extent;
    args.relative_far = relative.far_lookup ? &*options.relative_bias : nullptr;
  }
  internal::AttentionKernel(args);
}

}  // namespace

void AttentionReference(const AttentionOptions& options, Heads<const float> q,
                        Heads<const float> k, Heads<const float> v,
                        std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                        Heads<float> out) {
  // Assumes validated input (see Attention): shapes agree, positions are >= 0, out is disjoint.

  // (1) RoPE: rotate q and k at their own positions, into dense float copies. The rest of the
  // passes read q and k through the views, whichever memory they point at.
  std::vector<float> q_rotated, k_rotated;
  if (Rotates(options)) {
    q_rotated = RotatedCopy(options, true, query_pos, q, true);
    k_rotated = RotatedCopy(options, false, key_pos, k, true);
    q = Heads<const float>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim);
    k = Heads<const float>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  }

  const double scale = ScoreScale(options, q.head_dim);
  const std::vector<double> slopes = options.alibi ? AlibiSlopes(*options.alibi)
                                                   : std::vector<double>();
  const int64_t group = q.num_heads / k.num_heads;  // query heads per key/value head

  std::vector<double> scores(static_cast<size_t>(k.tokens));
  std::vector<char> visible(static_cast<size_t>(k.tokens));
  std::vector<double> sum_v(static_cast<size_t>(v.head_dim));

  for (int64_t i = 0; i < q.tokens; ++i) {
    for (int64_t h = 0; h < q.num_heads; ++h) {
      const int64_t g = h / group;  // the key/value head query head h reads
      const float* q_row = q.Row(i, h);
      // The query scale multiplies the scores as it would q (after RoPE).
      const double query_scale = options.query_scale ? options.query_scale->At(query_pos[i]) : 1.0;
      for (int64_t j = 0; j < k.tokens; ++j) {
        // (2) score: s_ij = scale * c_i * q_i . k_j, in double.
        const float* k_row = k.Row(j, g);
        double dot = 0.0;
        for (int64_t d = 0; d < q.head_dim; ++d) {
          dot += static_cast<double>(q_row[d]) * static_cast<double>(k_row[d]);
        }
        double s = scale * query_scale * dot;
        // (3) ALiBi: s_ij += -slope_h * (query_pos_i - key_pos_j); T5: s_ij +=
        // table[bucket(key_pos_j - query_pos_i)][h].
        if (options.alibi) s += AlibiBias(slopes[h], query_pos[i], key_pos[j]);
        if (options.relative_bias) {
          const RelativeBias& bias = *options.relative_bias;
          const int64_t bucket = RelativePositionBucket(bias.buckets, key_pos[j] - query_pos[i]);
          s += static_cast<double>(bias.table[static_cast<size_t>(bucket * bias.num_heads + h)]);
        }
        // (4) masks: causal, window and chunks (internal::VisibleByMask).
        visible[j] = internal::VisibleByMask(options, query_pos[i], key_pos[j]);
        scores[j] = s;
      }
      // (5) softmax over the visible keys, (6) weighted sum of v: out_i = sum_j p_ij v_j.
      internal::SoftmaxWeightedRow(scores, visible, v, g, sum_v, out.Row(i, h));
    }
  }
}

namespace {

// The checks of every Attention, whatever the storage type, shared by Attention (which runs them
// before writing) and ValidateAttention (which runs only them), so the two cannot disagree.
template <typename T>
void CheckAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<float> out) {
  q.Validate(kFunction, "q");
  k.Validate(kFunction, "k");
  v.Validate(kFunction, "v");
  out.Validate(kFunction, "out");

  Require(k.head_dim == q.head_dim, kFunction, "k.head_dim", Equal("q.head_dim", q.head_dim),
          k.head_dim);
  Require(v.tokens == k.tokens, kFunction, "v.tokens", Equal("k.tokens", k.tokens), v.tokens);
  Require(v.num_heads == k.num_heads, kFunction, "v.num_heads", Equal("k.num_heads", k.num_heads),
          v.num_heads);
  Require(out.tokens == q.tokens, kFunction, "out.tokens", Equal("q.tokens", q.tokens),
          out.tokens);
  Require(out.num_heads == q.num_heads, kFunction, "out.num_heads",
          Equal("q.num_heads", q.num_heads), out.num_heads);
  Require(out.head_dim == v.head_dim, kFunction, "out.head_dim", Equal("v.head_dim", v.head_dim),
          out.head_dim);
  // (0 is the only multiple of 0: q without heads may read k without heads.)
  Require(k.num_heads > 0 ? q.num_heads % k.num_heads == 0 : q.num_heads == 0, kFunction,
          "num_heads",
          "be a multiple of num_kv_heads (" + std::to_string(k.num_heads) + ")", q.num_heads);

  ValidatePositions(kFunction, query_pos, q.tokens, "query_pos");
  ValidatePositions(kFunction, key_pos, k.tokens, "key_pos");

  if (options.rope) {
    options.rope->Validate();
    Require(options.rope->head_dim == q.head_dim, kFunction, "rope.head_dim",
            Equal("q.head_dim", q.head_dim), options.rope->head_dim);
  }
  if (options.mrope) {
    Require(!options.rope, kFunction, "mrope", "not be given with rope (each is a rotation)",
            "both");
    options.mrope->Validate();
    Require(options.mrope->rope.head_dim == q.head_dim, kFunction, "mrope.rope.head_dim",
            Equal("q.head_dim", q.head_dim), options.mrope->rope.head_dim);
    options.mrope_query_pos.Validate(kFunction, "mrope_query_pos", options.mrope->num_streams,
                                     q.tokens);
    options.mrope_key_pos.Validate(kFunction, "mrope_key_pos", options.mrope->num_streams,
                                   k.tokens);
  }
  if (options.alibi) {
    options.alibi->Validate();
    Require(options.alibi->LocalHeads() == q.num_heads, kFunction, "alibi.LocalHeads()",
            Equal("q.num_heads", q.num_heads), options.alibi->LocalHeads());
  }
  // The kernel scores in float32, so the scale is checked there: 1e300 would make every
  // score inf.
  Require(options.scale == 0.0 || internal::IsPositiveFloat32(options.scale), kFunction, "scale",
          "be 0 (meaning 1 / sqrt(head_dim)) or " + std::string(internal::kPositiveFloat32),
          options.scale);
  Require(options.window >= 0, kFunction, "window", "be >= 0 (0 means no window)",
          options.window);
  Require(options.chunk_size >= 0, kFunction, "chunk_size", "be >= 0 (0 means no chunks)",
          options.chunk_size);
  if (options.query_scale) {
    options.query_scale->Validate();
    // The factor grows with the position: the largest query position gives the largest score
    // scale, which the kernel uses in float32.
    if (!query_pos.empty()) {
      const int64_t last = *std::max_element(query_pos.begin(), query_pos.end());
      const double largest = ScoreScale(options, q.head_dim) * options.query_scale->At(last);
      Require(internal::IsPositiveFloat32(largest), kFunction,
              "scale * query_scale.At(query_pos)",
              "be " + std::string(internal::kPositiveFloat32), largest);
    }
  }
  if (options.relative_bias) {
    Require(!options.alibi, kFunction, "relative_bias",
            "not be given with alibi (each is a position bias)", "both");
    options.relative_bias->Validate();
    Require(options.relative_bias->num_heads == q.num_heads, kFunction,
            "relative_bias.num_heads", Equal("q.num_heads", q.num_heads),
            options.relative_bias->num_heads);
  }

  // Exact, as in RoPE: out may be a slot of a fused buffer whose byte range interleaves with
  // q's, k's or v's without sharing a row.
  const std::string_view overlap_rule = "not share memory with q, k or v";
  Require(!RowsOverlap(out, q), kFunction, "out", overlap_rule, "a view overlapping q");
  Require(!RowsOverlap(out, k), kFunction, "out", overlap_rule, "a view overlapping k");
  Require(!RowsOverlap(out, v), kFunction, "out", overlap_rule, "a view overlapping v");
}

// Every public Attention: the checks, then the kernel.
template <typename T>
void ValidatedAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                        Heads<const T> v, std::span<const int64_t> query_pos,
                        std::span<const int64_t> key_pos, Heads<float> out) {
  // Everything is validated before out is written.
  CheckAttention(options, q, k, v, query_pos, key_pos, out);
  // No queries: nothing to write. (No keys: every query sees nothing and gets zeros.)
  if (q.Empty()) return;
  // The fused (flash-style) kernel, tested against AttentionReference.
  FusedAttention(options, q, k, v, query_pos, key_pos, out);
}

}  // namespace

void Attention(const AttentionOptions& options, Heads<const float> q, Heads<const float> k,
               Heads<const float> v, std::span<const int64_t> query_pos,
               std::span<const int64_t> key_pos, Heads<float> out) {
  ValidatedAttention(options, q, k, v, query_pos, key_pos, out);
}

void Attention(const AttentionOptions& options, Heads<const BFloat16> q,
               Heads<const BFloat16> k, Heads<const BFloat16> v,
               std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
               Heads<float> out) {
  ValidatedAttention(options, q, k, v, query_pos, key_pos, out);
}

void ValidateAttention(const AttentionOptions& options, Heads<const float> q,
                       Heads<const float> k, Heads<const float> v,
                       std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                       Heads<float> out) {
  CheckAttention(options, q, k, v, query_pos, key_pos, out);
}

void ValidateAttention(const AttentionOptions& options, Heads<const BFloat16> q,
                       Heads<const BFloat16> k, Heads<const BFloat16> v,
                       std::span<const int64_t> query_pos, std::span<const int64_t> key_pos,
                       Heads<float> out) {
  CheckAttention(options, q, k, v, query_pos, key_pos, out);
}

}  // namespace posenc
