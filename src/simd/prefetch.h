// Software prefetch for the kernels that stream rows through memory (plain C++, usable from every
// SIMD target).
#pragma once

#include <cstddef>
#include <cstdint>

namespace posenc::internal {

// How far ahead of the row being processed its data is prefetched. The hardware prefetchers
// alone leave the row loops of RoPE waiting on memory. Measured on two CPUs (`posenc bench
// --only rope_forward`, 2 threads, q [4096,32,128] + k [4096,8,128] in place):
// - Intel Xeon with AVX512-BF16, bfloat16, one thread: 7.1-7.6 ms without, 4.3-5.2 ms with 1-3
//   KiB (2 KiB best; 512 bytes is too close, 8 KiB too far);
// - AMD EPYC Zen 5, float32: half-split 0.69, interleaved 0.75 of the in-place bandwidth without;
//   0.86 and 0.95 with 2 KiB (1.5, 3 and 4 KiB within noise of it).
// For the usual [tokens, heads, head_dim] layout that is the rows a few heads on; with other
// strides it is still memory the call is likely to touch, and a prefetch never faults.
constexpr size_t kPrefetchBytes = 2048;

// Asks for the cache lines of the `bytes` bytes `distance` bytes past p to be loaded into L1.
// The addresses are integers, never pointers past an array's end, and past the end of an array a
// prefetch is harmless: it never faults.
inline void PrefetchLines(const void* p, size_t bytes, size_t distance = 0) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) + distance;
  for (uintptr_t line = start & ~(kLine - 1); line < start + bytes; line += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

// The same for the `bytes` bytes kPrefetchBytes past p: the row a few rows ahead of p's.
inline void PrefetchAhead(const void* p, size_t bytes) { PrefetchLines(p, bytes, kPrefetchBytes); }

}  // namespace posenc::internal
