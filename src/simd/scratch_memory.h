// The large per-call buffers of the kernels (prefill's packed key tiles, the rotated copies of q
// and k), kept for the next call instead of going back to the system.
//
// A freed block of more than glibc's mmap threshold (32 MiB at most) is unmapped, and a block the
// heap cannot place is mapped afresh: the next call then faults every page in again, and on a
// virtual machine a fresh page costs about 2 us (16 MiB: 8 ms touched fresh, 0.4 ms reused, on
// an AMD EPYC Zen 5 KVM guest). A 2048-token prefill with RoPE, 30 ms when its buffers were
// reused, took 130 ms when they were not, depending only on what the process had freed before.
// So blocks of at least kScratchPoolMinBytes come from a pool that keeps up to kScratchPoolBlocks
// freed blocks (and kScratchPoolMaxBytes in all) for reuse; smaller ones are malloc's. The block
// limit is generous: a full `posenc bench` round makes more than 8 sizes, and with a limit of 8
// the oldest were evicted before their next use (a decode step that rotates its keys then took
// 58x the time of reading its cache instead of 2.3x). posenc/runtime.h reports and frees what is
// kept.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#include "posenc/runtime.h"  // KeptScratchBytes and FreeKeptScratch

namespace posenc::internal {

constexpr size_t kScratchPoolMinBytes = size_t{1} << 20;
constexpr size_t kScratchPoolBlocks = 64;
constexpr size_t kScratchPoolMaxBytes = size_t{1} << 30;
constexpr size_t kScratchAlignment = 128;  // every SIMD target's vectors, and a cache line pair

// `bytes` of memory aligned to kScratchAlignment, uninitialized: the smallest kept block that
// holds them and is at most twice their size, else a new one. Thread-safe.
void* AcquireScratch(size_t bytes);
// Returns a block from AcquireScratch (the same `bytes`): kept for reuse, or freed beyond the
// pool's limits (the oldest kept block first). Thread-safe.
void ReleaseScratch(void* block, size_t bytes) noexcept;

// A std::allocator for scratch vectors: memory from the pool, and elements default-initialized
// (vector(n) leaves floats unwritten instead of zeroing pages the kernel writes anyway).
template <typename T>
struct ScratchAllocator {
  using value_type = T;
  ScratchAllocator() = default;
  template <typename U>
  ScratchAllocator(const ScratchAllocator<U>&) noexcept {}  // NOLINT: allocators convert
  T* allocate(size_t n) { return static_cast<T*>(AcquireScratch(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { ReleaseScratch(p, n * sizeof(T)); }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }
  template <typename U>
  bool operator==(const ScratchAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

}  // namespace posenc::internal
