#pragma once
// A Trainer as values: its five policies' names and flags (PolicySet), the
// adapter's resolution of a recipe, and the makers of the policies' runtimes
// as function pointers. The policy types are needed only to fill one in
// (assembly_of, a constant made at compile time); what runs on it (the
// recipe's resolution, the plan, the engine) is written once over the
// values. A plugin offering a thousand combinations therefore compiles each
// policy's makers once and each combination as a table of pointers, not as
// code of its own.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ft/adapters/adapter.hpp"
#include "ft/core/dtype.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/read.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/pipeline.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/engine.hpp"
#include "ft/train/makers.hpp"
#include "ft/train/policy_set.hpp"

namespace ft::train {

struct Assembly {
  PolicySet set;
  adapters::FamilyModules family;  // the family's projections, for the adapter's defaults and checks
  bool trains_base_weights;        // the adapter trains the model's own weights
  void (*resolve_adapter)(recipe::Recipe&, const adapters::FamilyModules&);
  // Runs a resolved recipe through the engine of the precision's dtypes on
  // the device (run_assembly below, for this Assembly's TypedAssembly).
  void (*run)(const Assembly&, recipe::Recipe);
};

// The makers of the runtimes, typed by the engine's storage T, master M and device.
template <element T, class M, class Device>
struct TypedAssembly : Assembly {
  using OptimizerMaker = std::unique_ptr<optim::Runtime<M>> (*)(const std::vector<models::ParameterEntry>&, index_t,
                                                                const recipe::TrainSection&);
  std::unique_ptr<adapters::Runtime<T, Device>> (*make_adapter)(const recipe::Recipe&);
  std::unique_ptr<parallel::Runtime<T, M, Device>> (*make_parallel)(comm::Communicator&, const recipe::Recipe&);
  OptimizerMaker make_optimizer;          // its state in the device's memory
  OptimizerMaker make_optimizer_on_host;  // strategy.optimizer_offload
};

// The C++ type `ft::Trainer<...>`; the device is named only when it is not the CPU.
inline std::string type_name(const Assembly& a) {
  return trainer_type_name(a.set, a.set.parallelism_type, !a.set.on_host);
}

// The recipe with the policies' defaults filled in; throws ft::Error, with a
// sentence, when its options do not make sense together with the policies.
// Nothing is allocated before.
inline recipe::Recipe resolve(const Assembly& a, recipe::Recipe r) {
  a.resolve_adapter(r, a.family);
  // A pipeline's micro-batches are the step's accumulated ones.
  if (a.set.pipelined) r.train.gradient_accumulation_steps = recipe::pipeline_microbatches(r);
  check_recipe(a.set, r);
  return r;
}

// Runs a resolved recipe to the end with the policies `a` assembles, whose
// dtypes and device are T, M and Device.
template <element T, class M, class Device>
void run_assembly(const Assembly& a, recipe::Recipe r) {
  const auto& typed = static_cast<const TypedAssembly<T, M, Device>&>(a);
  Policies<T, M, Device> p;
  p.trainer = type_name(a);
  // A checkpoint's bytes are the host's whatever the device, so it resumes on any.
  p.resumable_as = trainer_type_name(a.set, "/* any parallelism */", false);
  p.adapter_description = a.set.describe_adapter(r);
  p.loss_scaling = a.set.loss_scaling;
  p.model = a.set.read_model;
  p.trains_base_weights = a.trains_base_weights;
  p.adapter = typed.make_adapter;
  p.parallel = typed.make_parallel;
  p.optimizer.make = [make = typed.make_optimizer, t = r.train](const std::vector<models::ParameterEntry>& entries,
                                                                 index_t size) { return make(entries, size, t); };
  p.optimizer.make_on_host = [make = typed.make_optimizer_on_host, t = r.train](
                                 const std::vector<models::ParameterEntry>& entries,
                                 index_t size) { return make(entries, size, t); };
  p.optimizer.by_element = a.set.optimizer_elementwise_state;
  run_engine<T, M, Device>(std::move(r), std::move(p));
}

namespace detail {
// The optimizer's state per parameter with a run's [train] settings, where it says; else its declared figure.
template <class Optimizer>
double optimizer_state_bytes(const recipe::TrainSection& t) {
  if constexpr (requires { Optimizer::state_bytes_with(t); }) return double(Optimizer::state_bytes_with(t));
  else return double(Optimizer::state_bytes);
}
template <class Adapter>
std::string describe_adapter(const recipe::Recipe& r) {
  return Adapter::describe(r);
}
template <class Adapter>
void resolve_adapter(recipe::Recipe& r, const adapters::FamilyModules& f) {
  Adapter::resolve(r, f);
}
}  // namespace detail

// The Assembly of five policies on a device. The policies are checked by
// Trainer<...>, the door that names this.
template <class Model, class Precision, class Parallelism, class Optimizer, class Adapter, class Device>
inline constexpr TypedAssembly<element_t<Precision::storage>, element_t<Precision::master>, Device> assembly_of{
    {.set =
         {
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
             .adapter = Adapter::name,
             .adapter_type = Adapter::type_name,
             .trains_base_weights = Adapter::trains_base_weights,
             .describe_adapter = &detail::describe_adapter<Adapter>,
             .device = Device::name,
             .device_type = Device::type_name,
             .on_host = std::is_same_v<Device, device::Cpu>,
         },
     .family = {Model::name, Model::linear_modules, Model::default_lora_targets},
     .trains_base_weights = Adapter::trains_base_weights,
     .resolve_adapter = &detail::resolve_adapter<Adapter>,
     .run = &run_assembly<element_t<Precision::storage>, element_t<Precision::master>, Device>},
    &make_adapter_runtime<Adapter, element_t<Precision::storage>, Device>,
    &make_parallel_runtime<Parallelism, element_t<Precision::storage>, element_t<Precision::master>, Device>,
    &make_optimizer_runtime<Optimizer, element_t<Precision::master>, Device>,
    &make_optimizer_runtime<Optimizer, element_t<Precision::master>, device::Cpu>,
};

}  // namespace ft::train
