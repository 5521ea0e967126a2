#pragma once
// Scratch memory in a memory space for the length of a call: the device's
// buffers a layer needs between its passes (a chunk of logits, per-row
// statistics). Allocated through the space, so it counts in its figures.
#include <cstddef>

#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::memory {

template <class T, memory_space Space>
class Scratch {
public:
  explicit Scratch(index_t n) : bytes_(std::size_t(n) * sizeof(T)), data_(static_cast<T*>(Space::allocate(bytes_))) {}
  ~Scratch() { Space::deallocate(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return data_; }

private:
  std::size_t bytes_;
  T* data_;
};

}  // namespace ft::memory
