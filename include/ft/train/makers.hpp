#pragma once
// The makers the engine calls to build a policy's runtime: one per policy and
// dtypes rather than one per Trainer, so that every Trainer naming a policy
// shares its maker, and ft compiles the stock ones once (train/compiled.hpp).
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ft/adapters/runtime.hpp"
#include "ft/comm/communicator.hpp"
#include "ft/core/error.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/parameters.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/runtime.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/optim/runtime.hpp"

namespace ft::train {

// A policy's runtime on a device: runtime<Types..., Device>, or on the CPU
// runtime<Types...> (a policy from outside ft may name only that).
template <class Policy, class Device, class... Types>
struct runtime_on {
  using type = typename Policy::template runtime<Types..., Device>;
};
template <class Policy, class... Types>
struct runtime_on<Policy, device::Cpu, Types...> {
  using type = typename Policy::template runtime<Types...>;
};

template <class Adapter, class T, class Device>
std::unique_ptr<adapters::Runtime<T, Device>> make_adapter_runtime(const recipe::Recipe& r) {
  return std::make_unique<typename runtime_on<Adapter, Device, T>::type>(r);
}

template <class Parallelism, class T, class M, class Device>
std::unique_ptr<parallel::Runtime<T, M, Device>> make_parallel_runtime(comm::Communicator& c,
                                                                      const recipe::Recipe& r) {
  return std::make_unique<typename runtime_on<Parallelism, Device, T, M>::type>(c, r,
                                                                                parallel::Sharding::of<Parallelism>());
}

// The optimizer's runtime over a part of a buffer (its tensors and size), its
// state in the device's memory. A runtime that takes no device
// (`runtime<M>`, as a policy from outside ft may have) steps on the CPU only,
// and on another device only with strategy.optimizer_offload.
template <class Optimizer, class M, class Device>
std::unique_ptr<optim::Runtime<M>> make_optimizer_runtime(const std::vector<models::ParameterEntry>& entries,
                                                          index_t size, const recipe::TrainSection& train) {
  if constexpr (requires { typename Optimizer::template runtime<M, Device>; }) {
    return std::make_unique<typename Optimizer::template runtime<M, Device>>(entries, size, train);
  } else {
    if constexpr (!std::is_same_v<Device, device::Cpu>)
      throw Error(std::string("optimizer ") + std::string(Optimizer::name) +
                  " steps on the CPU only: set strategy.optimizer_offload = true to step it in host memory");
    return std::make_unique<typename Optimizer::template runtime<M>>(entries, size, train);
  }
}

// The maker the engine holds, with the recipe's [train] section it reads.
template <class Optimizer, class M, class Device>
struct MakeOptimizer {
  recipe::TrainSection train;
  std::unique_ptr<optim::Runtime<M>> operator()(const std::vector<models::ParameterEntry>& entries,
                                                index_t size) const {
    return make_optimizer_runtime<Optimizer, M, Device>(entries, size, train);
  }
};

}  // namespace ft::train
