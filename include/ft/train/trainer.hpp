#pragma once
// Trainer<Model, Precision, Parallelism, Optimizer, Adapter, Device>: the one
// type that both doors into ft lead to. A C++ user names the five policies as types; a
// plugin lists the combinations it offers and ftrun picks one by the names in
// a recipe. Either way the combination is a constant of pointers and flags
// (train::Assembly), and the code that checks, plans and runs it is written
// once over that constant: a combination costs no code of its own.
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
#include <string>
#include <type_traits>
#include <utility>

#include "ft/adapters/adapter.hpp"
#include "ft/adapters/full_runtime.hpp"
#include "ft/adapters/lora_runtime.hpp"
#include "ft/adapters/prompt_runtime.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/family.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/data_parallel.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline.hpp"
#include "ft/precision/precision.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/assembly.hpp"
#include "ft/train/compiled.hpp"

namespace ft {

/// The trainer both doors lead to: five policies as types (and a device),
/// checked at compile time; constructed from a recipe, whose options it
/// checks against the policies before anything is allocated; `plan()` says
/// what it will hold, `train()` runs the recipe to the end.
/// @snippet custom_trainer/main.cpp trainer
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

  // The policies as values: what the checks, the plan and the engine read (train/assembly.hpp).
  static constexpr const train::Assembly& assembly() {
    return train::assembly_of<Model, Precision, Parallelism, Optimizer, Adapter, Device>;
  }

  // The C++ type; the device is named only when it is not the CPU.
  static std::string type_name() { return train::type_name(assembly()); }

  explicit Trainer(recipe::Recipe recipe) : recipe_(train::resolve(assembly(), std::move(recipe))) {}

  // The recipe with the policies' defaults filled in.
  const recipe::Recipe& recipe() const { return recipe_; }

  // What this Trainer will hold, per parameter, and how it runs.
  std::string plan() const { return train::describe_plan(assembly().set, recipe_); }

  // Runs the recipe to the end: trains, evaluates, checkpoints, saves the
  // result. Throws ft::Error for bad input, train::TrainingStopped when the
  // loss diverges, train::StoppedOnRequest when SIGINT, SIGTERM or SIGUSR1
  // stopped it after a step with a checkpoint (core/signals.hpp).
  void train() const { assembly().run(assembly(), recipe_); }

private:
  recipe::Recipe recipe_;
};

}  // namespace ft
