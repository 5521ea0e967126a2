#pragma once
// The runtime of a block-wise quantized AdamW, whose moments a scheme
// quantizes (8-bit: adamw8bit.hpp; 4-bit: adamw4bit.hpp, torchao's AdamW4bit). Per tensor the scheme
// quantizes the moments or keeps them whole (small tensors); its two code
// maps are copied once into the device's memory, where the steps read them.
//
// A scheme says:
//   Map                       a moment's code map (signed first, unsigned second)
//   host_maps()               the two maps in host memory
//   quantizes(n)              whether a tensor of n elements keeps codes
//   code_bytes(n), blocks(n)  then its bytes of codes and scales per moment
//   state<S, Space>(n)        a tensor's zero state
//   step<Device>(p, g, n, state, maps, hyperparameters, step)
#include <memory>
#include <string>
#include <vector>

#include "ft/optim/adamw4bit.hpp"
#include "ft/optim/adamw8bit.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/optim/quantized_moments.hpp"
#include "ft/optim/runtime.hpp"

namespace ft::optim {

template <class Scheme, class M, class Device>
class QuantizedAdamWRuntime final : public Runtime<M> {
  using Map = typename Scheme::Map;

public:
  QuantizedAdamWRuntime(const std::vector<models::ParameterEntry>& entries, index_t, const recipe::TrainSection& t)
      : entries_(entries), h_(hyperparameters(t)), maps_(2) {
    Device::from_host(maps_.data(), Scheme::host_maps(), maps_.bytes());
    for (const auto& e : entries_)
      states_.push_back(Scheme::template state<state_t<M>, typename Device::Memory>(e.shape.numel()));
  }
  // A quantized tensor keeps two moments of codes with an f32 scale per
  // block; a smaller one two plain moments; and the runtime its copy of the
  // code maps.
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>& entries, index_t,
                                   const recipe::TrainSection&, memory::AllocationSize size) {
    std::uint64_t bytes = 0;
    for (const auto& e : entries) {
      const index_t n = e.shape.numel();
      bytes += Scheme::quantizes(n) ? 2 * size(std::uint64_t(Scheme::code_bytes(n))) +
                                          2 * size(std::uint64_t(Scheme::blocks(n)) * sizeof(float))
                                    : 2 * detail::state_values_bytes<M>(n, size);
    }
    return bytes + size(2 * sizeof(Map));
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    Hyperparameters h = h_;
    h.lr = lr;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      Scheme::template step<Device>(p + entries_[i].offset, g + entries_[i].offset, entries_[i].shape.numel(),
                                    states_[i], maps_.data(), h, step);
  }
  std::vector<StateArray> state() override {
    std::vector<StateArray> out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const std::string& n = entries_[i].name;
      detail::add_nonempty<Device>(out, n + "/exp_avg_codes", states_[i].m_q);
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq_codes", states_[i].v_q);
      detail::add_nonempty<Device>(out, n + "/exp_avg_absmax", states_[i].m_absmax);
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq_absmax", states_[i].v_absmax);
      detail::add_nonempty<Device>(out, n + "/exp_avg", states_[i].m);
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq", states_[i].v);
    }
    return out;
  }

private:
  std::vector<models::ParameterEntry> entries_;
  Hyperparameters h_;
  memory::Array<Map, typename Device::Memory> maps_;  // signed, unsigned
  std::vector<QuantizedMoments<state_t<M>, typename Device::Memory>> states_;
};

}  // namespace ft::optim
