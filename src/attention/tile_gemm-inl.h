// The one matrix product of the attention tiles, compiled per Highway target by the kernels that
// include it: C (+)= A B for a small tile, shaped as a GEMM microkernel (Goto and van de Geijn,
// "Anatomy of High-Performance Matrix Multiplication", 2008). B's rows lie along the vector lanes
// and A's elements are broadcast, so every step of the depth loop is a register block of
// outer-product FMAs, rows x vectors accumulators, and no result ends in a lane reduction.
//
// A is read through two strides, so the transposed products of the backward pass (P^T dO,
// dS^T Q) need no transposed copy: A(r, k) = a[r a_row + k a_depth].
//
// Every element of C is one chain of FMAs over k = 0 .. depth - 1, in order, whatever the
// register block: the result does not depend on how a tile is cut into blocks, which keeps the
// backward pass's bits the same for every thread count and work split.

#if defined(POSENC_TILE_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_TILE_GEMM_INL_H_
#undef POSENC_TILE_GEMM_INL_H_
#else
#define POSENC_TILE_GEMM_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

#if HWY_HAVE_SCALABLE
#error "TileGemm keeps its accumulators in arrays of vectors, which sizeless vectors forbid"
#endif

// The register block: kGemmRows rows of A times kGemmVectors vectors of B's row. AVX-512 has 32
// vector registers: 4 x 4 accumulators, 4 loads of B and a broadcast leave room (16 independent
// FMA chains cover two ports of 4-cycle latency); AVX2 and SSE4 have 16, so 4 x 2.
constexpr size_t kGemmRows = 4;
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kGemmVectors = 4;
#else
constexpr size_t kGemmVectors = 2;
#endif

// One register block: rows R <= kGemmRows of C, vectors V <= kGemmVectors from column `col`.
template <size_t R, size_t V, class DF>
HWY_INLINE void GemmBlock(DF df, const float* HWY_RESTRICT a, size_t a_row, size_t a_depth,
                          const float* HWY_RESTRICT b, size_t b_stride, size_t depth,
                          float* HWY_RESTRICT c, size_t c_stride, bool accumulate) {
  const size_t n = hn::Lanes(df);
  hn::Vec<DF> acc[R][V];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < V; ++v) {
      acc[r][v] = accumulate ? hn::LoadU(df, c + r * c_stride + v * n) : hn::Zero(df);
    }
  }
  for (size_t k = 0; k < depth; ++k) {
    const float* HWY_RESTRICT b_row = b + k * b_stride;
    hn::Vec<DF> bv[V];
    for (size_t v = 0; v < V; ++v) bv[v] = hn::LoadU(df, b_row + v * n);
    const float* HWY_RESTRICT a_k = a + k * a_depth;
    for (size_t r = 0; r < R; ++r) {
      const auto ar = hn::Set(df, a_k[r * a_row]);
      for (size_t v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(ar, bv[v], acc[r][v]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < V; ++v) hn::StoreU(acc[r][v], df, c + r * c_stride + v * n);
  }
}

// The blocks of R rows across all `vectors` vectors of C's columns.
template <size_t R, class DF>
HWY_INLINE void GemmRows(DF df, const float* HWY_RESTRICT a, size_t a_row, size_t a_depth,
                         const float* HWY_RESTRICT b, size_t b_stride, size_t depth,
                         float* HWY_RESTRICT c, size_t c_stride, size_t vectors, bool accumulate) {
  const size_t n = hn::Lanes(df);
  size_t v = 0;
  for (; v + kGemmVectors <= vectors; v += kGemmVectors) {
    GemmBlock<R, kGemmVectors>(df, a, a_row, a_depth, b + v * n, b_stride, depth, c + v * n,
                               c_stride, accumulate);
  }
  // The remaining vectors, fewer than kGemmVectors.
  const size_t left = vectors - v;
  b += v * n;
  c += v * n;
  if (left == 1)
    GemmBlock<R, 1>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, accumulate);
  if constexpr (kGemmVectors > 2) {
    if (left == 2) {
      GemmBlock<R, 2>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, accumulate);
    }
    if (left == 3) {
      GemmBlock<R, 3>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, accumulate);
    }
  }
}

// C[r][0 .. cols) (+)= sum_k A(r, k) B[k][0 .. cols) for r < rows, k < depth, with
// A(r, k) = a[r a_row + k a_depth], B's row k at b + k b_stride and C's row r at c + r c_stride.
// cols is a multiple of the vector length (the tiles pad their rows to whole vectors); without
// `accumulate`, C is overwritten.
template <class DF>
HWY_NOINLINE void TileGemm(DF df, const float* HWY_RESTRICT a, size_t a_row, size_t a_depth,
                           const float* HWY_RESTRICT b, size_t b_stride, size_t depth,
                           float* HWY_RESTRICT c, size_t c_stride, size_t rows, size_t cols,
                           bool accumulate) {
  const size_t vectors = cols / hn::Lanes(df);
  size_t r = 0;
  for (; r + kGemmRows <= rows; r += kGemmRows) {
    GemmRows<kGemmRows>(df, a + r * a_row, a_row, a_depth, b, b_stride, depth, c + r * c_stride,
                        c_stride, vectors, accumulate);
  }
  static_assert(kGemmRows == 4, "the remainder cases below");
  a += r * a_row;
  c += r * c_stride;
  switch (rows - r) {
    case 1:
      GemmRows<1>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, vectors, accumulate);
      break;
    case 2:
      GemmRows<2>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, vectors, accumulate);
      break;
    case 3:
      GemmRows<3>(df, a, a_row, a_depth, b, b_stride, depth, c, c_stride, vectors, accumulate);
      break;
    default:
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_TILE_GEMM_INL_H_
