#pragma once
// Shapes and strides of up to four dimensions, counted in elements. Four is
// what the model needs (batch, time, heads, head size); a fixed capacity keeps
// a tensor a plain value with no allocation of its own.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ft/core/error.hpp"

namespace ft {

using index_t = std::int64_t;

struct Shape {
  static constexpr int max_rank = 4;
  std::array<index_t, max_rank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<index_t> list) {
    if (list.size() > max_rank) throw Error("a tensor has at most 4 dimensions");
    for (index_t d : list) dims[rank++] = d;
  }
  index_t operator[](int i) const { return dims[i]; }
  index_t& operator[](int i) { return dims[i]; }
  index_t numel() const {
    index_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank != b.rank) return false;
    for (int i = 0; i < a.rank; ++i)
      if (a.dims[i] != b.dims[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }
};

// Row-major strides of a shape.
inline Shape contiguous_strides(const Shape& shape) {
  Shape strides;
  strides.rank = shape.rank;
  index_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

}  // namespace ft
