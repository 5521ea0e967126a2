#pragma once
// 8-bit AdamW's runtime quantises per tensor (small tensors keep plain
// moments; adamw8bit.hpp). The two code maps are copied once into the
// device's memory, where the steps read them.
#include <memory>
#include <string>
#include <vector>

#include "ft/optim/adamw8bit.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/optim/runtime.hpp"

namespace ft::optim {

template <class M, class Device>
class AdamW8bitRuntime final : public Runtime<M> {
public:
  AdamW8bitRuntime(const std::vector<models::ParameterEntry>& entries, index_t, const recipe::TrainSection& t)
      : entries_(entries), h_(hyperparameters(t)), maps_(2) {
    Device::from_host(maps_.data(), host_dynamic_maps(), maps_.bytes());
    for (const auto& e : entries_)
      states_.push_back(adamw8bit_state<state_t<M>, typename Device::Memory>(e.shape.numel()));
  }
  // A tensor of at least adamw8bit_min_size keeps two moments of 8-bit
  // codes with an f32 absmax per block; a smaller one two plain moments;
  // and the runtime its copy of the code maps (adamw8bit_state).
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>& entries, index_t,
                                   const recipe::TrainSection&, memory::AllocationSize size) {
    std::uint64_t bytes = 0;
    for (const auto& e : entries) {
      const index_t n = e.shape.numel(), blocks = (n + adamw8bit_block - 1) / adamw8bit_block;
      bytes += n >= adamw8bit_min_size ? 2 * size(std::uint64_t(n)) + 2 * size(std::uint64_t(blocks) * sizeof(float))
                                       : 2 * detail::state_values_bytes<M>(n, size);
    }
    return bytes + size(2 * sizeof(DynamicMap));
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    Hyperparameters h = h_;
    h.lr = lr;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      adamw8bit_step<Device>(p + entries_[i].offset, g + entries_[i].offset, entries_[i].shape.numel(), states_[i],
                             maps_.data(), h, step);
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
  memory::Array<DynamicMap, typename Device::Memory> maps_;  // signed, unsigned
  std::vector<AdamW8bitState<state_t<M>, typename Device::Memory>> states_;
};

}  // namespace ft::optim
