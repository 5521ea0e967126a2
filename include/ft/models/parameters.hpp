#pragma once
// A stage's parameters: named tensors laid out in one flat buffer, with a
// gradient buffer of the same layout. Flat buffers are what every policy
// works on: an optimizer steps a buffer, ZeRO shards it, DDP all-reduces it,
// a checkpoint writes it. Names are ft's own ("layers.3.qkv.weight"); the
// family's weight map says how HF tensors land in them. Both buffers live in
// one memory space: the host's, or a device's for a model that runs there.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::models {

// One named tensor inside a flat buffer. A buffer may hold a window of a
// parameter's rows: rows [first_row, first_row + shape[0]) of all_rows (an
// expert-parallel rank's experts); all_rows 0: the whole parameter.
struct ParameterEntry {
  std::string name;
  Shape shape;
  index_t offset = 0;
  index_t first_row = 0, all_rows = 0;

  bool windowed() const { return all_rows > 0; }
  index_t rows() const { return windowed() ? all_rows : shape[0]; }  // the whole parameter's
};

// Where a parameter lies in its buffer, found by name once (a layer keeps
// its slots, as llm.c's ParameterTensors), so that forward and backward read
// values and gradients without a lookup. A slot that is not present stands
// for an optional parameter the configuration leaves out (a bias).
struct ParameterSlot {
  index_t offset = -1;
  constexpr bool present() const { return offset >= 0; }
};

template <element T, memory::memory_space Space = memory::Host>
class ParameterBuffer {
public:
  using Entry = ParameterEntry;
  using Values = Tensor<T, Space>;

  // Declares a parameter; call before allocate(). Names are unique in a buffer.
  void declare(std::string name, Shape shape) { declare_rows(std::move(name), shape, 0, 0); }
  // Declares rows [first_row, first_row + shape[0]) of a parameter of all_rows
  // rows: an expert-parallel rank's run of a mixture's experts. Windows come
  // last in a buffer, so that its run of experts is one range that trains
  // apart from the rest (parallel/data_parallel.hpp).
  void declare_rows(std::string name, Shape shape, index_t first_row, index_t all_rows) {
    if (find(name)) throw Error("internal: parameter \"" + name + "\" declared twice in one buffer");
    if (all_rows == 0 && windows_begin() < size_)
      throw Error("internal: parameter \"" + name + "\" declared after a window of rows");
    entries_.push_back(Entry{std::move(name), shape, size_, first_row, all_rows});
    size_ += shape.numel();
  }
  // Where the windows of rows begin (the buffer's size when it has none).
  index_t windows_begin() const {
    for (const Entry& e : entries_)
      if (e.windowed()) return e.offset;
    return size_;
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
  // The slot of a declared parameter. A name that was not declared is an
  // error, so that a misspelt name cannot read as "no such parameter".
  ParameterSlot slot(std::string_view name) const {
    if (const Entry* e = find(name)) return {e->offset};
    std::string declared;
    for (const Entry& e : entries_) declared += (declared.empty() ? "" : ", ") + e.name;
    throw Error("internal: no parameter \"" + std::string(name) + "\" in this buffer; it declares " + declared);
  }
  // The slot of a parameter declared only when `declared` (an optional bias).
  ParameterSlot slot_if(bool declared, std::string_view name) const { return declared ? slot(name) : ParameterSlot{}; }

  // Pointers to a parameter's values and gradient, null for a slot that is
  // not present, and for gradients a frozen buffer does not keep (which
  // every backward kernel reads as "this gradient is not wanted").
  T* value(ParameterSlot s) const { return pointer(values_, s); }
  T* grad(ParameterSlot s) const { return pointer(grads_, s); }
  T* value(std::string_view name) const { return value(slot(name)); }
  T* grad(std::string_view name) const { return grad(slot(name)); }

  // A window's whole parameter, put together from the ranks that hold the
  // other windows (models/gather_windows.hpp) for what reads it whole (a
  // save, a merge), until drop_wholes(); null when it is not put together.
  Values* whole(std::string_view name) {
    const auto it = wholes_.find(name);
    return it == wholes_.end() ? nullptr : &it->second;
  }
  void keep_whole(std::string name, Values whole) { wholes_.insert_or_assign(std::move(name), std::move(whole)); }
  void drop_wholes() { wholes_.clear(); }

private:
  static T* pointer(const Values& buffer, ParameterSlot s) {
    return s.present() && buffer.data() ? buffer.data() + s.offset : nullptr;
  }

  std::vector<Entry> entries_;
  index_t size_ = 0;
  bool trainable_ = true;
  Values values_, grads_;
  std::map<std::string, Values, std::less<>> wholes_;
};

}  // namespace ft::models
