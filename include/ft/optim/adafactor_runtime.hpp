#pragma once
// Adafactor's runtime keeps per-tensor state (factored for matrices), so it
// steps its part entry by entry (adafactor.hpp). The external rate is the
// schedule's (as HF's Trainer runs it: relative_step and scale_parameter off).
#include <memory>
#include <string>
#include <vector>

#include "ft/optim/adafactor.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/optim/runtime.hpp"

namespace ft::optim {

template <class M, class Device>
class AdafactorRuntime final : public Runtime<M> {
public:
  AdafactorRuntime(const std::vector<models::ParameterEntry>& entries, index_t, const recipe::TrainSection& t)
      : entries_(entries) {
    options_.lr = t.learning_rate;
    options_.relative_step = false;
    options_.scale_parameter = false;
    options_.warmup_init = false;
    options_.weight_decay = t.weight_decay;
    if (t.adafactor_beta1 > 0) options_.beta1 = t.adafactor_beta1;
    for (const auto& e : entries_)
      states_.push_back(adafactor_state<state_t<M>, typename Device::Memory>(e.shape, options_));
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    options_.lr = lr;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      adafactor_step<Device>(p + entries_[i].offset, g + entries_[i].offset, entries_[i].shape, states_[i], options_,
                             step);
  }
  std::vector<StateArray> state() override {
    std::vector<StateArray> out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const std::string& n = entries_[i].name;
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq_row", states_[i].row);
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq_col", states_[i].col);
      detail::add_nonempty<Device>(out, n + "/exp_avg_sq", states_[i].full);
      detail::add_nonempty<Device>(out, n + "/exp_avg", states_[i].momentum);
    }
    return out;
  }

private:
  std::vector<models::ParameterEntry> entries_;
  AdafactorOptions options_;
  std::vector<AdafactorState<state_t<M>, typename Device::Memory>> states_;
};

}  // namespace ft::optim
