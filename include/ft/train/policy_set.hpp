#pragma once
// A Trainer's policies as values: their names, flags and sizes, and the two
// functions of the family and the adapter that the checks need.
//
// A stock plugin instantiates hundreds of Trainers, and what a Trainer says
// about itself (its type name, its refusals of a recipe, its plan) depends
// only on these values. Written once over a PolicySet, that code is compiled
// once per plugin instead of once per Trainer.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

#include "ft/comm/job.hpp"
#include "ft/core/dtype.hpp"
#include "ft/core/error.hpp"
#include "ft/models/weight_map.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline_timeline.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/four_bit_base.hpp"

namespace ft::train {

struct PolicySet {
  std::string_view model, model_type;
  models::ModelSpec (*read_model)(const std::filesystem::path& dir);  // the family's reader of config.json

  std::string_view precision, precision_type;
  DType storage, master;
  bool loss_scaling;

  std::string_view parallelism, parallelism_type;
  bool multi_rank, shards_optimizer_state, shards_gradients, shards_parameters, pipelined;

  std::string_view optimizer, optimizer_type;
  double (*optimizer_state_bytes)(const recipe::TrainSection&);  // per parameter under an f32 master
  bool optimizer_elementwise_state;

  std::string_view adapter, adapter_type;
  bool trains_base_weights;
  std::string (*describe_adapter)(const recipe::Recipe&);

  std::string_view device, device_type;
  bool on_host;

  // Bytes per trainable parameter as the engine holds them (parallel/trainable.hpp).
  struct Bytes {
    double weight, gradient;  // in storage; the gradient is each micro-batch's
    double step_gradient;     // in master, where the step's gradient is a buffer of its own
    double master;            // none when the optimizer updates the weights themselves
    double optimizer;
    constexpr double total() const { return weight + gradient + step_gradient + master + optimizer; }
  };
  // The step's gradient has its own buffer under a master copy or sharded
  // gradients, unless the optimizer is fused into backward (it then steps
  // each block from the micro-batch's gradient). Per-element optimizer
  // state is kept in bf16 under a bf16 master (optim/runtime.hpp).
  Bytes bytes_per_trainable(const recipe::TrainSection& t) const {
    const bool fused_optimizer = t.fuse_optimizer_with_backward;
    const bool has_master = master != storage;
    const double step = (has_master || shards_gradients) && !fused_optimizer ? double(size_of(master)) : 0.0;
    const double state_scale = optimizer_elementwise_state && master == DType::bf16 ? 0.5 : 1.0;
    return {double(size_of(storage)), double(size_of(storage)), step, has_master ? double(size_of(master)) : 0.0,
            optimizer_state_bytes(t) * state_scale};
  }
};

// The C++ type `ft::Trainer<...>` with `parallelism` for the parallelism's
// part; the device is named when `with_device`.
inline std::string trainer_type_name(const PolicySet& s, std::string_view parallelism, bool with_device) {
  std::string out = "ft::Trainer<";
  for (std::string_view part : {s.model_type, s.precision_type, parallelism, s.optimizer_type, s.adapter_type,
                                with_device ? s.device_type : std::string_view()}) {
    if (part.empty()) continue;
    if (out.back() != '<') out += ", ";
    out += part;
  }
  return out + ">";
}

// The ranks of the job: the recipe's, or those the launcher started.
inline std::int64_t job_ranks(const recipe::Recipe& r) {
  return std::max<std::int64_t>(r.launch.nproc, comm::job_place().size);
}

// The pipeline's partition of the model read from config.json; throws when
// the pipeline does not fit the model or the schedule the micro-batches.
inline parallel::PipePartition pipeline_partition(const PolicySet& s, const recipe::Recipe& r) {
  return parallel::plan_pipeline(r, s.read_model(r.model.path).config, job_ranks(r));
}

// Throws ft::Error when the recipe's options do not make sense together with
// the policies; nothing is allocated before.
inline void check_recipe(const PolicySet& s, const recipe::Recipe& r) {
  const std::int64_t ranks = job_ranks(r);
  const std::string parallelism(s.parallelism);
  if (!s.multi_rank && ranks > 1)
    throw Error("parallelism " + parallelism + " runs one process, but the job has " + std::to_string(ranks) +
                " ranks; choose ddp, zero1, zero2 or zero3 for several ranks");
  if (r.launch.shard_group_size > 0 && !s.shards_optimizer_state)
    throw Error("launch.shard_group_size = " + std::to_string(r.launch.shard_group_size) + " groups the ranks that "
                "share sharded state, but parallelism " + parallelism +
                " shards nothing; use zero1, zero2 or zero3, or set it to 0");
  if (r.launch.shard_group_size > 0 && ranks % r.launch.shard_group_size != 0)
    throw Error("launch.shard_group_size = " + std::to_string(r.launch.shard_group_size) + " does not divide the " +
                std::to_string(ranks) + " ranks of the job into groups; allowed: a divisor of " + std::to_string(ranks));
  const bool pairs = r.train.objective != "sft";  // dpo, simpo and orpo train on preference pairs
  if (pairs != (r.data.format == "preference"))
    throw Error(pairs ? "train.objective = \"" + r.train.objective + "\" trains on preference pairs, but data.format is \"" +
                            r.data.format + "\", which has none; allowed: data.format = \"preference\" (rows with "
                            "prompt, chosen and rejected)"
                      : "data.format = \"preference\" holds preference pairs, which train.objective = \"sft\" does "
                        "not train on; allowed: train.objective = \"dpo\", \"simpo\" or \"orpo\"");
  if (r.data.format == "preference" && r.data.packing)
    throw Error("data.packing packs rows into shared sequences, but a preference pair's sequences are scored as "
                "wholes; set data.packing = false");
  if (r.train.fuse_optimizer_with_backward && r.train.gradient_accumulation_steps > 1)
    throw Error("train.fuse_optimizer_with_backward steps each block inside backward, so gradients "
                "cannot accumulate over gradient_accumulation_steps = " +
                std::to_string(r.train.gradient_accumulation_steps) + "; set one of them back");
  if (r.train.fuse_optimizer_with_backward && s.shards_gradients)
    throw Error("train.fuse_optimizer_with_backward needs whole gradients, but parallelism " + parallelism +
                " shards them; use zero1 or ddp");
  if (s.loss_scaling && r.train.fuse_optimizer_with_backward)
    throw Error("strategy.precision = \"" + std::string(s.precision) +
                "\" scales the loss and may have to skip a step after an overflow, which an optimizer fused "
                "into backward has already applied; use bf16-mixed, or set train.fuse_optimizer_with_backward = false");
  if (s.pipelined) {
    if (r.train.fuse_optimizer_with_backward)
      throw Error("train.fuse_optimizer_with_backward steps each block inside its backward, but a pipeline runs "
                  "several micro-batches' backwards per step; set it to false");
    if (r.pipeline.schedule == "zero_bubble" && r.train.gradient_checkpointing != "none")
      throw Error("pipeline.schedule = \"zero_bubble\" defers weight gradients, which need the activations that "
                  "train.gradient_checkpointing drops; use 1f1b with checkpointing, or set it to \"none\"");
    if (s.read_model(r.model.path).config.moe.aux_loss_coef > 0)
      throw Error(r.model.path + "/config.json adds the load-balancing loss (output_router_logits), which "
                  "counts every sparse layer's routing, but a pipeline puts the layers on different ranks; set "
                  "output_router_logits to false there, or choose ddp or zero1/2/3");
    pipeline_partition(s, r);
  } else if (r.pipeline.ranks != 0 || r.pipeline.microbatches != 0 || r.pipeline.stages_per_rank != 1) {
    throw Error("the recipe's [pipeline] section sets pipeline ranks, micro-batches or stages, but "
                "strategy.parallelism is " + parallelism + "; set it to \"pipeline\"");
  }
  if (const std::int64_t P = r.strategy.expert_parallel; P > 1) {
    const std::string key = "strategy.expert_parallel = " + std::to_string(P);
    const index_t E = s.read_model(r.model.path).config.moe.experts;
    if (E == 0)
      throw Error(key + " splits a mixture of experts' experts over ranks, but " + r.model.path +
                  " has no experts; set it to 1");
    if (E % P != 0)
      throw Error(key + " does not divide the " + std::to_string(E) + " experts of each sparse layer; allowed: a "
                  "divisor of " + std::to_string(E));
    if (ranks % P != 0)
      throw Error(key + " does not divide the job's " + std::to_string(ranks) + " ranks into expert groups; allowed: "
                  "a divisor of " + std::to_string(ranks));
    if (parallelism != "ddp" && parallelism != "zero1" && parallelism != "zero2" && parallelism != "zero3")
      throw Error(key + " needs parallelism ddp, zero1, zero2 or zero3 (each expert's state lives on the ranks that "
                  "hold it), not " + parallelism);
    if (r.launch.shard_group_size > 0)
      throw Error(key + " groups the ranks by experts, which launch.shard_group_size would cut again; set it to 0");
  }
  if (r.train.fuse_optimizer_with_backward && r.train.max_grad_norm > 0)
    throw Error("train.fuse_optimizer_with_backward steps each block before the global gradient norm is known, "
                "so it cannot clip; set train.max_grad_norm = 0");
  if (const FourBitBase base = four_bit_base(r); base.any()) {
    const std::string what = base.named();
    if (s.trains_base_weights)
      throw Error(what + " is frozen, but strategy.adapter = \"" + std::string(s.adapter) +
                  "\" trains the base weights; train an adapter over it (lora or prompt), as QLoRA does");
    if (r.strategy.expert_parallel > 1)
      throw Error(what + " does not split its experts over ranks yet; set strategy.expert_parallel = 1");
    if (r.lora.save_merged)
      throw Error("lora.save_merged would merge the adapter into " + what +
                  "; save the adapter and merge it into the whole-precision model (ftrun convert --merge-lora)");
    const std::string compute = r.model.bnb_4bit_compute_dtype;
    const std::string storage = s.storage == DType::f32 ? "float32" : s.storage == DType::bf16 ? "bfloat16" : "float16";
    if (compute != "auto" && compute != storage)
      throw Error("model.bnb_4bit_compute_dtype = \"" + compute + "\", but strategy.precision = \"" +
                  std::string(s.precision) + "\" runs products in " + storage + "; set it to \"auto\" or \"" +
                  storage + "\"");
  }
}

// What a Trainer of these policies will hold, per parameter, and how it
// runs, in the words of the policies.
inline std::string describe_plan(const PolicySet& s, const recipe::Recipe& r) {
  std::ostringstream os;
  os << "trainer      " << trainer_type_name(s, s.parallelism_type, !s.on_host) << "\n";
  if (!s.on_host) os << "device       " << s.device << ": weights, activations, gradients and optimizer state in its memory\n";
  os << "model        " << s.model << " from " << r.model.path;
  if (const FourBitBase base = four_bit_base(r); base.any())
    os << ", linear weights " << (base.gptq ? "quantized by GPTQ (" : "in 4 bits (") << base.describe() << ")";
  os << "\n";
  os << "precision    " << s.precision << ": weights " << name_of(s.storage) << ", matmul inputs "
     << name_of(s.storage) << " (f32 accumulate), gradients " << name_of(s.storage) << " per micro-batch";
  if (s.master != s.storage) os << " and " << name_of(s.master) << " per step, master " << name_of(s.master);
  else os << ", no master copy";
  os << (s.loss_scaling ? ", dynamic loss scale" : "") << "\n";
  os << "parallelism  " << s.parallelism << ": " << r.launch.nproc << " rank(s)";
  if (s.shards_parameters)
    os << ", parameters, gradients and optimizer state sharded";
  else if (s.shards_gradients)
    os << ", gradients and optimizer state sharded";
  else if (s.shards_optimizer_state)
    os << ", optimizer state sharded";
  else if (s.pipelined)
    os << ", stages cut over pipeline ranks";
  else if (s.multi_rank)
    os << ", gradients all-reduced";
  if (r.strategy.expert_parallel > 1)
    os << "; experts split over groups of " << r.strategy.expert_parallel << " ranks (all-to-all)";
  os << "\n";
  if (s.pipelined) os << parallel::describe_pipeline(r, pipeline_partition(s, r), job_ranks(r));
  os << "optimizer    " << s.optimizer << ", lr " << r.train.learning_rate << " (" << r.train.lr_scheduler_type
     << "), weight decay " << r.train.weight_decay << "\n";
  os << "adapter      " << s.describe_adapter(r) << "\n";
  const PolicySet::Bytes b = s.bytes_per_trainable(r.train);
  os << "bytes        per trainable parameter: " << b.total() << " (weight " << b.weight << ", gradient "
     << b.gradient << ", step gradient " << b.step_gradient << ", master " << b.master << ", optimizer "
     << b.optimizer << ")" << (s.multi_rank ? " before sharding" : "") << "\n";
  // A pipeline's ranks share each micro-batch; only its replicas take rows of their own.
  const std::int64_t ranks = job_ranks(r);
  const std::int64_t pipeline_ranks = r.pipeline.ranks > 0 ? r.pipeline.ranks : ranks;
  os << "batch        " << r.train.per_device_train_batch_size << " rows x "
     << (s.pipelined ? recipe::pipeline_microbatches(r) : r.train.gradient_accumulation_steps) << " micro-batches x "
     << (s.pipelined ? std::to_string(ranks / pipeline_ranks) + " replica(s)" : std::to_string(ranks) + " rank(s)")
     << " of " << r.data.max_seq_length << " tokens" << (r.data.packing ? " (packed)" : "") << "\n";
  os << "memory       checkpointing " << r.train.gradient_checkpointing
     << (r.train.activation_offloading ? ", activations offloaded to host" : "")
     << (r.train.fuse_optimizer_with_backward ? ", optimizer fused into backward" : "") << "\n";
  return os.str();
}

}  // namespace ft::train
