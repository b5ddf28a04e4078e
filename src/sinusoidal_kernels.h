// The vectorised sinusoidal table fill behind FillSinusoidal: an internal interface, free of
// Highway types, called once per public call after validation.
#pragma once

#include <cstdint>

namespace posenc::internal {

// out[t * dim + j] = sin(positions[t] * freq[j] + phase_j), phase_j = 0 for even j (sin) and
// pi / 2 for odd j (cos). freq has dim entries; positions are >= 0.
void SinusoidalKernel(const double* freq, int64_t dim, const int64_t* positions, int64_t tokens,
                      float* out);

}  // namespace posenc::internal
