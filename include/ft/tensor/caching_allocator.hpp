#pragma once
// A caching allocator over a raw one: a freed block is kept for the next
// request of its size class instead of being returned, because the raw
// allocation costs far more than reusing a block. Two figures result, the
// ones PyTorch users read: allocated (blocks in use) and reserved (held
// from the raw allocator: in use plus cached), each with its peak.
//
// Two kinds of blocks (the Blocks policy):
// - A device's (cudaMalloc and cudaFree, which synchronise the device):
//   requests round up to 512 bytes below 1 MiB and to 2 MiB above, so a
//   block serves any request of its class and a training step's repeating
//   sizes hit the cache from the second step on. Cached blocks are kept
//   until the raw allocator fails; then every cached block is released and
//   the request tried once more.
// - The host's pages (mmap and munmap, whose fresh pages fault in on first
//   touch): requests round up to a page, and the cache never holds more
//   than the peak in use, so a process's resident memory stays within the
//   allocator's peak, which the memory estimate predicts. A request the
//   cache cannot serve first releases cached blocks, the largest first,
//   until it fits under that bound. While memory outside the allocator is
//   in use beside it (MPI's scratch for a collective: hold_room), the
//   cache keeps room for that too: what it reserves and the room together
//   stay within the peak, or within what is in use and the room where that
//   is more, so resident memory is never the peak and the room both.
// Failing for good, ft::OutOfMemory reports the request and both figures.
//
// A freed device block may still be read by kernels queued before the free;
// reuse is safe because every kernel runs on one stream, in order (a second
// stream would need the block's stream recorded, as PyTorch's allocator
// does). Blocks are not split or merged (a larger class is not used for a
// smaller request), which keeps the accounting exact and simple; the
// rounding bounds what that wastes.
//
// Raw: static void* allocate(std::size_t) (throws ft::OutOfMemory when it
// cannot), static void deallocate(void*, std::size_t).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/memory_stats.hpp"

namespace ft::memory {

// The block a request of `bytes` takes on a device: what its allocator
// counts as allocated, and what the memory estimate counts per allocation.
constexpr std::size_t cached_block_bytes(std::size_t bytes) {
  constexpr std::size_t small_limit = std::size_t(1) << 20, small_round = 512, large_round = std::size_t(2) << 20;
  const std::size_t round = bytes < small_limit ? small_round : large_round;
  return (bytes + round - 1) / round * round;
}

// What an allocation of `bytes` counts as in a memory space: on a device
// the caching allocator's block, on the CPU what is asked. What a policy
// declares for the memory estimate is counted so, an allocation at a time.
struct AllocationSize {
  bool cached = false;
  std::uint64_t operator()(std::uint64_t bytes) const { return cached ? cached_block_bytes(bytes) : bytes; }
};

// A device's blocks: size classes, kept until the raw allocator fails.
struct DeviceBlocks {
  static constexpr std::size_t block_bytes(std::size_t bytes) { return cached_block_bytes(bytes); }
  static constexpr bool within_peak = false;
};

// The host's pages: a block per page-rounded size, never more reserved than the peak in use.
struct PageBlocks {
  static constexpr std::size_t page = 4096;
  static constexpr std::size_t block_bytes(std::size_t bytes) { return (bytes + page - 1) / page * page; }
  static constexpr bool within_peak = true;
};

template <class Raw, class Blocks = DeviceBlocks>
class CachingAllocator {
public:
  CachingAllocator() = default;
  ~CachingAllocator() { release_cached_locked(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static std::size_t size_class(std::size_t bytes) { return Blocks::block_bytes(bytes); }

  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t size = size_class(bytes);
    const std::lock_guard lock(mutex_);
    void* p = nullptr;
    if (auto& cached = free_[size]; !cached.empty()) {
      p = cached.back();
      cached.pop_back();
    } else {
      if constexpr (Blocks::within_peak) make_room_within_peak(size);
      p = reserve(size, bytes);
    }
    try {
      in_use_[p] = size;
    } catch (const std::bad_alloc&) {  // no room to note it: returned, as caching it could fail too
      return_block(p, size);
      throw OutOfMemory("cannot note a block of " + std::to_string(size) + " bytes", bytes);
    }
    allocated_.add(size);
    most_in_use_ = std::max(most_in_use_, allocated_.current());
    return p;
  }

  void deallocate(void* p, std::size_t /*bytes*/) {
    if (!p) return;
    const std::lock_guard lock(mutex_);
    const auto it = in_use_.find(p);
    if (it == in_use_.end()) throw Error("internal: a block freed twice or not from this allocator");
    const std::size_t size = it->second;
    allocated_.remove(size);
    in_use_.erase(it);
    try {
      free_[size].push_back(p);
    } catch (const std::bad_alloc&) {  // no room to cache it: returned instead, as a free must not throw
      return_block(p, size);
    }
  }

  // Memory of `bytes` that others use beside this allocator's from now until
  // give_room: cached blocks go until the room fits within the bound.
  void hold_room(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    room_ += bytes;
    if constexpr (Blocks::within_peak) make_room_within_peak(0);
  }
  void give_room(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    room_ -= std::min(bytes, room_);
  }
  std::size_t room() {
    const std::lock_guard lock(mutex_);
    return room_;
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
  // Gives a block back to the raw allocator; it is no longer reserved.
  void return_block(void* p, std::size_t size) {
    Raw::deallocate(p, size);
    reserved_.remove(size);
  }
  // Releases cached blocks, the largest first, until reserving `size` more
  // keeps what is reserved, and the room held for others, within the most
  // ever in use (this request included) or within what is in use and the room.
  void make_room_within_peak(std::size_t size) {
    const std::size_t bound = std::max(most_in_use_, allocated_.current() + size + room_);
    const auto over = [&] { return reserved_.current() + size + room_ > bound; };
    for (auto it = free_.rbegin(); it != free_.rend() && over(); ++it) {
      auto& [block, blocks] = *it;
      while (!blocks.empty() && over()) {
        return_block(blocks.back(), block);
        blocks.pop_back();
      }
    }
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) return_block(p, size);
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;  // cached blocks by size class
  std::unordered_map<void*, std::size_t> in_use_;   // block -> its size class
  Stats allocated_, reserved_;
  std::size_t most_in_use_ = 0;  // allocated's peak, which nothing resets
  std::size_t room_ = 0;         // bytes others use beside this allocator (hold_room)
};

}  // namespace ft::memory
