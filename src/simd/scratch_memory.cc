#include "simd/scratch_memory.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace posenc::internal {
namespace {

// A block's capacity: more than `bytes`, up to the next multiple of an eighth of their power of
// two, so that a size that grows a little from call to call (a decode step's keys) still fits the
// block of the last call.
size_t Capacity(size_t bytes) {
  const size_t step = std::max(kScratchAlignment, std::bit_floor(bytes) / 8);
  return (bytes / step + 1) * step;
}

void* AlignedBlock(size_t capacity) {
  void* block = std::aligned_alloc(kScratchAlignment, capacity);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

class Pool {
 public:
  Pool() = default;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() { FreeKept(); }

  void* Acquire(size_t bytes) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      // The smallest kept block that holds `bytes` without wasting more than as much again.
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->capacity >= bytes && it->capacity <= 2 * bytes &&
            (best == kept_.end() || it->capacity < best->capacity)) {
          best = it;
        }
      }
      if (best != kept_.end()) {
        const Block block = *best;
        kept_.erase(best);
        kept_bytes_ -= block.capacity;
        in_use_.emplace(block.data, block.capacity);
        return block.data;
      }
    }
    const size_t capacity = Capacity(bytes);
    void* data = AlignedBlock(capacity);
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      in_use_.emplace(data, capacity);
    } catch (...) {  // the map's node: nothing may leak on the way out
      std::free(data);
      throw;
    }
    return data;
  }

  void Release(void* data) noexcept {
    std::vector<void*> to_free;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto it = in_use_.find(data);
      if (it == in_use_.end()) return;  // not the pool's (cannot happen through ScratchVector)
      const size_t capacity = it->second;
      in_use_.erase(it);
      if (capacity > kScratchPoolMaxBytes) {
        to_free.push_back(data);
      } else {
        kept_.push_back({data, capacity});  // newest last
        kept_bytes_ += capacity;
        while (kept_.size() > kScratchPoolBlocks || kept_bytes_ > kScratchPoolMaxBytes) {
          to_free.push_back(kept_.front().data);
          kept_bytes_ -= kept_.front().capacity;
          kept_.erase(kept_.begin());
        }
      }
    }
    for (void* block : to_free) std::free(block);
  }

  size_t KeptBytes() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return kept_bytes_;
  }

  void FreeKept() {
    std::vector<Block> kept;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      kept.swap(kept_);
      kept_bytes_ = 0;
    }
    for (const Block& block : kept) std::free(block.data);
  }

 private:
  struct Block {
    void* data;
    size_t capacity;
  };
  std::mutex mutex_;
  std::vector<Block> kept_;  // oldest first
  size_t kept_bytes_ = 0;
  std::unordered_map<void*, size_t> in_use_;  // block -> capacity
};

Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

void* AcquireScratch(size_t bytes) {
  if (bytes < kScratchPoolMinBytes) return AlignedBlock(Capacity(bytes));
  return ThePool().Acquire(bytes);
}

void ReleaseScratch(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  if (bytes < kScratchPoolMinBytes) return std::free(block);
  ThePool().Release(block);
}

}  // namespace posenc::internal

namespace posenc {

size_t KeptScratchBytes() { return internal::ThePool().KeptBytes(); }

void FreeKeptScratch() { internal::ThePool().FreeKept(); }

}  // namespace posenc
