#pragma once
// The training recipe: what `ftrun train recipe.toml` reads. Key names follow
// HF TrainingArguments and PEFT where they mean the same thing, so a user of
// those stacks recognises every one. Each key is declared once, with its
// default, what it accepts and a one-line description (see binding.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/recipe/binding.hpp"
#include "ft/recipe/check.hpp"
#include "ft/train/stopping.hpp"

namespace ft::recipe {

using Int = std::int64_t;

// The names of ft's own policies of one kind, "fp32 | bf16-true | ...", for
// the recipe's help: read from the one list (ft/stock.hpp) by the recipe
// library (src/recipe/stock_names.cpp), so this header includes no policy.
enum class PolicyKind { family, precision, parallelism, optimizer, adapter };
const std::string& stock_names(PolicyKind kind);

struct ModelSection {
  std::string path;
  std::string family = "auto";
  std::string dtype = "auto";
  // A 4-bit frozen base (QLoRA): ft's short names, and transformers'
  // BitsAndBytesConfig names for the same choices.
  std::string quantize = "none";
  bool load_in_4bit = false;
  std::string bnb_4bit_quant_type = "nf4";
  bool bnb_4bit_use_double_quant = false;
  std::string bnb_4bit_compute_dtype = "auto";
  std::string bnb_4bit_quant_storage = "uint8";
  Int quant_block_size = 64;

  template <class V>
  void fields(V& v) {
    v.field("path", path,
            existing_directory("an HF model directory (config.json, *.safetensors, tokenizer.json)",
                               "config.json"),
            "the model to fine-tune", Required::yes);
    v.field("family", family, policy_name(),
            "model family: " + stock_names(PolicyKind::family) +
                ", or a plugin's; \"auto\" takes it from config.json's architectures");
    v.field("dtype", dtype, one_of({"auto", "fp32", "bf16", "fp16"}),
            "storage dtype of frozen weights; \"auto\" follows the precision");
    v.field("quantize", quantize, one_of({"none", "nf4", "fp4", "bnb.nf4", "bnb.fp4"}),
            "keep the base's linear weights in 4 bits as bitsandbytes quantizes them (QLoRA): NormalFloat4 or "
            "FP4; the embeddings, norms and head stay whole. A model whose files are already 4-bit needs nothing");
    v.field("load_in_4bit", load_in_4bit, Check<bool>{},
            "transformers' name: quantize to bnb_4bit_quant_type (the same as quantize = that type)");
    v.field("bnb_4bit_quant_type", bnb_4bit_quant_type, one_of({"nf4", "fp4"}), "the 4-bit type load_in_4bit takes");
    v.field("bnb_4bit_use_double_quant", bnb_4bit_use_double_quant, Check<bool>{},
            "quantize the absmax of each block again (8 bits in blocks of 256): about 0.4 bit a weight less");
    v.field("bnb_4bit_compute_dtype", bnb_4bit_compute_dtype, one_of({"auto", "float32", "bfloat16", "float16"}),
            "the dtype products run in: the precision's (\"auto\"); another value must name it");
    v.field("bnb_4bit_quant_storage", bnb_4bit_quant_storage, one_of({"uint8"}),
            "the dtype packed codes are written in (files in other storage dtypes are read too)");
    v.field("quant_block_size", quant_block_size,
            Check<Int>{[](const Int& b) -> std::optional<std::string> {
                         for (Int allowed : {32, 64, 128, 256, 512, 1024, 2048, 4096})
                           if (b == allowed) return {};
                         return std::to_string(b) + " is not a block size bitsandbytes allows";
                       },
                       "one of 32, 64, 128, 256, 512, 1024, 2048, 4096"},
            "weights sharing one absmax (bitsandbytes' blocksize)");
  }
};

// The five compile-time policies of the Trainer, by name. The names a build
// offers are those of its plugins (`ftrun plugins`).
struct StrategySection {
  std::string precision = "fp32";
  std::string parallelism = "single";
  std::string optimizer = "adamw";
  std::string adapter = "lora";
  std::string device = "cpu";
  bool optimizer_offload = false;
  Int expert_parallel = 1;

  template <class V>
  void fields(V& v) {
    v.field("precision", precision, policy_name(), stock_names(PolicyKind::precision));
    v.field("parallelism", parallelism, policy_name(),
            stock_names(PolicyKind::parallelism) +
                " (FSDP's no_shard, shard_grad_op, full_shard name ddp, zero2, zero3)");
    v.field("optimizer", optimizer, policy_name(), stock_names(PolicyKind::optimizer));
    v.field("adapter", adapter, policy_name(), stock_names(PolicyKind::adapter));
    v.field("device", device, policy_name(),
            "cpu | cuda: where the model, activations, gradients and optimizer state live; cuda needs a build with "
            "nvcc (`ftrun plugins` lists what runs where)");
    v.field("optimizer_offload", optimizer_offload, Check<bool>{},
            "master weights and optimizer state in host memory, stepped there (DeepSpeed's offload_optimizer); "
            "the CPU backend keeps them there already");
    v.field("expert_parallel", expert_parallel, at_least<Int>(1),
            "split each mixture-of-experts layer's experts over groups of this many ranks, tokens travelling to "
            "their experts by all-to-all (DeepSpeed-MoE's ep_size); the groups replicate them as data parallelism");
  }
};

struct LoraSection {
  Int r = 8;
  double alpha = 16;
  double dropout = 0.0;
  std::vector<std::string> target_modules;
  std::vector<std::string> target_parameters;
  NamedValues<Int> rank_pattern;
  NamedValues<double> alpha_pattern;
  bool use_rslora = false;
  bool save_merged = false;
  std::string init_from;

  template <class V>
  void fields(V& v) {
    v.field("r", r, at_least<Int>(1), "rank of the low-rank update");
    v.field("alpha", alpha, greater_than(0.0), "the update is scaled by alpha / r (alpha / sqrt(r) with use_rslora)");
    v.field("dropout", dropout, between(0.0, 0.99), "dropout on the adapter's input");
    v.field("target_modules", target_modules, Check<std::vector<std::string>>{},
            "projections to adapt, as PEFT names them, or \"all-linear\"; [] for the family's default");
    v.field("target_parameters", target_parameters, Check<std::vector<std::string>>{},
            "a mixture of experts' parameters to adapt, as PEFT's target_parameters names them: the stacked "
            "experts \"gate_up_proj\" and \"down_proj\" (each expert its own A and B), the router \"gate.weight\"");
    v.field("rank_pattern", rank_pattern, patterns_of(at_least<Int>(1)),
            "modules with their own rank, as PEFT's rank_pattern: each key a regular expression matching a "
            "module's or parameter's whole name or its end after a dot, e.g. { \"q_proj\" = 16 }; a module two "
            "keys name with different values is an error");
    v.field("alpha_pattern", alpha_pattern, patterns_of(greater_than(0.0)),
            "modules with their own alpha, as PEFT's alpha_pattern (keys as rank_pattern's)");
    v.field("use_rslora", use_rslora, Check<bool>{},
            "rank-stabilised LoRA: scale the update by alpha / sqrt(r), as PEFT's use_rslora");
    v.field("save_merged", save_merged, Check<bool>{},
            "also save the base model with the adapter merged in (HF layout) in <output_dir>/merged");
    v.field("init_from", init_from, Check<std::string>{},
            "a PEFT LoRA adapter to start from instead of a fresh one (its directory, a run's checkpoint or "
            "finished output_dir); r, alpha, use_rslora, dropout, target_modules and the patterns left unset take "
            "its values; "
            "\"\" for none");
  }
};

struct PromptTuningSection {
  Int num_virtual_tokens = 20;
  std::string init_text;
  std::string init_from;

  template <class V>
  void fields(V& v) {
    v.field("num_virtual_tokens", num_virtual_tokens, at_least<Int>(1),
            "trainable embeddings placed before every input");
    v.field("init_text", init_text, Check<std::string>{},
            "initialise them from this text's tokens; \"\" for random");
    v.field("init_from", init_from, Check<std::string>{},
            "a PEFT prompt-tuning adapter to start from (its directory, a run's checkpoint or finished "
            "output_dir); num_virtual_tokens left unset takes its value; \"\" for none");
  }
};

struct DataSection {
  std::string train;
  std::string validation;
  double validation_split = 0.0;
  std::string format = "alpaca";
  std::string response_template;
  std::string instruction_template;
  std::string instruction_field = "instruction", input_field = "input", output_field = "output";
  std::string messages_field = "messages", text_field = "text";
  std::string input_ids_field = "input_ids", labels_field = "labels";
  std::string prompt_field = "prompt", chosen_field = "chosen", rejected_field = "rejected";
  Int max_seq_length = 512;
  bool packing = false;
  std::string on_bad_row = "fail";
  std::string cache_dir;

  template <class V>
  void fields(V& v) {
    v.field("train", train, dataset_source(), "training data", Required::yes);
    v.field("validation", validation, dataset_source(true), "validation data");
    v.field("validation_split", validation_split, between(0.0, 0.5),
            "fraction of train held out for validation when no validation file is given");
    v.field("format", format, one_of({"alpaca", "guanaco", "chat", "text", "tokens", "preference"}),
            "how rows become prompts and responses; preference: TRL's prompt / chosen / rejected rows, for "
            "train.objective = \"dpo\"");
    v.field("response_template", response_template, Check<std::string>{},
            "text rows: only what follows this marker is scored, e.g. \"\\n### Response:\" (guanaco: \"### Assistant:\")");
    v.field("instruction_template", instruction_template, Check<std::string>{},
            "text rows, multi-turn: a scored response ends where this marker begins (guanaco: \"### Human:\")");
    const Check<std::string> key = not_empty("a JSON key");
    v.field("instruction_field", instruction_field, key, "alpaca: the instruction's key");
    v.field("input_field", input_field, key, "alpaca: the optional input's key");
    v.field("output_field", output_field, key, "alpaca: the response's key");
    v.field("messages_field", messages_field, key, "chat: the key of the list of {role, content} messages");
    v.field("text_field", text_field, key, "text and guanaco: the text's key (fms-hf-tuning's dataset_text_field)");
    v.field("input_ids_field", input_ids_field, key, "tokens: the token ids' key");
    v.field("labels_field", labels_field, key, "tokens: the optional labels' key");
    v.field("prompt_field", prompt_field, key, "preference: the prompt's key (optional with messages)");
    v.field("chosen_field", chosen_field, key, "preference: the preferred completion's key");
    v.field("rejected_field", rejected_field, key, "preference: the dispreferred completion's key");
    v.field("max_seq_length", max_seq_length, at_least<Int>(8),
            "tokens per row after packing or padding (TRL's max_length for preference rows: each sequence is cut "
            "to it, keeping its start)");
    v.field("packing", packing, Check<bool>{}, "pack rows into full sequences with document masks");
    v.field("on_bad_row", on_bad_row, one_of({"fail", "skip"}),
            "stop at the first malformed row, or skip and count them");
    v.field("cache_dir", cache_dir, Check<std::string>{},
            "where ftrun prepare / train keep the tokenised data; \"\" for <output_dir>/data-cache");
  }
};

struct TrainSection {
  std::string objective = "sft";
  Int per_device_train_batch_size = 1;
  Int per_device_eval_batch_size = 0;
  Int gradient_accumulation_steps = 1;
  double learning_rate = 2e-4;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double momentum = 0.0;
  bool nesterov = false;
  double adafactor_beta1 = 0.0;
  std::string lr_scheduler_type = "linear";
  double warmup_ratio = 0.0;
  Int warmup_steps = 0;
  double max_grad_norm = 1.0;
  double num_train_epochs = 1.0;
  Int max_steps = -1;
  double stop_after_seconds = -1;
  std::string auto_stop_method = "none";
  std::string gradient_checkpointing = "none";
  bool activation_offloading = false;
  bool fuse_optimizer_with_backward = false;
  Int logging_steps = 1;
  Int eval_steps = 0;
  Int initial_scale_power = 16;

  template <class V>
  void fields(V& v) {
    v.field("objective", objective, one_of({"sft", "dpo", "simpo", "orpo"}),
            "sft: the completion tokens' cross-entropy; over data.format = \"preference\" pairs (options in "
            "[preference]): dpo, direct preference optimization against the model as the run starts, as TRL's "
            "DPOTrainer; simpo, SimPO's length-normalised margin without a reference, as TRL's CPOTrainer with "
            "loss_type simpo; orpo, the chosen completions' cross-entropy plus an odds-ratio term, as TRL's "
            "ORPOTrainer");
    v.field("per_device_train_batch_size", per_device_train_batch_size, at_least<Int>(1),
            "rows per micro-batch on each device (preference pairs under dpo, simpo and orpo)");
    v.field("per_device_eval_batch_size", per_device_eval_batch_size, at_least<Int>(0),
            "rows per evaluation batch; 0 uses the training batch size");
    v.field("gradient_accumulation_steps", gradient_accumulation_steps, at_least<Int>(1),
            "micro-batches per optimizer step; the loss is normalised over all their target tokens");
    v.field("learning_rate", learning_rate, greater_than(0.0), "peak learning rate");
    v.field("weight_decay", weight_decay, at_least(0.0), "decoupled weight decay");
    v.field("adam_beta1", adam_beta1, between(0.0, 0.999999), "first-moment decay (also Lion's beta1)");
    v.field("adam_beta2", adam_beta2, between(0.0, 0.999999), "second-moment decay (also Lion's beta2)");
    v.field("adam_epsilon", adam_epsilon, greater_than(0.0), "added to the second moment's root");
    v.field("momentum", momentum, between(0.0, 0.999999), "SGD momentum; 0 keeps no state");
    v.field("nesterov", nesterov, Check<bool>{}, "SGD with Nesterov momentum");
    v.field("adafactor_beta1", adafactor_beta1, between(0.0, 0.999999),
            "Adafactor's first-moment decay; 0 keeps no first moment (the momentum-free, low-memory mode)");
    v.field("lr_scheduler_type", lr_scheduler_type, one_of({"constant", "constant_with_warmup", "linear", "cosine"}),
            "learning-rate schedule after warmup (constant ignores the warmup, as HF's does)");
    v.field("warmup_ratio", warmup_ratio, between(0.0, 1.0), "warmup as a fraction of all steps");
    v.field("warmup_steps", warmup_steps, at_least<Int>(0), "warmup in steps; overrides warmup_ratio when > 0");
    v.field("max_grad_norm", max_grad_norm, at_least(0.0), "clip the global gradient norm; 0 disables");
    v.field("num_train_epochs", num_train_epochs, greater_than(0.0), "passes over the training data");
    v.field("max_steps", max_steps, unset_or_at_least<Int>(1), "optimizer steps; overrides num_train_epochs");
    v.field("stop_after_seconds", stop_after_seconds, unset_or_at_least(0.0),
            "stop after the first step that ends this many seconds into training");
    v.field("auto_stop_method", auto_stop_method, auto_stop_choice(),
            "stop once throughput is measured: warm-up seconds left out, then the longer of a time and a step count");
    v.field("gradient_checkpointing", gradient_checkpointing, checkpointing_choice(),
            "recompute blocks in backward instead of keeping their activations");
    v.field("activation_offloading", activation_offloading, Check<bool>{},
            "keep saved block inputs in host memory");
    v.field("fuse_optimizer_with_backward", fuse_optimizer_with_backward, Check<bool>{},
            "step each block's parameters as soon as its gradients exist, then free them");
    v.field("logging_steps", logging_steps, at_least<Int>(1), "log metrics every this many steps");
    v.field("eval_steps", eval_steps, at_least<Int>(0), "evaluate every this many steps; 0 only at the end");
    v.field("initial_scale_power", initial_scale_power, between<Int>(0, 64),
            "fp16 loss scaling starts at 2^this (DeepSpeed's name; torch's GradScaler starts at 2^16)");
  }

  static Check<std::string> auto_stop_choice() {
    return {[](const std::string& s) -> std::optional<std::string> {
              if (s == "none" || train::parse_auto_stop(s)) return {};
              return detail::show(s) + " is not a choice";
            },
            "none, or warmup_<W>s_stable_<S>s_or_<N>_steps (ado's auto_stop_method WARMUP_60S_STABLE_120S_OR_10_STEPS)"};
  }

  // "none", "every_block", or "every_K" (every K-th block, K >= 2).
  static Check<std::string> checkpointing_choice() {
    return {[](const std::string& s) -> std::optional<std::string> {
              if (s == "none" || s == "every_block") return {};
              constexpr std::string_view every = "every_";
              if (s.rfind(every, 0) == 0 && s.size() > every.size()) {
                std::string k = s.substr(every.size());
                if (std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                    k.size() < 6 && std::stoi(k) >= 2)
                  return {};
              }
              return detail::show(s) + " is not a choice";
            },
            "none, every_block, or every_K for every K-th block (K >= 2)"};
  }
};

// Preference tuning (train.objective = "dpo", "simpo" or "orpo"), with the
// names of TRL's DPOConfig, CPOConfig and ORPOConfig. DPO's reference model
// is the model as the run starts (for an adapter: the base with the adapter
// as it starts); its log-probabilities of every pair are computed once
// before the first step (TRL's precompute_ref_log_probs), so training holds
// one model. SimPO and ORPO need no reference.
struct PreferenceSection {
  double beta = 0.1;
  std::string loss_type = "sigmoid";
  double label_smoothing = 0.0;
  double simpo_gamma = 0.5;
  double cpo_alpha = 0.0;

  template <class V>
  void fields(V& v) {
    v.field("beta", beta, greater_than(0.0),
            "dpo: how far the policy may move from the reference, higher stays closer (IPO's tau for loss_type "
            "ipo); simpo: the scale of the length-normalised margin; orpo: the weight of the odds-ratio term "
            "(ORPO's lambda)");
    v.field("loss_type", loss_type, one_of({"sigmoid", "hinge", "ipo", "robust", "sigmoid_norm"}),
            "dpo only: sigmoid: DPO; hinge: SLiC; ipo: IPO (log-ratios per completion token); robust: DPO with "
            "flipped-label noise label_smoothing; sigmoid_norm: DPO on log-ratios per completion token");
    v.field("label_smoothing", label_smoothing, between(0.0, 0.499999),
            "dpo with loss_type robust, and simpo: the probability that a pair's preference is flipped");
    v.field("simpo_gamma", simpo_gamma, at_least(0.0),
            "simpo: the target margin between the chosen and rejected completions' mean log-probabilities, "
            "times beta");
    v.field("cpo_alpha", cpo_alpha, at_least(0.0),
            "simpo: the weight of the chosen completions' cross-entropy added to the loss (CPO's behaviour "
            "cloning term); 0 is SimPO's loss (TRL's CPOConfig defaults to 1, CPO-SimPO)");
  }
};

struct CheckpointSection {
  std::string save_strategy = "steps";
  Int save_steps = 0;
  Int save_total_limit = 3;
  std::string resume = "none";

  template <class V>
  void fields(V& v) {
    v.field("save_strategy", save_strategy, one_of({"steps", "no"}),
            "steps: checkpoints every save_steps and at the end, then the final model; no: none of them (benchmarks)");
    v.field("save_steps", save_steps, at_least<Int>(0), "save every this many steps; 0 only at the end");
    v.field("save_total_limit", save_total_limit, at_least<Int>(1), "checkpoints kept, newest first");
    v.field("resume", resume, not_empty("none, latest, auto, or a checkpoint directory"),
            "where to continue from; auto: latest when there is one, else start");
  }
};

// A prompt answered greedily before and after training, to see what changed.
struct PreviewSection {
  std::string prompt;
  Int max_new_tokens = 48;

  template <class V>
  void fields(V& v) {
    v.field("prompt", prompt, Check<std::string>{}, "the user's message; \"\" shows nothing");
    v.field("max_new_tokens", max_new_tokens, at_least<Int>(1), "longest answer, in tokens");
  }
};

// Pipeline parallelism (strategy.parallelism = "pipeline").
struct PipelineSection {
  Int ranks = 0;
  std::string schedule = "1f1b";
  Int microbatches = 0;
  Int stages_per_rank = 1;
  std::string data_parallel = "ddp";
  bool timeline = false;

  template <class V>
  void fields(V& v) {
    v.field("ranks", ranks, at_least<Int>(0),
            "pipeline ranks; launch.nproc / ranks data-parallel replicas of the pipe; 0: every rank");
    v.field("schedule", schedule, one_of({"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"}),
            "the order of forwards and backwards on each rank");
    v.field("microbatches", microbatches, at_least<Int>(0),
            "micro-batches per step (each per_device_train_batch_size rows); 0: train.gradient_accumulation_steps");
    v.field("stages_per_rank", stages_per_rank, at_least<Int>(1),
            "chunks of the model per rank (virtual stages); interleaved_1f1b needs 2 or more");
    v.field("data_parallel", data_parallel, one_of({"ddp", "zero1"}),
            "how the replicas of a pipeline rank combine: all-reduce gradients, or also shard the optimizer state");
    v.field("timeline", timeline, Check<bool>{},
            "record each rank's passes, sends and waits of every step in <output_dir>/timeline/ "
            "(ftrun schedule --measured draws them)");
  }
};

struct LaunchSection {
  Int nproc = 1;
  std::string hostfile;
  double collective_timeout = 300;
  Int shard_group_size = 0;
  std::string memory_limit;
  bool memory_check = true;
  std::vector<std::string> mpirun_args;
  std::string devices;

  template <class V>
  void fields(V& v) {
    v.field("nproc", nproc, at_least<Int>(1),
            "processes (ranks) of the job; >1 starts mpirun, unless ftrun already runs under mpirun or srun");
    v.field("hostfile", hostfile, existing_file("an MPI hostfile (one \"host slots=N\" per line)", true),
            "machines the job spans (mpirun --hostfile); \"\" for this machine only");
    v.field("collective_timeout", collective_timeout, greater_than(0.0),
            "seconds a collective may wait for the other ranks before the job stops, naming the rank at fault");
    v.field("shard_group_size", shard_group_size, at_least<Int>(0),
            "zero1-3 shard within groups of this many consecutive ranks (a node's) and replicate across groups "
            "(FSDP's HYBRID_SHARD); 0 shards over every rank");
    v.field("memory_limit", memory_limit, byte_size_or_empty(),
            "memory each rank may use, e.g. \"16GB\": a run whose estimate (ftrun estimate) is larger is refused, "
            "and ft's allocator fails past it; \"\" for the memory this machine has available");
    v.field("memory_check", memory_check, Check<bool>{},
            "refuse before loading anything a run whose estimated peak exceeds the memory available");
    v.field("mpirun_args", mpirun_args, Check<std::vector<std::string>>{},
            "more arguments for the mpirun that launch.nproc starts, before the program, e.g. [\"--mca\", "
            "\"btl_tcp_if_include\", \"eth0\"]; NCCL_*, UCX_*, FI_* and CUDA_* variables are passed on by themselves");
    v.field("devices", devices, device_list_or_empty(),
            "the GPUs the job uses on each machine (CUDA_VISIBLE_DEVICES for every rank): local rank r takes the "
            "r-th, modulo their count; \"\" for every GPU");
  }
};

struct Recipe {
  std::string output_dir = "runs/ft";
  Int seed = 42;
  ModelSection model;
  StrategySection strategy;
  LoraSection lora;
  PromptTuningSection prompt_tuning;
  DataSection data;
  TrainSection train;
  PreferenceSection preference;
  CheckpointSection checkpoint;
  PreviewSection preview;
  PipelineSection pipeline;
  LaunchSection launch;

  template <class V>
  void fields(V& v) {
    v.field("output_dir", output_dir, not_empty("a directory path"),
            "checkpoints, metrics and logs go here");
    v.field("seed", seed, at_least<Int>(0), "seeds data order, dropout and adapter init");
    v.section("model", model);
    v.section("strategy", strategy);
    v.section("lora", lora);
    v.section("prompt_tuning", prompt_tuning);
    v.section("data", data);
    v.section("train", train);
    v.section("preference", preference);
    v.section("checkpoint", checkpoint);
    v.section("preview", preview);
    v.section("pipeline", pipeline);
    v.section("launch", launch);
  }
};

// A pipeline step's micro-batches: pipeline.microbatches, or the step's
// accumulated micro-batches when it is 0 (both set differently is an error).
inline Int pipeline_microbatches(const Recipe& r) {
  const Int m = r.pipeline.microbatches, accumulation = r.train.gradient_accumulation_steps;
  if (m == 0) return accumulation;
  if (accumulation != 1 && accumulation != m)
    throw Error("pipeline.microbatches = " + std::to_string(m) + " and train.gradient_accumulation_steps = " +
                std::to_string(accumulation) + " both say how many micro-batches a step has; set one of them");
  return m;
}

}  // namespace ft::recipe
