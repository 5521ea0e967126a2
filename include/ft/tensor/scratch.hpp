#pragma once
// Scratch memory in a memory space for the length of a call: the device's
// buffers a layer needs between its passes (a chunk of logits, per-row
// statistics). Allocated through the space, so it counts in its figures, and
// left unfilled: the call writes it before it reads it.
#include "ft/tensor/array.hpp"

namespace ft::memory {

template <class T, memory_space Space>
class Scratch : public Array<T, Space> {
public:
  explicit Scratch(index_t n) : Array<T, Space>(std::size_t(n), typename Array<T, Space>::Uninitialized{}) {}
};

}  // namespace ft::memory
