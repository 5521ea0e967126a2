#pragma once
// The optimizer policy at run time: one ParameterOptimizer per trainable flat
// buffer, owning that buffer's state and stepping it with the policy's
// element-wise update (optim/update.hpp and friends). The policy is chosen at
// compile time (make_parameter_optimizer<Policy, M>); the trainer holds a
// list of buffers and calls step() on each, so the loop is written once for
// every optimizer. Nothing per element is virtual.
//
// M is the dtype the optimizer updates: the master copy (f32) under mixed
// precision, the weights themselves otherwise; state is f32, or M when M is
// bf16 (precision::BF16True keeps everything in bf16).
//
// state() names every state array, so checkpoints save and restore it byte
// for byte.
#include <memory>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"
#include "ft/io/model_files.hpp"
#include "ft/models/parameters.hpp"
#include "ft/optim/adafactor.hpp"
#include "ft/optim/adamw8bit.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/optim/update.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/tensor/array.hpp"

namespace ft::train {

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
};

template <class M>
class ParameterOptimizer {
public:
  virtual ~ParameterOptimizer() = default;
  // One update of values[n] with grads[n] at learning rate lr; step counts from 1.
  virtual void step(M* values, const M* grads, double lr, std::int64_t step) = 0;
  virtual std::vector<StateArray> state() = 0;
};

// The hyperparameters the recipe gives every optimizer.
inline optim::Hyperparameters hyperparameters(const recipe::TrainSection& t) {
  optim::Hyperparameters h;
  h.lr = t.learning_rate;
  h.weight_decay = t.weight_decay;
  h.beta1 = t.adam_beta1;
  h.beta2 = t.adam_beta2;
  h.eps = t.adam_epsilon;
  h.momentum = t.momentum;
  h.nesterov = t.nesterov;
  return h;
}

namespace detail {

template <class M>
using state_t = std::conditional_t<std::is_same_v<M, bf16>, bf16, acc_t<M>>;

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

// State one value per parameter, zero-filled, in the device's memory.
template <class M, class Device>
using StateValues = memory::Array<state_t<M>, typename Device::Memory>;

template <class M, class Device>
class Sgd final : public ParameterOptimizer<M> {
public:
  Sgd(index_t n, const optim::Hyperparameters& h) : h_(h), n_(n) {
    if (h.momentum != 0) buffer_ = StateValues<M, Device>(std::size_t(n));  // plain SGD keeps nothing
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    optim::Hyperparameters h = h_;
    h.lr = lr;
    optim::sgd_step<Device>(p, g, buffer_.data(), n_, h, step);
  }
  std::vector<StateArray> state() override {
    if (buffer_.empty()) return {};
    return {array<Device>("momentum_buffer", buffer_)};
  }

private:
  optim::Hyperparameters h_;
  index_t n_;
  StateValues<M, Device> buffer_;  // empty without momentum
};

template <class M, class Device>
class AdamW final : public ParameterOptimizer<M> {
public:
  AdamW(index_t n, const optim::Hyperparameters& h) : h_(h), m_(std::size_t(n)), v_(std::size_t(n)) {}
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    optim::Hyperparameters h = h_;
    h.lr = lr;
    optim::adamw_step<Device>(p, g, m_.data(), v_.data(), index_t(m_.size()), h, step);
  }
  std::vector<StateArray> state() override {
    return {array<Device>("exp_avg", m_), array<Device>("exp_avg_sq", v_)};
  }

private:
  optim::Hyperparameters h_;
  StateValues<M, Device> m_, v_;
};

template <class M, class Device>
class Lion final : public ParameterOptimizer<M> {
public:
  Lion(index_t n, const optim::Hyperparameters& h) : h_(h), m_(std::size_t(n)) {}
  void step(M* p, const M* g, double lr, std::int64_t) override {
    optim::Hyperparameters h = h_;
    h.lr = lr;
    optim::lion_step<Device>(p, g, m_.data(), index_t(m_.size()), h);
  }
  std::vector<StateArray> state() override { return {array<Device>("exp_avg", m_)}; }

private:
  optim::Hyperparameters h_;
  StateValues<M, Device> m_;
};

// Adafactor keeps per-tensor state (factored for matrices), so it steps the
// buffer entry by entry. The external rate is the schedule's (as HF's
// Trainer runs it: relative_step and scale_parameter off).
template <class M, class Device>
class Adafactor final : public ParameterOptimizer<M> {
public:
  Adafactor(const std::vector<models::ParameterEntry>& entries, const recipe::TrainSection& t) : entries_(entries) {
    options_.lr = t.learning_rate;
    options_.relative_step = false;
    options_.scale_parameter = false;
    options_.warmup_init = false;
    options_.weight_decay = t.weight_decay;
    if (t.adafactor_beta1 > 0) options_.beta1 = t.adafactor_beta1;
    for (const auto& e : entries_)
      states_.push_back(optim::adafactor_state<state_t<M>, typename Device::Memory>(e.shape, options_));
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    options_.lr = lr;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      optim::adafactor_step<Device>(p + entries_[i].offset, g + entries_[i].offset, entries_[i].shape, states_[i],
                                    options_, step);
  }
  std::vector<StateArray> state() override {
    std::vector<StateArray> out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const std::string& n = entries_[i].name;
      add_nonempty<Device>(out, n + "/exp_avg_sq_row", states_[i].row);
      add_nonempty<Device>(out, n + "/exp_avg_sq_col", states_[i].col);
      add_nonempty<Device>(out, n + "/exp_avg_sq", states_[i].full);
      add_nonempty<Device>(out, n + "/exp_avg", states_[i].momentum);
    }
    return out;
  }

private:
  std::vector<models::ParameterEntry> entries_;
  optim::AdafactorOptions options_;
  std::vector<optim::AdafactorState<state_t<M>, typename Device::Memory>> states_;
};

// 8-bit AdamW quantises per tensor (small tensors keep plain moments). The
// two code maps are copied once into the device's memory, where the steps
// read them.
template <class M, class Device>
class AdamW8bit final : public ParameterOptimizer<M> {
public:
  AdamW8bit(const std::vector<models::ParameterEntry>& entries, const optim::Hyperparameters& h)
      : entries_(entries), h_(h), maps_(2) {
    Device::from_host(maps_.data(), optim::host_dynamic_maps(), maps_.bytes());
    for (const auto& e : entries_)
      states_.push_back(optim::adamw8bit_state<state_t<M>, typename Device::Memory>(e.shape.numel()));
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    optim::Hyperparameters h = h_;
    h.lr = lr;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      optim::adamw8bit_step<Device>(p + entries_[i].offset, g + entries_[i].offset, entries_[i].shape.numel(),
                                    states_[i], maps_.data(), h, step);
  }
  std::vector<StateArray> state() override {
    std::vector<StateArray> out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const std::string& n = entries_[i].name;
      add_nonempty<Device>(out, n + "/exp_avg_codes", states_[i].m_q);
      add_nonempty<Device>(out, n + "/exp_avg_sq_codes", states_[i].v_q);
      add_nonempty<Device>(out, n + "/exp_avg_absmax", states_[i].m_absmax);
      add_nonempty<Device>(out, n + "/exp_avg_sq_absmax", states_[i].v_absmax);
      add_nonempty<Device>(out, n + "/exp_avg", states_[i].m);
      add_nonempty<Device>(out, n + "/exp_avg_sq", states_[i].v);
    }
    return out;
  }

private:
  std::vector<models::ParameterEntry> entries_;
  optim::Hyperparameters h_;
  memory::Array<optim::DynamicMap, typename Device::Memory> maps_;  // signed, unsigned
  std::vector<optim::AdamW8bitState<state_t<M>, typename Device::Memory>> states_;
};

}  // namespace detail

// The policy's optimizer for one flat buffer with these entries (shapes
// matter to optimizers that factor matrices), its state in the device's
// memory. A policy from outside ft brings its own by defining
//   template <class M> static std::unique_ptr<ft::train::ParameterOptimizer<M>>
//   make(const std::vector<ft::models::ParameterEntry>&, ft::index_t size, const ft::recipe::TrainSection&);
// (examples/third_party_plugin does); that optimizer steps on the CPU, and
// on another device only with strategy.optimizer_offload.
template <class Policy, class M, class Device = device::Cpu>
std::unique_ptr<ParameterOptimizer<M>> make_parameter_optimizer(
    const std::vector<models::ParameterEntry>& entries, index_t size,
    const recipe::TrainSection& train) {
  const optim::Hyperparameters h = hyperparameters(train);
  if constexpr (std::is_same_v<Policy, optim::SGD>) {
    return std::make_unique<detail::Sgd<M, Device>>(size, h);
  } else if constexpr (std::is_same_v<Policy, optim::AdamW>) {
    return std::make_unique<detail::AdamW<M, Device>>(size, h);
  } else if constexpr (std::is_same_v<Policy, optim::Lion>) {
    return std::make_unique<detail::Lion<M, Device>>(size, h);
  } else if constexpr (std::is_same_v<Policy, optim::Adafactor>) {
    return std::make_unique<detail::Adafactor<M, Device>>(entries, train);
  } else if constexpr (std::is_same_v<Policy, optim::AdamW8bit>) {
    return std::make_unique<detail::AdamW8bit<M, Device>>(entries, h);
  } else {
    static_assert(requires { Policy::template make<M>(entries, size, train); },
                  "this optimizer policy has no run-time optimizer: give it a static make<M>(entries, size, train)");
    if constexpr (!std::is_same_v<Device, device::Cpu>)
      throw Error(std::string("optimizer ") + std::string(Policy::name) +
                  " steps on the CPU only: set strategy.optimizer_offload = true to step it in host memory");
    return Policy::template make<M>(entries, size, train);
  }
}

}  // namespace ft::train
