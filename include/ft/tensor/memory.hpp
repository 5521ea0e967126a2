#pragma once
// Memory spaces are policies. Each space has an allocator that counts the
// bytes it has handed out, now and at the peak, so a run can report what it
// used and a plan can be checked against what was really allocated.
//
// Host memory is 64-byte aligned (a cache line, and the widest vector load).
// The CUDA spaces (device/cuda/memory.hpp) follow the same protocol:
// `allocate(bytes)`, `deallocate(p, bytes)`, `zero(p, bytes)`, `stats()`.
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/caching_allocator.hpp"
#include "ft/tensor/memory_stats.hpp"

namespace ft::memory {

// Pages straight from the kernel, for the host's large buffers.
struct MappedPages {
  static void* allocate(std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw OutOfMemory("cannot map " + std::to_string(bytes) + " bytes of host memory: " + std::strerror(errno), bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) { ::munmap(p, bytes); }
};

// Aligned host memory with its own counts: the host itself (Host), or a
// space that stands for another device's memory while living on the host
// (a test's device, so the device paths run on a machine without one).
//
// Buffers of 256 KiB and more come from a cache of mapped pages
// (caching_allocator.hpp) rather than from malloc: glibc keeps freed chunks
// of that size in its heaps for reuse, 50-200 MiB above ft's peak on
// SmolLM2's shape and different from run to run, where the cache holds no
// more than the peak ft had in use, and a step's repeating sizes find their
// pages already there. Smaller buffers stay with malloc. Either way the
// counts are of the bytes asked for, which is what the estimate counts.
template <class Space>
struct AlignedHostMemory {
  static constexpr std::size_t alignment = 64;
  static constexpr std::size_t mapped_from = std::size_t(256) << 10;

  // Never destroyed: buffers in other statics may be freed after it would be.
  static CachingAllocator<MappedPages, PageBlocks>& pages() {
    static auto* cache = new CachingAllocator<MappedPages, PageBlocks>();
    return *cache;
  }

  static Stats& stats() {
    static Stats s;
    return s;
  }
  // The most bytes this space may hand out at once (launch.memory_limit):
  // past it an allocation fails as the system's would, so a run planned for
  // a smaller machine fails here as it would there.
  static std::size_t& limit() {
    static std::size_t bytes = 0;  // 0: no limit
    return bytes;
  }
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::string what = " bytes of " + std::string(Space::name) + " memory";
    if (limit() && stats().current() + bytes > limit())
      throw OutOfMemory("cannot allocate " + std::to_string(bytes) + what + ": " + std::to_string(stats().current()) +
                            " are in use and launch.memory_limit is " + std::to_string(limit()),
                        bytes);
    void* p = nullptr;
    if (bytes >= mapped_from) {
      try {
        p = pages().allocate(bytes);
      } catch (const OutOfMemory&) {
      }
    } else {
      p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    }
    if (!p)
      throw OutOfMemory("cannot allocate " + std::to_string(bytes) + what + " (" + std::to_string(stats().current()) +
                            " in use by ft)",
                        bytes);
    stats().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) {
    if (!p) return;
    if (bytes >= mapped_from) pages().deallocate(p, bytes);
    else std::free(p);
    stats().remove(bytes);
  }
  static void zero(void* p, std::size_t bytes) {
    if (bytes) std::memset(p, 0, bytes);
  }
  // Returns the cached pages to the system (torch.cuda.empty_cache() for the host).
  static void release_cached() { pages().release_cached(); }
  // Host memory that others (MPI's collectives) use beside ft's while they
  // run: the cache keeps room for it (caching_allocator.hpp).
  static void hold_room(std::size_t bytes) { pages().hold_room(bytes); }
  static void give_room(std::size_t bytes) { pages().give_room(bytes); }
};

struct Host : AlignedHostMemory<Host> {
  static constexpr std::string_view name = "host";
};

/// Where buffers live: host memory, device memory, or pinned host memory,
/// each with its own allocate, free and copy.
template <class S>
concept memory_space = requires(void* p, std::size_t n) {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::allocate(n) } -> std::same_as<void*>;
  S::deallocate(p, n);
  S::zero(p, n);
  { S::stats() } -> std::same_as<Stats&>;
};
static_assert(memory_space<Host>);

// A standard allocator over a memory space, for scratch vectors that BLAS
// reads or writes. Alignment is not only speed: OpenBLAS picks kernels by the
// alignment of its operands, and two kernels may round differently, so the
// same GEMM on a differently aligned malloc buffer could give different bits
// — which would break bit-exact resume (a resumed process allocates in
// another order).
template <class T, memory_space S = Host>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U, S>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(S::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { S::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Allocator<U, S>&) const noexcept {
    return true;
  }
};

template <class T>
using HostVector = std::vector<T, Allocator<T, Host>>;

}  // namespace ft::memory
