// From a public attention call to the kernel's arguments (attention_call.h).
#include "attention_call.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "float32_range.h"
#include "posenc/alibi.h"
#include "posenc/error.h"
#include "posenc/mrope.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "relative_bias_internal.h"
#include "rows.h"

namespace posenc::internal {
namespace {

constexpr std::string_view kFunction = "attention";

}  // namespace

std::string Equal(std::string_view what, int64_t value) {
  return "equal " + std::string(what) + " (" + std::to_string(value) + ")";
}

bool Rotates(const AttentionOptions& options) { return options.rope || options.mrope; }

template <typename T>
ScratchVector<T> RotatedCopy(const AttentionOptions& options, bool is_query,
                             std::span<const int64_t> positions, Heads<const T> x, bool reference) {
  ScratchVector<T> buffer(static_cast<size_t>(x.tokens * x.num_heads * x.head_dim));
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

void UnrotateGradient(const AttentionOptions& options, bool is_query,
                      std::span<const int64_t> positions, Heads<float> dx, bool reference) {
  constexpr RopeDirection kInverse = RopeDirection::kInverse;
  if (options.mrope) {
    const PositionStreams& streams = is_query ? options.mrope_query_pos : options.mrope_key_pos;
    if (reference) {
      ApplyMRopeReference<float>(*options.mrope, streams, dx, dx, kInverse);
    } else {
      ApplyMRope<float>(*options.mrope, streams, dx, kInverse);
    }
  } else if (reference) {
    ApplyRopeReference(*options.rope, positions, dx, dx, kInverse);
  } else {
    ApplyRope(*options.rope, positions, dx, kInverse);
  }
}

template <typename T, typename Out>
void CheckAttention(const AttentionOptions& options, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, std::span<const int64_t> query_pos,
                    std::span<const int64_t> key_pos, Heads<Out> out) {
  q.Validate(kFunction, "q");
  k.Validate(kFunction, "k");
  v.Validate(kFunction, "v");
  out.Validate(kFunction, "out");

  Require(k.head_dim == q.head_dim, kFunction, "k.head_dim", Equal("q.head_dim", q.head_dim),
          k.head_dim);
  Require(v.tokens == k.tokens, kFunction, "v.tokens", Equal("k.tokens", k.tokens), v.tokens);
  Require(v.num_heads == k.num_heads, kFunction, "v.num_heads", Equal("k.num_heads", k.num_heads),
          v.num_heads);
  Require(out.tokens == q.tokens, kFunction, "out.tokens", Equal("q.tokens", q.tokens), out.tokens);
  Require(out.num_heads == q.num_heads, kFunction, "out.num_heads",
          Equal("q.num_heads", q.num_heads), out.num_heads);
  Require(out.head_dim == v.head_dim, kFunction, "out.head_dim", Equal("v.head_dim", v.head_dim),
          out.head_dim);
  // (0 is the only multiple of 0: q without heads may read k without heads.)
  Require(k.num_heads > 0 ? q.num_heads % k.num_heads == 0 : q.num_heads == 0, kFunction,
          "num_heads", "be a multiple of num_kv_heads (" + std::to_string(k.num_heads) + ")",
          q.num_heads);

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
  Require(options.window >= 0, kFunction, "window", "be >= 0 (0 means no window)", options.window);
  Require(options.chunk_size >= 0, kFunction, "chunk_size", "be >= 0 (0 means no chunks)",
          options.chunk_size);
  if (options.query_scale) {
    options.query_scale->Validate();
    // The factor grows with the position: the largest query position gives the largest score
    // scale, which the kernel uses in float32.
    if (!query_pos.empty()) {
      const int64_t last = *std::max_element(query_pos.begin(), query_pos.end());
      const double largest =
          ResolvedScale(options.scale, q.head_dim) * options.query_scale->At(last);
      Require(internal::IsPositiveFloat32(largest), kFunction, "scale * query_scale.At(query_pos)",
              "be " + std::string(internal::kPositiveFloat32), largest);
    }
  }
  if (options.relative_bias) {
    Require(!options.alibi, kFunction, "relative_bias",
            "not be given with alibi (each is a position bias)", "both");
    options.relative_bias->Validate();
    Require(options.relative_bias->num_heads == q.num_heads, kFunction, "relative_bias.num_heads",
            Equal("q.num_heads", q.num_heads), options.relative_bias->num_heads);
  }

  Require(options.softcap == 0.0 || internal::IsPositiveFloat32(options.softcap), kFunction,
          "softcap", "be finite and > 0 (0: off), " + std::string(internal::kPositiveFloat32),
          options.softcap);
  if (!options.sinks.empty()) {
    Require(static_cast<int64_t>(options.sinks.size()) == q.num_heads, kFunction, "sinks.size()",
            Equal("q.num_heads", q.num_heads) + " (one logit per query head)",
            static_cast<int64_t>(options.sinks.size()));
    for (size_t h = 0; h < options.sinks.size(); ++h) {
      Require(std::isfinite(options.sinks[h]), kFunction, "sinks[" + std::to_string(h) + "]",
              "be finite", static_cast<double>(options.sinks[h]));
    }
  }

  // Exact, as in RoPE: out may be a slot of a fused buffer whose byte range interleaves with
  // q's, k's or v's without sharing a row.
  const std::string_view overlap_rule = "not share memory with q, k or v";
  Require(!RowsOverlap(out, q), kFunction, "out", overlap_rule, "a view overlapping q");
  Require(!RowsOverlap(out, k), kFunction, "out", overlap_rule, "a view overlapping k");
  Require(!RowsOverlap(out, v), kFunction, "out", overlap_rule, "a view overlapping v");
}

template void CheckAttention(const AttentionOptions&, Heads<const float>, Heads<const float>,
                             Heads<const float>, std::span<const int64_t>, std::span<const int64_t>,
                             Heads<float>);
template void CheckAttention(const AttentionOptions&, Heads<const float>, Heads<const float>,
                             Heads<const float>, std::span<const int64_t>, std::span<const int64_t>,
                             Heads<const float>);
template void CheckAttention(const AttentionOptions&, Heads<const BFloat16>, Heads<const BFloat16>,
                             Heads<const BFloat16>, std::span<const int64_t>,
                             std::span<const int64_t>, Heads<float>);
template void CheckAttention(const AttentionOptions&, Heads<const BFloat16>, Heads<const BFloat16>,
                             Heads<const BFloat16>, std::span<const int64_t>,
                             std::span<const int64_t>, Heads<const float>);

template ScratchVector<float> RotatedCopy(const AttentionOptions&, bool, std::span<const int64_t>,
                                          Heads<const float>, bool);
template ScratchVector<BFloat16> RotatedCopy(const AttentionOptions&, bool,
                                             std::span<const int64_t>, Heads<const BFloat16>, bool);

template <typename T>
PreparedAttention<T>::PreparedAttention(const AttentionOptions& options, Heads<const T> q,
                                        Heads<const T> k, Heads<const T> v,
                                        std::span<const int64_t> query_pos,
                                        std::span<const int64_t> key_pos, Heads<float> out) {
  if (Rotates(options)) {
    q_rotated = RotatedCopy(options, true, query_pos, q, false);
    k_rotated = RotatedCopy(options, false, key_pos, k, false);
    q = Heads<const T>::Dense(q_rotated.data(), q.tokens, q.num_heads, q.head_dim);
    k = Heads<const T>::Dense(k_rotated.data(), k.tokens, k.num_heads, k.head_dim);
  }
  if (options.alibi) {
    for (const double slope : AlibiSlopes(*options.alibi)) {
      slopes.push_back(static_cast<float>(slope));
    }
  }
  const double scale = ResolvedScale(options.scale, q.head_dim);
  if (options.query_scale) {
    for (const int64_t pos : query_pos) {
      query_scales.push_back(static_cast<float>(scale * options.query_scale->At(pos)));
    }
  }
  if (options.relative_bias) relative = MakeRelativeBiasTable(*options.relative_bias);

  args = KernelArgsFor<T>(q, k, v, query_pos, key_pos, out);
  args.causal = options.causal;
  args.window = options.window;
  args.chunk_size = options.chunk_size;
  args.alibi_slopes = options.alibi ? slopes.data() : nullptr;
  args.scale = static_cast<float>(scale);
  args.query_scales = options.query_scale ? query_scales.data() : nullptr;
  args.softcap = static_cast<float>(options.softcap);
  args.sinks = options.sinks.empty() ? nullptr : options.sinks.data();
  if (options.relative_bias) {
    args.relative_bias = relative.bias.data();
    args.relative_extent = relative.extent;
    args.relative_far = relative.far_lookup ? &*options.relative_bias : nullptr;
  }
}

template struct PreparedAttention<float>;
template struct PreparedAttention<BFloat16>;

}  // namespace posenc::internal
