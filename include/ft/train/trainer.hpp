#pragma once
// Trainer<Model, Precision, Parallelism, Optimizer, Adapter>: the one type that
// both doors into ft lead to. A C++ user names the five policies as types; a
// plugin instantiates the combinations it offers and ftrun picks one by the
// names in a recipe.
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
#include "ft/core/error.hpp"
#include "ft/models/family.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/precision/precision.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/engine.hpp"

namespace ft {

template <model_family Model, precision_policy Precision, parallelism_policy Parallelism,
          optimizer_policy Optimizer, adapter_policy Adapter>
class Trainer {
public:
  using model_type = Model;              // the network
  using precision_type = Precision;      // dtypes of weights, compute, gradients, master copy
  using parallelism_type = Parallelism;  // how stages and buffers map to ranks
  using optimizer_type = Optimizer;      // state layout and update of a flat shard
  using adapter_type = Adapter;          // which parameters train

  static std::string type_name() {
    std::string s = "ft::Trainer<";
    for (std::string_view part : {Model::type_name, Precision::type_name, Parallelism::type_name,
                                  Optimizer::type_name, Adapter::type_name}) {
      if (s.back() != '<') s += ", ";
      s += part;
    }
    return s + ">";
  }

  explicit Trainer(recipe::Recipe recipe) : recipe_(std::move(recipe)) { validate(); }

  const recipe::Recipe& recipe() const { return recipe_; }

  // What this Trainer will hold, per parameter, and how it runs.
  std::string plan() const {
    std::ostringstream os;
    const auto& r = recipe_;
    os << "trainer      " << type_name() << "\n";
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
    else if (Parallelism::multi_rank)
      os << ", gradients all-reduced";
    os << "\n";
    os << "optimizer    " << Optimizer::name << ", lr " << r.train.learning_rate << " ("
       << r.train.lr_scheduler_type << "), weight decay " << r.train.weight_decay << "\n";
    os << "adapter      " << Adapter::name << adapter_detail() << "\n";
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
    recipe::Recipe r = recipe_;
    if constexpr (std::is_same_v<Adapter, adapters::LoRA>) r.lora.target_modules = lora_targets();
    train::EngineSetup setup{type_name(), std::string(Adapter::name) + adapter_detail(), adapter_kind(),
                             Precision::loss_scaling};
    train::Engine<Storage, Master> engine(r, setup, [train = r.train](const auto& entries, index_t size) {
      return train::make_parameter_optimizer<Optimizer, Master>(entries, size, train);
    });
    engine.run();
  }

private:
  static constexpr train::AdapterKind adapter_kind() {
    if constexpr (std::is_same_v<Adapter, adapters::LoRA>) return train::AdapterKind::lora;
    else if constexpr (std::is_same_v<Adapter, adapters::Prompt>) return train::AdapterKind::prompt;
    else return train::AdapterKind::full;
  }

  void validate() const {
    const auto& r = recipe_;
    if (!Parallelism::multi_rank && r.launch.nproc > 1)
      throw Error("parallelism " + std::string(Parallelism::name) + " runs one process, but launch.nproc = " +
                  std::to_string(r.launch.nproc) + "; choose ddp, zero1, zero2 or zero3 for several ranks");
    if (r.train.fuse_optimizer_with_backward && r.train.gradient_accumulation_steps > 1)
      throw Error("train.fuse_optimizer_with_backward steps each block inside backward, so gradients "
                  "cannot accumulate over gradient_accumulation_steps = " +
                  std::to_string(r.train.gradient_accumulation_steps) + "; set one of them back");
    if (r.train.fuse_optimizer_with_backward && Parallelism::shards_gradients)
      throw Error("train.fuse_optimizer_with_backward needs whole gradients, but parallelism " +
                  std::string(Parallelism::name) + " shards them; use zero1 or ddp");
    if constexpr (std::is_same_v<Adapter, adapters::LoRA>) check_lora_targets();
    if (Precision::loss_scaling && r.train.fuse_optimizer_with_backward)
      throw Error("strategy.precision = \"" + std::string(Precision::name) +
                  "\" scales the loss and may have to skip a step after an overflow, which an optimizer fused "
                  "into backward has already applied; use bf16-mixed, or set train.fuse_optimizer_with_backward = false");
    if (r.train.fuse_optimizer_with_backward && r.train.max_grad_norm > 0)
      throw Error("train.fuse_optimizer_with_backward steps each block before the global gradient norm is known, "
                  "so it cannot clip; set train.max_grad_norm = 0");
    if (std::is_same_v<Adapter, adapters::Prompt> && r.data.packing)
      throw Error("strategy.adapter = \"prompt\" puts virtual tokens before every row, and data.packing puts "
                  "several documents in one row; set data.packing = false");
  }

  // Every target must name one of the family's linear projections, so that a
  // typo cannot leave a LoRA run training nothing.
  void check_lora_targets() const {
    const auto targets = lora_targets();
    if (targets.size() == 1 && targets[0] == "all-linear") return;
    for (const std::string& t : targets) {
      if (std::ranges::find(Model::linear_modules, std::string_view(t)) != Model::linear_modules.end())
        continue;
      std::string allowed;
      for (std::string_view m : Model::linear_modules) allowed += (allowed.empty() ? "" : ", ") + std::string(m);
      throw Error("lora.target_modules: \"" + t + "\" matches no module of the " + std::string(Model::name) +
                  " family; allowed: " + allowed + ", or \"all-linear\"");
    }
  }

  // The recipe's targets, or the family's default when it names none.
  std::vector<std::string> lora_targets() const {
    if (!recipe_.lora.target_modules.empty()) return recipe_.lora.target_modules;
    return {Model::default_lora_targets.begin(), Model::default_lora_targets.end()};
  }

  std::string adapter_detail() const {
    const auto& r = recipe_;
    std::ostringstream os;
    if constexpr (std::is_same_v<Adapter, adapters::LoRA>) {
      os << ": r " << r.lora.r << ", alpha " << r.lora.alpha << ", dropout " << r.lora.dropout << " on";
      for (const auto& t : lora_targets()) os << ' ' << t;
    } else if constexpr (std::is_same_v<Adapter, adapters::Prompt>) {
      os << ": " << r.prompt_tuning.num_virtual_tokens << " virtual tokens";
      if (!r.prompt_tuning.init_text.empty()) os << " from \"" << r.prompt_tuning.init_text << "\"";
    } else {
      os << ": every weight trains";
    }
    return os.str();
  }

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
