#pragma once
// An optimizer policy at run time: one Runtime per trainable flat buffer (or
// a rank's part of one), owning that part's state and stepping it with the
// policy's update (update.hpp, adafactor.hpp, adamw8bit.hpp). The trainer
// holds a list of buffers and calls step() on each, so the loop is written
// once for every optimizer; nothing per element is virtual. A policy names
// its runtime as adapters and parallelisms do (`runtime<M, Device>`,
// optimizer.hpp), and each runtime is made from the same three things: the
// tensors of its part, its size, and the recipe's [train] section.
//
// M is the dtype the optimizer updates: the master copy (f32) under mixed
// precision, the weights themselves otherwise; state is f32, or M when M is
// bf16 (precision::BF16True keeps everything in bf16).
//
// state() names every state array, so checkpoints save and restore it byte
// for byte. Each runtime also declares, beside the code that allocates it,
// what a part keeps (`state_bytes`, static: the same three things and how
// an allocation is counted), which is what ftrun's memory estimate reads.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ft/core/half.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/io/model_files.hpp"
#include "ft/models/parameters.hpp"
#include "ft/optim/update.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/tensor/array.hpp"
#include "ft/tensor/caching_allocator.hpp"

namespace ft::optim {

// One array of optimizer state, as bytes with a safetensors dtype.
struct StateArray {
  std::string name;
  std::string dtype;  // "F32", "BF16", "U8"
  void* data;
  std::size_t bytes;
  // A range of a longer array (a rank's shard of a per-element state, or of
  // master weights): its elements are [begin, begin + n) of `total`. begin
  // -1: the array is whole (per-tensor state).
  std::int64_t begin = -1, total = 0;
  // How its bytes reach the host and back: it lives in a device's memory
  // (a checkpoint copies through the host).
  void (*to_host)(void* to, const void* from, std::size_t bytes) = &device::Cpu::to_host;
  void (*from_host)(void* to, const void* from, std::size_t bytes) = &device::Cpu::from_host;
  bool written = true;  // false: another rank writes the same values to a checkpoint
};

template <class M>
class Runtime {
public:
  virtual ~Runtime() = default;
  // One update of values[n] with grads[n] at learning rate lr; step counts from 1.
  virtual void step(M* values, const M* grads, double lr, std::int64_t step) = 0;
  virtual std::vector<StateArray> state() = 0;
};

// The hyperparameters the recipe gives every optimizer.
inline Hyperparameters hyperparameters(const recipe::TrainSection& t) {
  Hyperparameters h;
  h.lr = t.learning_rate;
  h.weight_decay = t.weight_decay;
  h.beta1 = t.adam_beta1;
  h.beta2 = t.adam_beta2;
  h.eps = t.adam_epsilon;
  h.momentum = t.momentum;
  h.nesterov = t.nesterov;
  return h;
}

// The dtype of the state of an optimizer updating M.
template <class M>
using state_t = std::conditional_t<std::is_same_v<M, bf16>, bf16, acc_t<M>>;

namespace detail {

// A state array in a device's memory (the host's for device::Cpu).
template <class Device, class V>
StateArray array(const std::string& name, V& v) {
  using S = typename V::value_type;
  return {name, io::safetensors_dtype_of<S>(), v.data(), v.size() * sizeof(S), -1, 0, &Device::to_host,
          &Device::from_host};
}

// State arrays that exist (an optimizer keeps only what a tensor's shape needs).
template <class Device, class V>
void add_nonempty(std::vector<StateArray>& out, const std::string& name, V& v) {
  if (!v.empty()) out.push_back(array<Device>(name, v));
}

// Bytes of `count` state values of an optimizer updating M, as `size` counts one allocation.
template <class M>
std::uint64_t state_values_bytes(index_t count, memory::AllocationSize size) {
  return size(std::uint64_t(count) * sizeof(state_t<M>));
}

// State one value per parameter, zero-filled, in the device's memory.
template <class M, class Device>
using StateValues = memory::Array<state_t<M>, typename Device::Memory>;

}  // namespace detail
}  // namespace ft::optim
