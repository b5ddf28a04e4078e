// How the kernels use threads and scratch memory, shared by every kernel (plain C++, no SIMD).
#pragma once

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/aligned_allocator.h"
#include "hwy/base.h"

namespace posenc::internal {

// Below this many elements a call runs on the calling thread without OpenMP: waking a thread
// team costs microseconds, more than a whole decode step.
constexpr int64_t kMinElementsForThreads = int64_t{1} << 16;

// Calls body(begin, end) on contiguous, equal ranges of [0, count) (tokens, rows or column
// chunks): one range per OpenMP thread when the call moves at least kMinElementsForThreads
// elements, else [0, count) on this thread. Contiguous ranges keep each thread streaming through
// its own part of memory.
template <typename Body>
void ForRanges(int64_t count, int64_t elements, const Body& body) {
  if (elements < kMinElementsForThreads || omp_get_max_threads() == 1) {
    body(int64_t{0}, count);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    body(count * id / threads, count * (id + 1) / threads);
  }
}

// An aligned scratch array: on the stack when small (a decode step allocates nothing), else on
// the heap.
template <typename T>
class Scratch {
 public:
  explicit Scratch(size_t size) {
    if (size > kStackElements) {
      heap_ = hwy::AllocateAligned<T>(size);
      data_ = heap_.get();
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() { return data_; }

 private:
  static constexpr size_t kStackElements = 1024;
  alignas(64) T stack_[kStackElements];
  hwy::AlignedFreeUniquePtr<T[]> heap_;
  T* data_ = stack_;
};

// While alive, this thread treats subnormal floats as zero, as operands and as results (x86's
// MXCSR DAZ and FTZ bits), and restores the caller's mode after. Subnormal operands make an Intel
// core take a microcode assist on every FMA that reads them; attention's weights and gradients
// fall into that range for far keys under ALiBi (the backward pass ran 3x slower without this).
// Elsewhere a no-op: only x86 has the penalty and the flag.
class FlushSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kDaz | kFtz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
#else
  FlushSubnormals() = default;
#endif
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kDaz = 0x0040, kFtz = 0x8000;
  unsigned saved_;
#endif
};

}  // namespace posenc::internal
