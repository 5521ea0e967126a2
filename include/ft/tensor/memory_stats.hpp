#pragma once
// What a memory space or a cache has handed out: now, and at the peak.
#include <atomic>
#include <cstddef>

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

}  // namespace ft::memory
