#pragma once
// The keys and values a sequence has computed, kept so that each new token
// attends to them instead of recomputing the whole sequence. One KvCache
// holds one sequence's, every layer, up to `capacity` positions; a KvPool
// owns a fixed number of them, sized up front from the model and the longest
// sequence served (max_model_len), so what serving needs is known before the
// first request: bytes_per_sequence x slots.
//
// Layout per layer: keys and values [capacity, G * D] in the model's element
// type, keys already rotated (RoPE at their own positions), as the block's
// fused q, k, v rows hold them. They live in the device's memory (the
// engine's device, engine.hpp); only the length is kept on the host.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::infer {

template <element T, class Device = device::Cpu>
class KvCache {
public:
  using Buffer = Tensor<T, typename Device::Memory>;
  KvCache(const models::TransformerConfig& c, index_t capacity)
      : capacity_(capacity), width_(c.num_kv_heads * c.head_dim),
        keys_(Shape{c.num_layers, capacity, width_}, typename Buffer::Uninitialized{}),
        values_(Shape{c.num_layers, capacity, width_}, typename Buffer::Uninitialized{}) {}

  index_t capacity() const { return capacity_; }
  index_t length() const { return length_; }  // positions filled
  index_t width() const { return width_; }    // G * D
  index_t layer_stride() const { return capacity_ * width_; }  // from one layer's keys (values) to the next's
  T* keys(index_t layer) { return keys_.data() + layer * capacity_ * width_; }
  T* values(index_t layer) { return values_.data() + layer * capacity_ * width_; }
  const T* keys(index_t layer) const { return keys_.data() + layer * capacity_ * width_; }
  const T* values(index_t layer) const { return values_.data() + layer * capacity_ * width_; }

  // After a forward wrote positions [length, length + n) in every layer;
  // `tokens` are the ids among them (a prompt adapter's virtual rows have none).
  void extend(index_t n, std::span<const std::int32_t> tokens) {
    if (length_ + n > capacity_)
      throw Error("a sequence of " + std::to_string(length_ + n) + " tokens does not fit max_model_len = " +
                  std::to_string(capacity_));
    length_ += n;
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  }
  void clear() {
    length_ = 0;
    tokens_.clear();
  }
  // The ids the cache holds, so that a sequence can be run again from its
  // start (LongRoPE's switch to its long factors, infer/engine.hpp).
  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  std::size_t bytes() const { return 2 * std::size_t(keys_.numel()) * sizeof(T); }

private:
  index_t capacity_, width_, length_ = 0;
  Buffer keys_, values_;
  std::vector<std::int32_t> tokens_;
};

// The caches are slots 0..slots-1; a sequence holds one from acquire() to release().
template <element T, class Device = device::Cpu>
class KvPool {
public:
  KvPool(const models::TransformerConfig& c, index_t max_model_len, index_t slots) : max_model_len_(max_model_len) {
    if (max_model_len < 1 || slots < 1) throw Error("a KV pool needs max_model_len >= 1 and at least one slot");
    for (index_t i = 0; i < slots; ++i) {
      caches_.push_back(std::make_unique<KvCache<T, Device>>(c, max_model_len));
      free_.push_back(slots - 1 - i);  // slot 0 is taken first
    }
    held_.assign(std::size_t(slots), false);
  }

  // A free slot, its cache cleared, or -1 when every slot is taken.
  index_t acquire() {
    if (free_.empty()) return -1;
    const index_t slot = free_.back();
    free_.pop_back();
    held_[std::size_t(slot)] = true;
    cache(slot).clear();
    return slot;
  }
  void release(index_t slot) {
    if (!held(slot)) throw Error("internal: key/value cache slot " + std::to_string(slot) + " released but not held");
    held_[std::size_t(slot)] = false;
    free_.push_back(slot);
  }
  bool held(index_t slot) const { return slot >= 0 && slot < slots() && held_[std::size_t(slot)]; }
  KvCache<T, Device>& cache(index_t slot) {
    if (slot < 0 || slot >= slots()) throw Error("internal: no key/value cache slot " + std::to_string(slot));
    return *caches_[std::size_t(slot)];
  }

  index_t max_model_len() const { return max_model_len_; }
  index_t slots() const { return index_t(caches_.size()); }
  index_t free_slots() const { return index_t(free_.size()); }
  std::size_t bytes_per_sequence() const { return caches_.front()->bytes(); }

private:
  index_t max_model_len_;
  std::vector<std::unique_ptr<KvCache<T, Device>>> caches_;
  std::vector<index_t> free_;
  std::vector<bool> held_;
};

}  // namespace ft::infer
