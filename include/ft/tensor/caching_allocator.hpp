#pragma once
// A caching allocator over a raw one (cudaMalloc and cudaFree for device
// memory): a freed block is kept for the next request of its size class
// instead of being returned, because raw device allocation synchronises the
// device and costs far more than a step's kernels. Two figures result, the
// ones PyTorch users read: allocated (blocks in use) and reserved (held
// from the raw allocator: in use plus cached), each with its peak.
//
// Size classes: requests round up to 512 bytes below 1 MiB and to 2 MiB
// above, so a block serves any request of its class and a training step's
// repeating sizes hit the cache from the second step on. When the raw
// allocator fails, every cached block is released and the request tried
// once more; failing again, ft::OutOfMemory reports the request and both
// figures. A freed block may still be read by kernels queued before the
// free; reuse is safe because every kernel runs on one stream, in order
// (a second stream would need the block's stream recorded, as PyTorch's
// allocator does). Blocks are not split or merged (a larger class is not used for
// a smaller request), which keeps the accounting exact and simple; the
// rounding bounds what that wastes.
//
// Raw: static void* allocate(std::size_t) (throws ft::OutOfMemory when it
// cannot), static void deallocate(void*, std::size_t).
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/memory.hpp"

namespace ft::memory {

// The block a request of `bytes` takes: what the allocator counts as
// allocated, and what the memory estimate counts per allocation.
constexpr std::size_t cached_block_bytes(std::size_t bytes) {
  constexpr std::size_t small_limit = std::size_t(1) << 20, small_round = 512, large_round = std::size_t(2) << 20;
  const std::size_t round = bytes < small_limit ? small_round : large_round;
  return (bytes + round - 1) / round * round;
}

template <class Raw>
class CachingAllocator {
public:
  CachingAllocator() = default;
  ~CachingAllocator() { release_cached_locked(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static std::size_t size_class(std::size_t bytes) { return cached_block_bytes(bytes); }

  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t size = size_class(bytes);
    const std::lock_guard lock(mutex_);
    void* p = nullptr;
    if (auto& cached = free_[size]; !cached.empty()) {
      p = cached.back();
      cached.pop_back();
    } else {
      p = reserve(size, bytes);
    }
    in_use_[p] = size;
    allocated_.add(size);
    return p;
  }

  void deallocate(void* p, std::size_t /*bytes*/) {
    if (!p) return;
    const std::lock_guard lock(mutex_);
    const auto it = in_use_.find(p);
    if (it == in_use_.end()) throw Error("internal: a block freed twice or not from this allocator");
    allocated_.remove(it->second);
    free_[it->second].push_back(p);
    in_use_.erase(it);
  }

  // Returns every cached block to the raw allocator (torch.cuda.empty_cache()).
  void release_cached() {
    const std::lock_guard lock(mutex_);
    release_cached_locked();
  }

  Stats& allocated() { return allocated_; }
  Stats& reserved() { return reserved_; }

private:
  void* reserve(std::size_t size, std::size_t requested) {
    try {
      return reserve_raw(size);
    } catch (const OutOfMemory&) {
      release_cached_locked();
    }
    try {
      return reserve_raw(size);
    } catch (const OutOfMemory& e) {
      throw OutOfMemory(std::string(e.what()) + " (request " + std::to_string(requested) + " bytes; " +
                            std::to_string(allocated_.current()) + " allocated, " +
                            std::to_string(reserved_.current()) + " reserved)",
                        requested);
    }
  }
  void* reserve_raw(std::size_t size) {
    void* p = Raw::allocate(size);
    reserved_.add(size);
    return p;
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) {
        Raw::deallocate(p, size);
        reserved_.remove(size);
      }
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;  // cached blocks by size class
  std::unordered_map<void*, std::size_t> in_use_;   // block -> its size class
  Stats allocated_, reserved_;
};

}  // namespace ft::memory
