#pragma once
// Adafactor's runtime keeps per-tensor state (factored for matrices), so it
// steps its part entry by entry (adafactor.hpp). The external rate is the
// schedule's (as HF's Trainer runs it: relative_step and scale_parameter off).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ft/nn/column_sums.hpp"
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
  // A matrix keeps its row and column factors, any other tensor its whole
  // second moment; each tensor its momentum with beta1 (adafactor_state).
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>& entries, index_t,
                                   const recipe::TrainSection& t, memory::AllocationSize size) {
    std::uint64_t bytes = 0;
    for (const auto& e : entries) {
      const AdafactorLayout l(e.shape);
      bytes += l.factored ? detail::state_values_bytes<M>(l.batch * l.rows, size) +
                                detail::state_values_bytes<M>(l.batch * l.cols, size)
                          : detail::state_values_bytes<M>(l.size(), size);
      if (t.adafactor_beta1 > 0) bytes += detail::state_values_bytes<M>(l.size(), size);
    }
    return bytes;
  }
  // What one step makes and frees, for the largest of `entries`
  // (adafactor.hpp): the two RMS sums' partials, and on a factored matrix its
  // row and column factors and the column partials, one per span of rows as
  // the device `Columns` cuts them (nn/column_sums.hpp).
  template <class Columns>
  static std::uint64_t step_scratch_bytes(const std::vector<models::ParameterEntry>& entries,
                                          memory::AllocationSize size) {
    using A = acc_t<state_t<M>>;
    std::uint64_t most = 0;
    for (const auto& e : entries) {
      const AdafactorLayout l(e.shape);
      const index_t chunk = l.factored ? l.cols : detail::adafactor_chunk, parts = (l.size() + chunk - 1) / chunk;
      std::uint64_t bytes = size(std::uint64_t(2 * parts + 2) * sizeof(double));
      if (l.factored) {
        const index_t per = nn::column_span_rows<Columns>(l.rows), spans = (l.rows + per - 1) / per;
        bytes += size(std::uint64_t(l.batch * (l.rows + l.cols + 1)) * sizeof(A)) +
                 size(std::uint64_t(l.batch * spans * l.cols) * sizeof(double));
      }
      most = std::max(most, bytes);
    }
    return most;
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
