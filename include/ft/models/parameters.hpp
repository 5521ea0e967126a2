#pragma once
// A stage's parameters: named tensors laid out in one flat buffer, with a
// gradient buffer of the same layout. Flat buffers are what every policy
// works on: an optimizer steps a buffer, ZeRO shards it, DDP all-reduces it,
// a checkpoint writes it. Names are ft's own ("layers.3.qkv.weight"); the
// family's weight map says how HF tensors land in them. Both buffers live in
// one memory space: the host's, or a device's for a model that runs there.
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::models {

// One named tensor inside a flat buffer.
struct ParameterEntry {
  std::string name;
  Shape shape;
  index_t offset = 0;
};

template <element T, memory::memory_space Space = memory::Host>
class ParameterBuffer {
public:
  using Entry = ParameterEntry;
  using Values = Tensor<T, Space>;

  // Declares a parameter; call before allocate().
  void declare(std::string name, Shape shape) {
    entries_.push_back(Entry{std::move(name), shape, size_});
    size_ += shape.numel();
  }

  // A frozen buffer (trainable = false) has no gradient: grad() gives null,
  // which every backward kernel reads as "this gradient is not wanted".
  void allocate(bool trainable = true) {
    set_trainable(trainable);
    values_ = Values(Shape{size_});
    allocate_grads();
  }
  // Whether the buffer trains, for a buffer whose memory comes later (a
  // training run's parallelism allocates what each rank keeps).
  void set_trainable(bool trainable) { trainable_ = trainable; }
  bool trainable() const { return trainable_; }
  // Gradients in `storage` (same size), shared with other buffers of the same
  // layout: when an optimizer steps each buffer as soon as its gradient is
  // complete (fused into backward), one gradient's memory serves them all.
  void share_gradients(const Values& storage) {
    if (!trainable_ || storage.numel() != size_) throw Error("internal: shared gradient storage of the wrong size");
    grads_ = storage;
  }

  // ZeRO-3 keeps a stage's whole values and gradients only while the stage
  // runs: these drop them (the memory returns once no collective holds it)
  // and make them anew: values unwritten (a gather fills them), gradients
  // zero-filled.
  void release_values() { values_ = Values(); }
  void allocate_values() { values_ = Values(Shape{size_}, typename Values::Uninitialized{}); }
  // Zero-filled: what a load writes into (it fills what the weight map binds).
  void allocate_zeroed_values() { values_ = Values(Shape{size_}); }
  void release_grads() { grads_ = Values(); }
  void allocate_grads() {
    if (trainable_) grads_ = Values(Shape{size_});
  }

  const std::vector<Entry>& entries() const { return entries_; }
  index_t size() const { return size_; }
  Values& values() { return values_; }
  Values& grads() { return grads_; }
  void zero_grads() {
    if (trainable_ && grads_.data()) Space::zero(grads_.data(), std::size_t(size_) * sizeof(T));
  }

  const Entry* find(std::string_view name) const {
    for (const Entry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  // Pointer to a parameter's values or gradient; null when it was not declared
  // (an optional bias the configuration leaves out).
  T* value(std::string_view name) const { return pointer(values_, name); }
  T* grad(std::string_view name) const { return pointer(grads_, name); }

private:
  T* pointer(const Values& buffer, std::string_view name) const {
    const Entry* e = find(name);
    return e && buffer.data() ? buffer.data() + e->offset : nullptr;
  }

  std::vector<Entry> entries_;
  index_t size_ = 0;
  bool trainable_ = true;
  Values values_, grads_;
};

}  // namespace ft::models
