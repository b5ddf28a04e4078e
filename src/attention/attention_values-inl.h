// Pass (3) of the forward attention kernel on float32 weights: the weighted values of value rows
// where they lie (decode) or packed (prefill), and the exact pass for rows at a mask edge of a
// tile whose values hold inf or NaN (prefill and decode).
#if defined(POSENC_ATTENTION_VALUES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ATTENTION_VALUES_INL_H_
#undef POSENC_ATTENTION_VALUES_INL_H_
#else
#define POSENC_ATTENTION_VALUES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention_tiles-inl.h"
#include "hwy/highway.h"
#include "simd/simd_storage-inl.h"
#include "tile_gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Whether key j at key_pos is hidden from `row` by a mask.
inline bool Hidden(const RowState& row, int64_t key_pos) {
  return key_pos < row.lo || key_pos > row.hi;
}

// Whether any of the `keys` value rows at v (v_stride apart, value_dim elements) holds inf or
// NaN. Asked only for tiles that straddle a mask edge.
template <typename T>
bool AnyNonFinite(const T* v, size_t v_stride, size_t keys, size_t value_dim) {
  for (size_t j = 0; j < keys; ++j) {
    for (size_t e = 0; e < value_dim; ++e) {
      if (!std::isfinite(ValueF32(v[j * v_stride + e]))) return true;
    }
  }
  return false;
}

// Pass (3) that skips hidden keys, for a row block that straddles a mask edge in a tile whose
// values hold inf or NaN: there the fast pass would add 0 * inf = NaN from a key the row never
// sees, which the math (a sum over visible keys) does not. Visible keys still add p v, so a
// non-finite value the row does see reaches it even with a weight that underflowed to 0.
// Plain and scalar: only hostile input comes here.
template <typename T>
void WeightedVisibleValues(const float* p, size_t p_stride, const T* v, size_t v_stride,
                           size_t keys, size_t value_dim, const int64_t* key_pos,
                           const RowState* rows, float* o, size_t o_stride) {
  for (size_t r = 0; r < kRowBlock; ++r) {
    float* o_r = o + r * o_stride;
    for (size_t e = 0; e < value_dim; ++e) o_r[e] *= rows[r].correction;
    for (size_t j = 0; j < keys; ++j) {
      if (Hidden(rows[r], key_pos[j])) continue;
      const float weight = p[r * p_stride + j];
      for (size_t e = 0; e < value_dim; ++e) o_r[e] += weight * ValueF32(v[j * v_stride + e]);
    }
  }
}

// Pass (3): o_r = o_r correction_r + sum_j p_rj v_j for the four rows of the block at o (rows
// o_stride floats apart, padded to whole vectors), the weights of row r at p + r p_stride, value
// row j at v + j v_stride (value_dim elements, float32 or bfloat16), one vector of value_dim at
// a time so that the four accumulators stay in registers across all `keys` keys. Not inlined:
// inlined into the bfloat16 instantiation of the caller, its four weight pointers were spilled
// to the stack and reloaded on every key (bfloat16 prefill 20% slower); on its own it keeps
// them in registers, and the call costs nothing per row block.
template <class DF, typename T>
HWY_NOINLINE void WeightedValues(DF df, const float* HWY_RESTRICT p, size_t p_stride,
                                 const T* HWY_RESTRICT v, size_t v_stride, size_t keys,
                                 size_t value_dim, const float* correction, float* HWY_RESTRICT o,
                                 size_t o_stride) {
  static_assert(kRowBlock == 4, "one named accumulator per row");
  const size_t n = hn::Lanes(df);
  const float* HWY_RESTRICT p0 = p;
  const float* HWY_RESTRICT p1 = p0 + p_stride;
  const float* HWY_RESTRICT p2 = p1 + p_stride;
  const float* HWY_RESTRICT p3 = p2 + p_stride;
  float* HWY_RESTRICT o0 = o;
  float* HWY_RESTRICT o1 = o0 + o_stride;
  float* HWY_RESTRICT o2 = o1 + o_stride;
  float* HWY_RESTRICT o3 = o2 + o_stride;
  const auto c0 = hn::Set(df, correction[0]), c1 = hn::Set(df, correction[1]);
  const auto c2 = hn::Set(df, correction[2]), c3 = hn::Set(df, correction[3]);
  const auto accumulate = [&](size_t e, auto load) HWY_ATTR {
    auto a0 = hn::Mul(hn::LoadU(df, o0 + e), c0), a1 = hn::Mul(hn::LoadU(df, o1 + e), c1);
    auto a2 = hn::Mul(hn::LoadU(df, o2 + e), c2), a3 = hn::Mul(hn::LoadU(df, o3 + e), c3);
    for (size_t j = 0; j < keys; ++j) {
      const auto vj = load(v + j * v_stride + e);
      a0 = hn::MulAdd(hn::Set(df, p0[j]), vj, a0);
      a1 = hn::MulAdd(hn::Set(df, p1[j]), vj, a1);
      a2 = hn::MulAdd(hn::Set(df, p2[j]), vj, a2);
      a3 = hn::MulAdd(hn::Set(df, p3[j]), vj, a3);
    }
    hn::StoreU(a0, df, o0 + e);
    hn::StoreU(a1, df, o1 + e);
    hn::StoreU(a2, df, o2 + e);
    hn::StoreU(a3, df, o3 + e);
  };
  size_t e = 0;
  for (; e + n <= value_dim; e += n) {
    accumulate(e, [df](const T* row) HWY_ATTR { return LoadF32(df, row); });
  }
  if (e < value_dim) {
    const size_t count = value_dim - e;
    accumulate(e, [df, count](const T* row) HWY_ATTR { return LoadPartialF32(df, row, count); });
  }
}

// Pass (3) for `rows` rows: o_r = o_r correction[r] + sum_j p_rj v_j (no correction: nullptr),
// with the weights of row r at p + r p_stride and value row j at v + j v_stride. float32 value
// rows of whole vectors are a tile product (TileGemm: each vector loaded from a value row serves
// four rows, each weight broadcast serves four vectors); other rows (bfloat16 widened, a partial
// last vector) go through WeightedValues, four rows at a time.
template <class DF, typename T>
HWY_INLINE void WeightedValueRows(DF df, const float* HWY_RESTRICT p, size_t p_stride,
                                  const T* HWY_RESTRICT v, size_t v_stride, size_t keys,
                                  size_t value_dim, const float* correction, size_t rows,
                                  float* HWY_RESTRICT o, size_t o_stride) {
  const size_t n = hn::Lanes(df);
  if constexpr (std::is_same_v<T, float>) {
    if (value_dim % n == 0) {
      for (size_t r = 0; correction != nullptr && r < rows; ++r) {
        if (correction[r] == 1.0f) continue;  // the row's max did not move: o stays
        const auto c = hn::Set(df, correction[r]);
        float* HWY_RESTRICT o_r = o + r * o_stride;
        for (size_t e = 0; e < value_dim; e += n) {
          hn::StoreU(hn::Mul(hn::LoadU(df, o_r + e), c), df, o_r + e);
        }
      }
      return TileGemm(df, p, p_stride, 1, v, v_stride, keys, o, o_stride, rows, value_dim, true);
    }
  }
  const float ones[kRowBlock] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (size_t r = 0; r < rows; r += kRowBlock) {
    WeightedValues(df, p + r * p_stride, p_stride, v, v_stride, keys, value_dim,
                   correction != nullptr ? correction + r : ones, o + r * o_stride, o_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ATTENTION_VALUES_INL_H_
