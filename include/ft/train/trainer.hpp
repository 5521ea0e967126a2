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
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ft/adapters/adapter.hpp"
#include "ft/adapters/full_runtime.hpp"
#include "ft/adapters/lora_runtime.hpp"
#include "ft/adapters/prompt_runtime.hpp"
#include "ft/comm/job.hpp"
#include "ft/core/error.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/family.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/models/load.hpp"
#include "ft/parallel/data_parallel.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline.hpp"
#include "ft/precision/precision.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/engine.hpp"

namespace ft {

namespace detail {
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
}  // namespace detail

template <class Model, class Precision, class Parallelism, class Optimizer, class Adapter,
          class Device = device::Cpu>
class Trainer {
  static_assert(model_family<Model>,
                "Trainer's 1st policy must be a model family: a struct deriving from ft::models::Policy with name, "
                "type_name, hf_architectures, linear_modules, default_lora_targets and describe(const ConfigReader&)");
  static_assert(precision_policy<Precision>,
                "Trainer's 2nd policy must be a precision: a struct deriving from ft::precision::Policy with name, "
                "type_name, storage, compute, grad and master dtypes and loss_scaling");
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
  using precision_type = Precision;      // dtypes of weights, compute, gradients, master copy
  using parallelism_type = Parallelism;  // how stages and buffers map to ranks
  using optimizer_type = Optimizer;      // state layout and update of a flat shard
  using adapter_type = Adapter;          // which parameters train
  using device_type = Device;            // where the model and the trainable state live

  // The C++ type; the device is named only when it is not the CPU.
  static std::string type_name() { return type_name_with(Parallelism::type_name, !on_host); }

  explicit Trainer(recipe::Recipe recipe) : recipe_(std::move(recipe)) {
    Adapter::resolve(recipe_, {Model::name, Model::linear_modules, Model::default_lora_targets});
    if (pipelined) resolve_microbatches();
    validate();
  }

  // The recipe with the policies' defaults filled in.
  const recipe::Recipe& recipe() const { return recipe_; }

  // What this Trainer will hold, per parameter, and how it runs.
  std::string plan() const {
    std::ostringstream os;
    const auto& r = recipe_;
    os << "trainer      " << type_name() << "\n";
    if constexpr (!on_host) os << "device       " << Device::name << ": weights, activations, gradients and optimizer state in its memory\n";
    os << "model        " << Model::name << " from " << r.model.path << "\n";
    os << "precision    " << Precision::name << ": weights " << name_of(Precision::storage)
       << ", matmul inputs " << name_of(Precision::compute) << " (f32 accumulate), gradients "
       << name_of(Precision::grad) << ", master " << name_of(Precision::master)
       << (Precision::loss_scaling ? ", dynamic loss scale" : "") << "\n";
    os << "parallelism  " << Parallelism::name << ": " << r.launch.nproc << " rank(s)";
    if (Parallelism::shards_parameters)
      os << ", parameters, gradients and optimizer state sharded";
    else if (Parallelism::shards_gradients)
      os << ", gradients and optimizer state sharded";
    else if (Parallelism::shards_optimizer_state)
      os << ", optimizer state sharded";
    else if (pipelined)
      os << ", stages cut over pipeline ranks";
    else if (Parallelism::multi_rank)
      os << ", gradients all-reduced";
    os << "\n";
    if (pipelined) os << pipeline_plan();
    os << "optimizer    " << Optimizer::name << ", lr " << r.train.learning_rate << " ("
       << r.train.lr_scheduler_type << "), weight decay " << r.train.weight_decay << "\n";
    os << "adapter      " << Adapter::describe(r) << "\n";
    os << "bytes        per trainable parameter: " << bytes_per_trainable() << " (weight "
       << size_of(Precision::storage) << ", gradient " << size_of(Precision::grad) << ", master "
       << master_bytes() << ", optimizer " << Optimizer::state_bytes << ")"
       << (Parallelism::multi_rank ? " before sharding" : "") << "\n";
    os << "batch        " << r.train.per_device_train_batch_size << " rows x "
       << r.train.gradient_accumulation_steps << " micro-batches x " << r.launch.nproc
       << " rank(s) of " << r.data.max_seq_length << " tokens"
       << (r.data.packing ? " (packed)" : "") << "\n";
    os << "memory       checkpointing " << r.train.gradient_checkpointing
       << (r.train.activation_offloading ? ", activations offloaded to host" : "")
       << (r.train.fuse_optimizer_with_backward ? ", optimizer fused into backward" : "") << "\n";
    return os.str();
  }

  // Runs the recipe to the end: trains, evaluates, checkpoints, saves the
  // result. Throws ft::Error for bad input, train::TrainingStopped when the
  // loss diverges.
  void train() const {
    using Storage = element_t<Precision::storage>;  // what forward and backward use
    using Master = element_t<Precision::master>;    // what the optimizer updates
    train::Policies<Storage, Master, Device> p;
    p.trainer = type_name();
    // A checkpoint's bytes are the host's whatever the device, so it resumes on any.
    p.resumable_as = type_name_with("/* any parallelism */", false);
    p.adapter_description = Adapter::describe(recipe_);
    p.loss_scaling = Precision::loss_scaling;
    p.model = [](const std::filesystem::path& dir) { return models::read_model_spec_of<Model>(dir); };
    p.trains_base_weights = Adapter::trains_base_weights;
    p.adapter = [](const recipe::Recipe& r) -> std::unique_ptr<adapters::Runtime<Storage, Device>> {
      return std::make_unique<typename detail::runtime_on<Adapter, Device, Storage>::type>(r);
    };
    p.parallel = [](comm::Communicator& c,
                    const recipe::Recipe& r) -> std::unique_ptr<parallel::Runtime<Storage, Master, Device>> {
      return std::make_unique<typename detail::runtime_on<Parallelism, Device, Storage, Master>::type>(
          c, r, parallel::Sharding::of<Parallelism>());
    };
    p.optimizer.make = [t = recipe_.train](const auto& entries, index_t size) {
      return train::make_parameter_optimizer<Optimizer, Master, Device>(entries, size, t);
    };
    p.optimizer.make_on_host = [t = recipe_.train](const auto& entries, index_t size) {
      return train::make_parameter_optimizer<Optimizer, Master, device::Cpu>(entries, size, t);
    };
    if constexpr (requires { Optimizer::elementwise_state; }) p.optimizer.by_element = Optimizer::elementwise_state;
    train::Engine<Storage, Master, Device> engine(recipe_, std::move(p));
    engine.run();
  }

private:
  void validate() const {
    const auto& r = recipe_;
    const std::int64_t ranks = std::max<std::int64_t>(r.launch.nproc, comm::job_place().size);
    if (!Parallelism::multi_rank && ranks > 1)
      throw Error("parallelism " + std::string(Parallelism::name) + " runs one process, but the job has " +
                  std::to_string(ranks) + " ranks; choose ddp, zero1, zero2 or zero3 for several ranks");
    if (r.launch.shard_group_size > 0 && !Parallelism::shards_optimizer_state)
      throw Error("launch.shard_group_size = " + std::to_string(r.launch.shard_group_size) + " groups the ranks that "
                  "share sharded state, but parallelism " + std::string(Parallelism::name) +
                  " shards nothing; use zero1, zero2 or zero3, or set it to 0");
    if (r.launch.shard_group_size > 0 && ranks % r.launch.shard_group_size != 0)
      throw Error("launch.shard_group_size = " + std::to_string(r.launch.shard_group_size) + " does not divide the " +
                  std::to_string(ranks) + " ranks of the job into groups; allowed: a divisor of " + std::to_string(ranks));
    if (r.train.fuse_optimizer_with_backward && r.train.gradient_accumulation_steps > 1)
      throw Error("train.fuse_optimizer_with_backward steps each block inside backward, so gradients "
                  "cannot accumulate over gradient_accumulation_steps = " +
                  std::to_string(r.train.gradient_accumulation_steps) + "; set one of them back");
    if (r.train.fuse_optimizer_with_backward && Parallelism::shards_gradients)
      throw Error("train.fuse_optimizer_with_backward needs whole gradients, but parallelism " +
                  std::string(Parallelism::name) + " shards them; use zero1 or ddp");
    if (Precision::loss_scaling && r.train.fuse_optimizer_with_backward)
      throw Error("strategy.precision = \"" + std::string(Precision::name) +
                  "\" scales the loss and may have to skip a step after an overflow, which an optimizer fused "
                  "into backward has already applied; use bf16-mixed, or set train.fuse_optimizer_with_backward = false");
    if (pipelined) {
      if (r.train.fuse_optimizer_with_backward)
        throw Error("train.fuse_optimizer_with_backward steps each block inside its backward, but a pipeline runs "
                    "several micro-batches' backwards per step; set it to false");
      if (r.pipeline.schedule == "zero_bubble" && r.train.gradient_checkpointing != "none")
        throw Error("pipeline.schedule = \"zero_bubble\" defers weight gradients, which need the activations that "
                    "train.gradient_checkpointing drops; use 1f1b with checkpointing, or set it to \"none\"");
      pipeline_partition();
    } else if (r.pipeline.ranks != 0 || r.pipeline.microbatches != 0 || r.pipeline.stages_per_rank != 1) {
      throw Error("the recipe's [pipeline] section sets pipeline ranks, micro-batches or stages, but "
                  "strategy.parallelism is " + std::string(Parallelism::name) + "; set it to \"pipeline\"");
    }
    if (r.train.fuse_optimizer_with_backward && r.train.max_grad_norm > 0)
      throw Error("train.fuse_optimizer_with_backward steps each block before the global gradient norm is known, "
                  "so it cannot clip; set train.max_grad_norm = 0");
  }

  // The type with `parallelism` for the parallelism's part, and the device's
  // part or none.
  static std::string type_name_with(std::string_view parallelism, bool device) {
    std::string s = "ft::Trainer<";
    for (std::string_view part : {Model::type_name, Precision::type_name, parallelism, Optimizer::type_name,
                                  Adapter::type_name, device ? Device::type_name : std::string_view()}) {
      if (part.empty()) continue;
      if (s.back() != '<') s += ", ";
      s += part;
    }
    return s + ">";
  }

  static constexpr bool pipelined = Parallelism::name == parallel::Pipeline::name;

  std::int64_t job_ranks() const { return std::max<std::int64_t>(recipe_.launch.nproc, comm::job_place().size); }

  // A pipeline's micro-batches are the step's accumulated ones.
  void resolve_microbatches() { recipe_.train.gradient_accumulation_steps = recipe::pipeline_microbatches(recipe_); }

  // The partition over the model read from config.json; throws when the
  // pipeline does not fit the model or the schedule the micro-batches.
  parallel::PipePartition pipeline_partition() const {
    return parallel::plan_pipeline(recipe_, models::read_model_spec_of<Model>(recipe_.model.path).config, job_ranks());
  }

  std::string pipeline_plan() const { return parallel::describe_pipeline(recipe_, pipeline_partition(), job_ranks()); }

  static constexpr double master_bytes() {
    return Precision::master == Precision::storage ? 0.0 : double(size_of(Precision::master));
  }
  static constexpr double bytes_per_trainable() {
    return double(size_of(Precision::storage)) + double(size_of(Precision::grad)) + master_bytes() +
           Optimizer::state_bytes;
  }

  recipe::Recipe recipe_;
};

}  // namespace ft
