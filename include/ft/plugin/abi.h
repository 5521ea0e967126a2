/* The ftrun plugin boundary, in plain C.
 *
 * A plugin is a shared library that exports one entry point under the Boost.DLL
 * alias FT_PLUGIN_ENTRY. The entry point takes nothing and returns a pointer to
 * a static ft_plugin_descriptor. Only C types and function pointers cross the
 * boundary; no exception does (every function pointer below catches
 * everything and reports failure through its return value).
 *
 * Compatibility: the host refuses a plugin unless abi_version and toolchain are
 * exactly its own. The first two fields of ft_plugin_descriptor keep their
 * place in every ABI version, so a host can always read them to explain a
 * refusal. Any other change to this file increments FT_PLUGIN_ABI_VERSION.
 */
#ifndef FT_PLUGIN_ABI_H
#define FT_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#define FT_PLUGIN_ABI_VERSION 10u
#define FT_PLUGIN_ENTRY "ft_plugin_v"

#ifdef __cplusplus
extern "C" {
#endif

/* Receives text written by a plugin function: plan lines, or a one-line error. */
typedef void (*ft_write_fn)(void* context, const char* text);

/* One Trainer<Model, Precision, Parallelism, Optimizer, Adapter, Device> a plugin offers. */
typedef struct ft_trainer_factory {
  const char* model;        /* policy names as recipes spell them, e.g. "llama" */
  const char* precision;    /* "bf16-mixed" */
  const char* parallelism;  /* "single" */
  const char* optimizer;    /* "adamw" */
  const char* adapter;      /* "lora" */
  const char* device;       /* where it trains: "cpu", "cuda" */
  const char* type_name;    /* the C++ type, for people */
  const char* const* hf_architectures; /* config.json architectures the model reads */
  size_t hf_architecture_count;
  /* The plugin's own description of this combination, which plan and train
   * read from `self`: the host passes it along and never reads it. */
  const void* implementation;
  /* Checks a resolved recipe (TOML text) for this combination and writes the
   * plan. Returns 0 on success; otherwise writes one line saying why not. */
  int (*plan)(const struct ft_trainer_factory* self, const char* recipe_toml, ft_write_fn write, void* context);
  /* Runs the resolved recipe to the end; progress and metrics go to stdout,
   * stderr and the run's output_dir. Returns 0 when done, 1 when training
   * stopped (e.g. the loss diverged), 2 for bad input, 3 when an allocation
   * failed (out of memory), 4 when a signal stopped it after it saved a
   * checkpoint (a host that predates 4 reports it as a failure); on
   * non-zero, writes one line saying why. */
  int (*train)(const struct ft_trainer_factory* self, const char* recipe_toml, ft_write_fn write, void* context);
} ft_trainer_factory;

/* One sequence's part of an inference step. */
typedef struct ft_sequence_step {
  int64_t slot;           /* a key/value cache slot the host acquired */
  const int32_t* tokens;  /* its new tokens, at the slot's positions from its length on */
  size_t token_count;
  int32_t adapter;        /* one of the engine's adapters, -1 for none */
  int32_t every_position; /* nonzero: logits after each new token, not only the last (a prompt's log-probabilities) */
} ft_sequence_step;

/* An inference engine a plugin offers: one model family in one element type
 * on one device, with its adapters and key/value cache slots. A function that
 * returns int returns 0 on success; otherwise it writes one line saying why and
 * returns 2 for bad input (a file, an adapter, a token), 3 when an allocation
 * failed (out of memory), 1 for any other failure. Before reserve() there are
 * no slots: cache_bytes is 0 and acquire -1. */
typedef struct ft_engine_factory {
  const char* model;      /* "llama" */
  const char* dtype;      /* element type of weights and activations: "float32", "bfloat16" */
  const char* device;     /* where it runs: "cpu", "cuda" */
  const char* type_name;  /* the C++ type, for people */
  const char* const* hf_architectures; /* config.json architectures the model reads */
  size_t hf_architecture_count;
  /* Loads an HF model directory onto the device into *engine, as options_json says (ft/infer/load_options.hpp:
   * "{}" loads the files as they are; "quantize" quantizes a whole-precision base to 4 bits as it loads). */
  int (*open)(const char* model_dir, const char* options_json, void** engine, ft_write_fn write, void* context);
  void (*close)(void* engine);
  /* Loads a PEFT adapter directory; *index receives its index. */
  int (*load_adapter)(void* engine, const char* adapter_dir, int32_t* index, ft_write_fn write, void* context);
  int64_t (*vocab_size)(void* engine);
  /* Positions a sequence's first step adds before its prompt (prompt tuning). */
  int64_t (*virtual_tokens)(void* engine, int32_t adapter);
  /* Makes `slots` caches of max_model_len positions each in place of any (none held). */
  int (*reserve)(void* engine, int64_t max_model_len, int64_t slots, ft_write_fn write, void* context);
  uint64_t (*cache_bytes)(void* engine); /* one slot's */
  int64_t (*acquire)(void* engine);      /* a free slot with an empty cache, or -1 when all are held */
  int (*release)(void* engine, int64_t slot, ft_write_fn write, void* context); /* a slot acquire() gave */
  /* Runs one step; logits receive each sequence's next-token logits, [vocab_size] after its last new token, or
   * [token_count, vocab_size] after each of them where every_position is set, sequence after sequence. */
  int (*step)(void* engine, const ft_sequence_step* steps, size_t count, float* logits, ft_write_fn write,
              void* context);
  /* Scores `count` tokens through the whole model, without caches (ftrun eval): documents laid end to end in
   * one row (documents[i] numbers token i's document, attention and positions stay within it; null: one
   * document) with HF's labels (null: the ids; -100 is not scored; a position's target is the next label in
   * its document). Sets *loss_sum, the summed cross-entropy over scored targets, and *scored, their count;
   * logits [logits_count, vocab_size] receive the next-token logits at positions logits_at[0..logits_count). */
  int (*score)(void* engine, const int32_t* ids, const int32_t* labels, const int32_t* documents, size_t count,
               const int64_t* logits_at, size_t logits_count, double* loss_sum, int64_t* scored, float* logits,
               ft_write_fn write, void* context);
} ft_engine_factory;

/* A model family a plugin brings, for ftrun's own commands (init, convert,
 * schedule, estimate), which read a model without training or serving it. */
typedef struct ft_model_family {
  const char* name;       /* "llama" */
  const char* type_name;  /* the C++ type, for people */
  const char* const* hf_architectures; /* config.json architectures it reads */
  size_t hf_architecture_count;
  const char* const* linear_modules;   /* its linear projections, as PEFT's target_modules names them */
  size_t linear_module_count;
  const char* const* default_lora_targets; /* what LoRA adapts when a recipe names nothing */
  size_t default_lora_target_count;
  /* Reads config.json in model_dir and writes the model's description, the
   * family's ModelSpec as JSON (ft/models/spec_json.hpp, whose form belongs
   * to this ABI version). Returns 0; otherwise writes one line saying why
   * and returns 2 for bad input, 1 for any other failure. */
  int (*describe)(const char* model_dir, ft_write_fn write, void* context);
} ft_model_family;

/* An optimizer a plugin brings, as it declares itself (ft/optim/optimizer.hpp):
 * what ftrun's memory estimate reads of it. */
typedef struct ft_optimizer_policy {
  const char* name;       /* "adamw" */
  const char* type_name;  /* the C++ type, for people */
  double state_bytes;     /* state per trainable parameter under an f32 master */
  int elementwise_state;  /* 1: one value per parameter (halved in bf16 under a bf16 master) */
} ft_optimizer_policy;

typedef struct ft_plugin_descriptor {
  uint32_t abi_version;    /* FT_PLUGIN_ABI_VERSION the plugin was built with; always first */
  const char* toolchain;   /* FT_TOOLCHAIN_ID the plugin was built with; always second */
  const char* name;        /* plugin name, e.g. "ft-llama" */
  const char* version;     /* plugin version */
  const char* ft_version;  /* version of the ft headers it was built against */
  size_t factory_count;
  const ft_trainer_factory* factories;
  size_t engine_count;
  const ft_engine_factory* engines;
  size_t family_count;    /* every model family among its factories */
  const ft_model_family* families;
  size_t optimizer_count; /* every optimizer among its factories */
  const ft_optimizer_policy* optimizers;
} ft_plugin_descriptor;

typedef const ft_plugin_descriptor* (*ft_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* FT_PLUGIN_ABI_H */
