#pragma once
// Memory spaces are policies. Each space has an allocator that counts the
// bytes it has handed out, now and at the peak, so a run can report what it
// used and a plan can be checked against what was really allocated.
//
// Host memory is 64-byte aligned (a cache line, and the widest vector load).
// The CUDA spaces (cuda_memory.hpp) follow the same protocol:
// `allocate(bytes)`, `deallocate(p, bytes)`, `zero(p, bytes)`, `stats()`.
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/error.hpp"

namespace ft::memory {

class Stats {
public:
  void add(std::size_t bytes) {
    std::size_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void remove(std::size_t bytes) { current_.fetch_sub(bytes, std::memory_order_relaxed); }

  std::size_t current() const { return current_.load(std::memory_order_relaxed); }
  std::size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // Starts a new peak measurement from what is allocated now.
  void reset_peak() { peak_.store(current(), std::memory_order_relaxed); }

private:
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

// Aligned host memory with its own counts: the host itself (Host), or a
// space that stands for another device's memory while living on the host
// (a test's device, so the device paths run on a machine without one).
template <class Space>
struct AlignedHostMemory {
  static constexpr std::size_t alignment = 64;

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
    std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p)
      throw OutOfMemory("cannot allocate " + std::to_string(bytes) + what + " (" + std::to_string(stats().current()) +
                            " in use by ft)",
                        bytes);
    stats().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) {
    if (!p) return;
    std::free(p);
    stats().remove(bytes);
  }
  static void zero(void* p, std::size_t bytes) {
    if (bytes) std::memset(p, 0, bytes);
  }
};

struct Host : AlignedHostMemory<Host> {
  static constexpr std::string_view name = "host";
};

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
