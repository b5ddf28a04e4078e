// Row kernels behind the absolute position schemes (an internal interface, free of Highway
// types): gathering table rows and adding them, and scattering gradients back. Each has a plain
// scalar twin that the tests hold the SIMD version to (float additions: bit-identical).
#pragma once

#include <cstdint>

namespace posenc::internal {

// out[t] = a[a_rows[t]] + (b ? b[b_rows[t]] : out[t]) for t < tokens, rows `width` floats long.
// out must not overlap a or b. Threads over tokens for large calls.
void GatherAdd(const float* a, const int64_t* a_rows, const float* b, const int64_t* b_rows,
               int64_t tokens, int64_t width, float* out);
void GatherAddReference(const float* a, const int64_t* a_rows, const float* b,
                        const int64_t* b_rows, int64_t tokens, int64_t width, float* out);

// out[t] = table[rows[t]]: a threaded row copy.
void GatherRows(const float* table, const int64_t* rows, int64_t tokens, int64_t width, float* out);

// grad[rows[t]] += grad_out[t] for t = 0, 1, ..., in that order for every element, so repeated
// rows accumulate exactly as the scalar loop does. Threads split the columns, never the tokens,
// so no two threads touch one element.
void ScatterAdd(const float* grad_out, const int64_t* rows, int64_t tokens, int64_t width,
                float* grad);
void ScatterAddReference(const float* grad_out, const int64_t* rows, int64_t tokens, int64_t width,
                         float* grad);

}  // namespace posenc::internal
