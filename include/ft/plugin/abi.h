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

#define FT_PLUGIN_ABI_VERSION 3u
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
  /* Checks a resolved recipe (TOML text) for this combination and writes the
   * plan. Returns 0 on success; otherwise writes one line saying why not. */
  int (*plan)(const char* recipe_toml, ft_write_fn write, void* context);
  /* Runs the resolved recipe to the end; progress and metrics go to stdout,
   * stderr and the run's output_dir. Returns 0 when done, 1 when training
   * stopped (e.g. the loss diverged), 2 for bad input, 3 when an allocation
   * failed (out of memory); on non-zero, writes one line saying why. */
  int (*train)(const char* recipe_toml, ft_write_fn write, void* context);
} ft_trainer_factory;

typedef struct ft_plugin_descriptor {
  uint32_t abi_version;    /* FT_PLUGIN_ABI_VERSION the plugin was built with; always first */
  const char* toolchain;   /* FT_TOOLCHAIN_ID the plugin was built with; always second */
  const char* name;        /* plugin name, e.g. "ft-llama" */
  const char* version;     /* plugin version */
  const char* ft_version;  /* version of the ft headers it was built against */
  size_t factory_count;
  const ft_trainer_factory* factories;
} ft_plugin_descriptor;

typedef const ft_plugin_descriptor* (*ft_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* FT_PLUGIN_ABI_H */
