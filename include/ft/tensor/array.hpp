#pragma once
// An owned run of n values in a memory space: optimizer state and other
// flat buffers that are not tensors (bytes of quantisation codes, tables)
// and may live in a device's memory. Zero-filled unless asked otherwise;
// moves, never copies. data() is the space's pointer: on a device, kernels
// read it and the host reaches it only through the device's copies.
#include <cstddef>
#include <utility>

#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::memory {

template <class T, memory_space Space = Host>
class Array {
public:
  using value_type = T;
  struct Uninitialized {};

  Array() = default;
  explicit Array(std::size_t n) : Array(n, Uninitialized{}) { Space::zero(data_, bytes()); }
  Array(std::size_t n, Uninitialized) : size_(n), data_(static_cast<T*>(Space::allocate(n * sizeof(T)))) {}
  ~Array() { Space::deallocate(data_, bytes()); }
  Array(Array&& other) noexcept : size_(std::exchange(other.size_, 0)), data_(std::exchange(other.data_, nullptr)) {}
  Array& operator=(Array&& other) noexcept {
    std::swap(size_, other.size_);
    std::swap(data_, other.data_);
    return *this;
  }

  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

private:
  std::size_t size_ = 0;
  T* data_ = nullptr;
};

}  // namespace ft::memory
