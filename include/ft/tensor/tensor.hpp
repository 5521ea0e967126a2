#pragma once
// A typed, strided view of memory in one memory space. Tensors share their
// storage: slicing, transposing and reshaping make new views of the same
// bytes and never copy. The storage is freed when its last view goes.
//
// Kernels take raw pointers and sizes; a tensor is how the model owns and
// names memory, not how kernels read it. `data()` of a contiguous tensor is
// what a kernel gets.
#include <memory>
#include <span>

#include "ft/core/numeric.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft {

template <element T, memory::memory_space Space = memory::Host>
class Tensor {
public:
  using value_type = T;
  using space = Space;

  Tensor() = default;

  // New storage, zero-filled (every element type's zero is all zero bits).
  explicit Tensor(Shape shape) : Tensor(shape, Uninitialized{}) {
    Space::zero(data_, std::size_t(shape.numel()) * sizeof(T));
  }
  // New storage left as it is, for a caller that writes every element first
  // (a collective's output).
  struct Uninitialized {};
  Tensor(Shape shape, Uninitialized) : shape_(shape), strides_(contiguous_strides(shape)) {
    std::size_t bytes = std::size_t(shape.numel()) * sizeof(T);
    T* p = static_cast<T*>(Space::allocate(bytes));
    storage_ = std::shared_ptr<T>(p, [bytes](T* q) { Space::deallocate(q, bytes); });
    data_ = p;
  }

  // A view of memory owned elsewhere (a mapped file, a flat parameter buffer).
  static Tensor view_of(T* data, Shape shape, std::shared_ptr<void> keep_alive = {}) {
    Tensor t;
    t.shape_ = shape;
    t.strides_ = contiguous_strides(shape);
    t.data_ = data;
    t.storage_ = std::shared_ptr<T>(std::move(keep_alive), data);
    return t;
  }

  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return shape_.rank; }
  index_t size(int dim) const { return shape_[dim]; }
  index_t numel() const { return shape_.numel(); }
  T* data() const { return data_; }
  bool empty() const { return numel() == 0; }

  bool is_contiguous() const { return strides_ == contiguous_strides(shape_); }

  std::span<T> span() const {
    require_contiguous("span");
    return {data_, std::size_t(numel())};
  }

  // Element access by full index (tests and setup code, not hot loops).
  template <class... I>
  T& at(I... index) const {
    static_assert(sizeof...(I) <= Shape::max_rank);
    index_t idx[] = {index_t(index)...};
    index_t offset = 0;
    for (int d = 0; d < int(sizeof...(I)); ++d) offset += idx[d] * strides_[d];
    return data_[offset];
  }

  // Rows [begin, end) of dimension `dim`.
  Tensor slice(int dim, index_t begin, index_t end) const {
    if (dim < 0 || dim >= rank() || begin < 0 || end > shape_[dim] || begin > end)
      throw Error("slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of dimension " +
                  std::to_string(dim) + " is outside shape " + shape_.str());
    Tensor t = *this;
    t.data_ = data_ + begin * strides_[dim];
    t.shape_[dim] = end - begin;
    return t;
  }

  Tensor transpose(int a, int b) const {
    Tensor t = *this;
    std::swap(t.shape_[a], t.shape_[b]);
    std::swap(t.strides_[a], t.strides_[b]);
    return t;
  }

  // Same elements, new shape; only for contiguous tensors.
  Tensor reshape(Shape shape) const {
    require_contiguous("reshape");
    if (shape.numel() != numel())
      throw Error("cannot reshape " + shape_.str() + " to " + shape.str());
    Tensor t = *this;
    t.shape_ = shape;
    t.strides_ = contiguous_strides(shape);
    return t;
  }

  // Whether two views share storage (used to refuse aliasing where it matters).
  bool shares_storage_with(const Tensor& other) const {
    return !storage_.owner_before(other.storage_) && !other.storage_.owner_before(storage_);
  }

private:
  void require_contiguous(const char* what) const {
    if (!is_contiguous()) throw Error(std::string(what) + " needs a contiguous tensor, this one is strided");
  }

  Shape shape_;
  Shape strides_;
  T* data_ = nullptr;
  std::shared_ptr<T> storage_;
};

}  // namespace ft
