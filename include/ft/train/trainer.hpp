#pragma once
// Trainer<Model, Precision, Parallelism, Optimizer, Adapter, Device>: the one
// type that both doors into ft lead to. A C++ user names the five policies as types; a
// plugin instantiates the combinations it offers and ftrun picks one by the
// names in a recipe.
//
// Each policy hands the engine the piece it owns: the model family its
// reader of config.json, the precision its dtypes, the parallelism and the
// adapter their runtimes, the optimizer its maker. A type that is not a
// policy of the right kind is refused at compile time with a sentence.
//
// The device (device::Cpu unless named; device::Cuda from device/cuda.cuh,
// in a source nvcc compiles) is where the model, its activations and the
// trainable state live. A policy runs on a device other than the CPU when
// its runtime takes the device (`runtime<T, Device>`); a combination that
// cannot run there is refused at compile time with a sentence.
//
// Constructing a Trainer checks that the recipe's options make sense together
// with the chosen policies, before anything is allocated; every refusal is an
// ft::Error whose sentence says why. `plan()` says what the Trainer will hold
// and how, in the words of the policies.
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ft/adapters/adapter.hpp"
#include "ft/adapters/full_runtime.hpp"
#include "ft/adapters/lora_runtime.hpp"
#include "ft/adapters/prompt_runtime.hpp"
#include "ft/comm/job.hpp"
#include "ft/core/error.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/family.hpp"
#include "ft/models/read.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/data_parallel.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline.hpp"
#include "ft/precision/precision.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/compiled.hpp"
#include "ft/train/engine.hpp"
#include "ft/train/makers.hpp"
#include "ft/train/policy_set.hpp"

namespace ft {

namespace detail {
template <class Adapter>
std::string describe_adapter(const recipe::Recipe& r) {
  return Adapter::describe(r);
}
// The optimizer's state per parameter with a run's [train] settings, where it says; else its declared figure.
template <class Optimizer>
double optimizer_state_bytes(const recipe::TrainSection& t) {
  if constexpr (requires { Optimizer::state_bytes_with(t); }) return double(Optimizer::state_bytes_with(t));
  else return double(Optimizer::state_bytes);
}
}  // namespace detail

template <class Model, class Precision, class Parallelism, class Optimizer, class Adapter,
          class Device = device::Cpu>
class Trainer {
  static_assert(model_family<Model>,
                "Trainer's 1st policy must be a model family: a struct deriving from ft::models::Policy with name, "
                "type_name, hf_architectures, linear_modules, default_lora_targets and describe(const ConfigReader&)");
  static_assert(precision_policy<Precision>,
                "Trainer's 2nd policy must be a precision: a struct deriving from ft::precision::Policy with name, "
                "type_name, storage and master dtypes and loss_scaling");
  static_assert(parallelism_policy<Parallelism>,
                "Trainer's 3rd policy must be a parallelism: a struct deriving from ft::parallel::Policy with name, "
                "type_name, its sharding flags and a runtime<T, M> class");
  static_assert(optimizer_policy<Optimizer>,
                "Trainer's 4th policy must be an optimizer: a struct deriving from ft::optim::Policy with name, "
                "type_name and state_bytes");
  static_assert(adapter_policy<Adapter>,
                "Trainer's 5th policy must be an adapter: a struct deriving from ft::adapters::Policy with name, "
                "type_name, trains_base_weights, resolve(recipe, family), describe(recipe) and a runtime<T> class");
  static_assert(device::device<Device>,
                "Trainer's 6th policy must be a device: ft::device::Cpu, or ft::device::Cuda from ft/device/cuda.cuh");
  static constexpr bool on_host = std::is_same_v<Device, device::Cpu>;
  static_assert(on_host || requires { typename Adapter::template runtime<float, Device>; },
                "this adapter runs on the CPU only: on another device choose full or lora");
  static_assert(on_host || requires { typename Parallelism::template runtime<float, float, Device>; },
                "this parallelism runs on the CPU only: on another device choose single");

public:
  using model_type = Model;              // the network
  using precision_type = Precision;      // dtypes of the weights and of the master copy
  using parallelism_type = Parallelism;  // how stages and buffers map to ranks
  using optimizer_type = Optimizer;      // state layout and update of a flat shard
  using adapter_type = Adapter;          // which parameters train
  using device_type = Device;            // where the model and the trainable state live

  // The policies as values: what the checks, the plan and the type name read.
  static constexpr train::PolicySet policy_set{
      .model = Model::name,
      .model_type = Model::type_name,
      .read_model = &models::read_model_spec_of<Model>,
      .precision = Precision::name,
      .precision_type = Precision::type_name,
      .storage = Precision::storage,
      .master = Precision::master,
      .loss_scaling = Precision::loss_scaling,
      .parallelism = Parallelism::name,
      .parallelism_type = Parallelism::type_name,
      .multi_rank = Parallelism::multi_rank,
      .shards_optimizer_state = Parallelism::shards_optimizer_state,
      .shards_gradients = Parallelism::shards_gradients,
      .shards_parameters = Parallelism::shards_parameters,
      .pipelined = Parallelism::name == parallel::Pipeline::name,
      .optimizer = Optimizer::name,
      .optimizer_type = Optimizer::type_name,
      .optimizer_state_bytes = &detail::optimizer_state_bytes<Optimizer>,
      .optimizer_elementwise_state = optim::elementwise_state_of<Optimizer>,
      .adapter_type = Adapter::type_name,
      .describe_adapter = &detail::describe_adapter<Adapter>,
      .device = Device::name,
      .device_type = Device::type_name,
      .on_host = on_host,
  };

  // The C++ type; the device is named only when it is not the CPU.
  static std::string type_name() { return train::trainer_type_name(policy_set, Parallelism::type_name, !on_host); }

  explicit Trainer(recipe::Recipe recipe) : recipe_(std::move(recipe)) {
    Adapter::resolve(recipe_, {Model::name, Model::linear_modules, Model::default_lora_targets});
    // A pipeline's micro-batches are the step's accumulated ones.
    if (policy_set.pipelined) recipe_.train.gradient_accumulation_steps = recipe::pipeline_microbatches(recipe_);
    train::check_recipe(policy_set, recipe_);
  }

  // The recipe with the policies' defaults filled in.
  const recipe::Recipe& recipe() const { return recipe_; }

  // What this Trainer will hold, per parameter, and how it runs.
  std::string plan() const { return train::describe_plan(policy_set, recipe_); }

  // Runs the recipe to the end: trains, evaluates, checkpoints, saves the
  // result. Throws ft::Error for bad input, train::TrainingStopped when the
  // loss diverges.
  void train() const {
    using Storage = element_t<Precision::storage>;  // what forward and backward use
    using Master = element_t<Precision::master>;    // what the optimizer updates
    train::Policies<Storage, Master, Device> p;
    p.trainer = type_name();
    // A checkpoint's bytes are the host's whatever the device, so it resumes on any.
    p.resumable_as = train::trainer_type_name(policy_set, "/* any parallelism */", false);
    p.adapter_description = Adapter::describe(recipe_);
    p.loss_scaling = Precision::loss_scaling;
    p.model = policy_set.read_model;
    p.trains_base_weights = Adapter::trains_base_weights;
    p.adapter = &train::make_adapter_runtime<Adapter, Storage, Device>;
    p.parallel = &train::make_parallel_runtime<Parallelism, Storage, Master, Device>;
    p.optimizer.make = train::MakeOptimizer<Optimizer, Master, Device>{recipe_.train};
    p.optimizer.make_on_host = train::MakeOptimizer<Optimizer, Master, device::Cpu>{recipe_.train};
    p.optimizer.by_element = optim::elementwise_state_of<Optimizer>;
    train::run_engine<Storage, Master, Device>(recipe_, std::move(p));
  }

private:
  recipe::Recipe recipe_;
};

}  // namespace ft
