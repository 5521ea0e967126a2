#pragma once
// The runtimes of the optimizers whose state is one value per parameter (or
// none): SGD, AdamW and Lion over a flat part of a buffer (update.hpp).
#include <memory>
#include <vector>

#include "ft/optim/optimizer.hpp"
#include "ft/optim/runtime.hpp"
#include "ft/optim/update.hpp"

namespace ft::optim {

template <class M, class Device>
class SgdRuntime final : public Runtime<M> {
public:
  SgdRuntime(const std::vector<models::ParameterEntry>&, index_t n, const recipe::TrainSection& t)
      : h_(hyperparameters(t)), n_(n) {
    if (h_.momentum != 0) buffer_ = detail::StateValues<M, Device>(std::size_t(n));  // plain SGD keeps nothing
  }
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>&, index_t n,
                                   const recipe::TrainSection& t, memory::AllocationSize size) {
    return t.momentum != 0 ? detail::state_values_bytes<M>(n, size) : 0;
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    Hyperparameters h = h_;
    h.lr = lr;
    sgd_step<Device>(p, g, buffer_.data(), n_, h, step);
  }
  std::vector<StateArray> state() override {
    if (buffer_.empty()) return {};
    return {detail::array<Device>("momentum_buffer", buffer_)};
  }

private:
  Hyperparameters h_;
  index_t n_;
  detail::StateValues<M, Device> buffer_;  // empty without momentum
};

template <class M, class Device>
class AdamWRuntime final : public Runtime<M> {
public:
  AdamWRuntime(const std::vector<models::ParameterEntry>&, index_t n, const recipe::TrainSection& t)
      : h_(hyperparameters(t)), m_(std::size_t(n)), v_(std::size_t(n)) {}
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>&, index_t n, const recipe::TrainSection&,
                                   memory::AllocationSize size) {
    return 2 * detail::state_values_bytes<M>(n, size);
  }
  void step(M* p, const M* g, double lr, std::int64_t step) override {
    Hyperparameters h = h_;
    h.lr = lr;
    adamw_step<Device>(p, g, m_.data(), v_.data(), index_t(m_.size()), h, step);
  }
  std::vector<StateArray> state() override {
    return {detail::array<Device>("exp_avg", m_), detail::array<Device>("exp_avg_sq", v_)};
  }

private:
  Hyperparameters h_;
  detail::StateValues<M, Device> m_, v_;
};

template <class M, class Device>
class LionRuntime final : public Runtime<M> {
public:
  LionRuntime(const std::vector<models::ParameterEntry>&, index_t n, const recipe::TrainSection& t)
      : h_(hyperparameters(t)), m_(std::size_t(n)) {}
  static std::uint64_t state_bytes(const std::vector<models::ParameterEntry>&, index_t n, const recipe::TrainSection&,
                                   memory::AllocationSize size) {
    return detail::state_values_bytes<M>(n, size);
  }
  void step(M* p, const M* g, double lr, std::int64_t) override {
    Hyperparameters h = h_;
    h.lr = lr;
    lion_step<Device>(p, g, m_.data(), index_t(m_.size()), h);
  }
  std::vector<StateArray> state() override { return {detail::array<Device>("exp_avg", m_)}; }

private:
  Hyperparameters h_;
  detail::StateValues<M, Device> m_;
};

}  // namespace ft::optim
