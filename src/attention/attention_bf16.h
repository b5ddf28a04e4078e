// The attention kernel's bfloat16 arithmetic on CPUs with AVX512-BF16 (vdpbf16ps: 32 bfloat16
// products summed pairwise into 16 float32 lanes, twice the multiply-adds of a float32 FMA).
// The Highway kernel (attention_kernels-inl.h) calls these for a row block of four query rows
// and one key tile when its inputs are bfloat16 and HasBf16DotProducts() holds; elsewhere it
// widens bfloat16 to float32 and runs its float32 loops. Plain pointers, no Highway types: the
// functions carry their own target attributes, so nothing here needs a -march flag.
//
// Accuracy: products of two bfloat16 values are exact in float32 and sums are float32, so the
// scores are as exact as the float32 path's. The softmax weights p (float32) are rounded to
// bfloat16, to nearest even, for the weighted sum of values, as FlashAttention does on GPUs and
// PyTorch's CPU flash attention does for bfloat16: each weight moves by at most 2^-9 of itself,
// so an output moves by at most 2^-9 max|v| (the sum of weights l stays float32).
#pragma once

#include <cstddef>
#include <cstdint>

namespace posenc::internal {

// bfloat16 elements per AVX-512 vector; q and value rows are padded to multiples of these.
constexpr size_t kBf16PerVector = 32;
constexpr size_t kFloatsPerVector = 16;

// Whether this CPU runs the functions below (AVX512-F, BW and BF16; false on other machines
// and compilers, where they must not be called).
bool HasBf16DotProducts();

// Whether the attention kernel multiplies bfloat16 inputs with these functions on this CPU: when
// it has them and its microarchitecture was measured to run vdpbf16ps at twice the multiply-adds
// of its float32 FMAs (Bf16DotProductsDoubleFmas: AMD Zen 4 and Zen 5, where bfloat16 prefill
// then ran 1.66-1.77x float32 on Zen 5). Intel's Xeons (Sapphire and Emerald Rapids) run
// vdpbf16ps on one port against two FMA ports, so the same peak: there, and on any
// microarchitecture not measured yet, the kernel widens bfloat16 to float32 and runs its float32
// products, which measured faster on the Xeon (prefill 214 against 164 GFLOP/s,
// docs/PERFORMANCE.md). Chosen per CPU, so every call on a machine gives the same bits.
bool Bf16DotProductsPay();

// Tests: 1 makes Bf16DotProductsPay() true wherever HasBf16DotProducts() is, 0 false, -1 back to
// this CPU's choice, so that both arithmetics of the kernel are tested on any machine that has
// AVX512-BF16. Not thread-safe; never called by the library.
void SetBf16DotProductsForTest(int use);

// s[r s_stride + j] = scale (q_r . k_j) for the four rows r of the block and keys j < keys. q
// rows are bfloat16 bits, q_stride elements apart, zero-padded to a multiple of kBf16PerVector
// past dim; key j's dim elements start at k + j k_stride and are read where they lie (the last
// partial vector with a masked load, which touches nothing past the row).
void ScoresBf16(const uint16_t* q, size_t q_stride, const uint16_t* k, size_t k_stride, size_t keys,
                size_t dim, float scale, float* s, size_t s_stride);

// Prefill's key tiles for ScoreTileBf16: keys along the lanes, kKeyPairRow keys per row, row dp
// holding each key's bfloat16 pair (2 dp, 2 dp + 1) (low, high 16 bits; zero past dim and past
// `keys`), for dp < ceil(dim / 2). Key j's dim elements start at k + j k_stride.
constexpr size_t kKeyPairRow = 64;
void TransposeKeyPairsBf16(const uint16_t* k, size_t k_stride, size_t keys, size_t dim,
                           uint32_t* out);

// s[r s_stride + j] = scale (q_r . k_j) for rows r < rows and the kKeyPairRow keys j of a tile
// from TransposeKeyPairsBf16: q_r's bfloat16 pairs at q + r q_stride (uint32 each), `pairs` of
// them. A GEMM microkernel: each step broadcasts one pair of four query rows against four
// vectors of 16 keys (vdpbf16ps), 16 accumulators, no lane reduction.
void ScoreTileBf16(const uint32_t* q, size_t q_stride, const uint32_t* k_pairs, size_t pairs,
                   float scale, float* s, size_t s_stride, size_t rows);

// The value rows of a key tile as bfloat16 pairs: out[jp value_stride + e] holds v_{2jp}[e] in
// its low and v_{2jp+1}[e] in its high 16 bits (zeros past `keys` and past value_dim), for
// jp < ceil(keys / 2) and e < value_stride, a multiple of kFloatsPerVector >= value_dim. Row j
// starts at v + j v_stride.
void PairValueRowsBf16(const uint16_t* v, size_t v_stride, size_t keys, size_t value_dim,
                       size_t value_stride, uint32_t* out);

// o_r = o_r correction_r + sum_j bf16(p_rj) v_j for the four rows r of the block (keys <= 64):
// p_r at p + r p_stride holds the `keys` float32 weights of row r, pairs are as written by
// PairValueRowsBf16, o rows o_stride floats apart, value_stride each.
void WeightedValuesBf16(const float* p, size_t p_stride, size_t keys, const uint32_t* pairs,
                        size_t value_stride, const float* correction, float* o, size_t o_stride);

// The same with the value rows read where they lie (decode: a few tokens of a KV cache), row j
// at v + j v_stride with value_dim elements, paired on the fly.
void WeightedValueRowsBf16(const float* p, size_t p_stride, size_t keys, const uint16_t* v,
                           size_t v_stride, size_t value_dim, size_t value_stride,
                           const float* correction, float* o, size_t o_stride);

}  // namespace posenc::internal
