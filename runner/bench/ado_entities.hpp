#pragma once
// The entity names of ado's SFTTrainer actuator in a benchmark grid, translated to recipe keys.
// A grid written with ado's names (its entity space as ado's actuator lists
// it) runs unchanged; each name means what fms-hf-tuning makes of it:
//
//   model_name              model.path, or the path the grid's [models] gives it
//   model_max_length        data.max_seq_length
//   number_gpus             launch.nproc ranks; 0: one process on the CPU
//   number_nodes            the machines the ranks span (launch.hostfile must
//                           name them), number_gpus / number_nodes on each
//                           (mpirun --map-by ppr:N:node); HYBRID_SHARD groups a
//                           node's ranks
//   batch_size              the effective batch, over max(1, number_gpus) ranks
//   gpu_model               the GPU a CUDA point needs (Kubernetes' label, e.g.
//                           NVIDIA-A100-80GB-PCIe); a CPU point only records it
//   torch_dtype, bf16       strategy.precision: float32 is fp32, or bf16-mixed
//                           with bf16 = True; bfloat16 is bf16-true; float16 is
//                           fp16-mixed (ado's float16 experiments pass
//                           --fp16; ft has no training in pure float16)
//   optim                   strategy.optimizer (adamw_torch: adamw,
//                           adamw_bnb_8bit: adamw8bit, adamw_torch_4bit:
//                           adamw4bit, adafactor, sgd, lion_32bit: lion ...)
//   peft_method             strategy.adapter: none is full, lora, pt is prompt,
//                           gptq-lora is lora over a GPTQ model
//   r, lora_alpha           lora.r, lora.alpha
//   distributed_backend     FSDP: fsdp_sharding_strategy's parallelism; DDP or
//                           None: ddp (single with one rank)
//   fsdp_sharding_strategy  FULL_SHARD zero3, SHARD_GRAD_OP zero2, NO_SHARD ddp,
//                           HYBRID_SHARD zero3 and HYBRID_SHARD_ZERO2 zero2
//                           sharded within a node (launch.shard_group_size);
//                           also by number (1-5) or by ft's name
//   fast_moe                strategy.expert_parallel (0: none)
//   fast_kernels            ft's loss is always the chunked one and its norms
//                           and RoPE always its own kernels: recorded only
//   dataset_text_field      data.text_field
//   dataset_id              data.train = "artificial:<dataset_id>"
//   gradient_checkpointing  train.gradient_checkpointing: every_block or none
//   gradient_accumulation_steps, max_steps, num_train_epochs,
//   stop_after_seconds, auto_stop_method      train.*
//
// A value outside ado's vocabulary is an error when the grid is read; a
// value in it that breaks one of ado's validity rules, or that ft cannot
// run, makes the point invalid, with the reason in ado's words.
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ft/recipe/recipe.hpp>

namespace ftrun {

using Entity = std::vector<std::pair<std::string, std::string>>;

struct EntityContext {
  const ft::recipe::Recipe* base = nullptr;  // the base recipe with the grid's fixed recipe keys
  // The base recipe with more assignments; throws ft::Error for a recipe that refuses them.
  std::function<ft::recipe::Recipe(const std::vector<std::string>&)> load;
  std::map<std::string, std::string> models;  // model_name -> path ([models] of the grid)
};

struct Translation {
  std::vector<std::string> sets;  // "section.key=value" assignments
  std::string invalid;            // why the point cannot run; empty when it can
};

bool is_ado_entity(const std::string& key);

// The assignments the value of one of ado's names stands for when it depends on no
// other name (empty for the names that do); throws ft::Error saying what the
// name accepts when the value is outside ado's vocabulary.
std::vector<std::string> entity_assignments(const std::string& key, const std::string& value,
                                            const EntityContext& context);

// A point's names (ado's and recipe keys) as recipe assignments, with
// ado's validity rules applied; throws ft::Error as entity_assignments.
Translation translate_entity(const Entity& entity, const EntityContext& context);

}  // namespace ftrun
