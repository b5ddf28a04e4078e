// STREAM-style memory bandwidth loops (J. McCalpin, "STREAM: Sustainable Memory Bandwidth in
// High Performance Computers"), threaded with OpenMP like posenc's kernels: the ceiling that a
// memory-bound kernel is measured against. In-place RoPE reads and writes every element once,
// exactly like ScaleInPlace.
#pragma once

#include <cstddef>

namespace posenc::bench {

// out[i] = in[i]: reads n floats, writes n floats.
void StreamCopy(const float* in, float* out, size_t n);

// x[i] = s * x[i]: reads and writes n floats in place.
void StreamScaleInPlace(float* x, size_t n, float s);

// out[i] = v: writes n floats.
void StreamFill(float* out, size_t n, float v);
// The sum of in[0..n): reads n floats and nothing else (the floor of a step that must read a
// buffer once, such as a decode step reading its KV cache). The sum keeps the reads alive.
float StreamRead(const float* in, size_t n);

}  // namespace posenc::bench
