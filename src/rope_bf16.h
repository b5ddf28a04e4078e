// RoPE's rotation of bfloat16 rows on CPUs with AVX512-BF16, whose vcvtne2ps2bf16 rounds 32
// float32 values to bfloat16 (to nearest, ties to even) in one instruction. The portable
// narrowing in simd_storage-inl.h takes eight (shift, mask, two adds, shift, NaN select, pack,
// permute) per 16 values, and on one core that, not memory, bounded bfloat16 RoPE in place.
//
// Highway 1.0.3 (the version this project builds with) has no target that uses the instruction:
// its AVX3 DemoteTo and ReorderDemote2To to bfloat16 are written out with integer operations (a
// TODO there waits for avx512bf16), and the AVX3_ZEN4 and AVX3_SPR targets of later versions do
// not exist yet. So, as for attention (attention_bf16.h), these are plain functions with their
// own target attributes: the Highway kernel (rope_kernels-inl.h, AVX3 targets) calls them once
// per token and tensor when the data is bfloat16 and HasBf16Narrowing() holds, a choice made once
// per call. No -march flag is needed.
//
// The results are bit-identical to the portable path: the same float32 multiplies and fused
// multiply-adds in the same order, and the same rounding. The instruction rounds like
// BFloat16::FromFloat (NaN stays a quiet NaN, values past the largest bfloat16 become inf)
// except that it flushes float32 denormal inputs to zero; vectors holding a denormal are
// rounded with the portable integer steps instead (a branch that real data almost never takes).
//
// The rows are also prefetched a little ahead (simd/prefetch.h): out of cache,
// the hardware prefetchers alone left this loop waiting on memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace posenc::internal {

// Whether this CPU runs the functions below (AVX512-F, BW, VL and BF16; false on other machines
// and compilers, where they must not be called).
bool HasBf16Narrowing();

// out[i] = the bfloat16 bits of in[i], rounded to nearest even, for i < n. The narrowing of the
// row functions below, exposed so that tests can hold it to BFloat16::FromFloat bit for bit.
void NarrowToBf16Native(const float* in, size_t n, uint16_t* out);

// Rotates features [0, rotary_dim) of `rows` rows of bfloat16: row r is read at
// in + r in_stride and written at out + r out_stride (the same memory when in place), with the
// cos and sin tables as the Highway kernel fills them for the layout (rope_kernels-inl.h:
// half-split, one entry per pair; interleaved, two per pair with the first sine negated). Reads
// and writes nothing outside those features.
void RotateRowsBf16(bool interleaved, size_t rotary_dim, const float* cos_table,
                    const float* sin_table, const uint16_t* in, ptrdiff_t in_stride, uint16_t* out,
                    ptrdiff_t out_stride, int64_t rows);

}  // namespace posenc::internal
