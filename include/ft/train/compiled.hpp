#pragma once
// What ft compiles once, into its engine library (ft::engine, src/engine/cpu.cpp),
// for each of the stock precisions' dtypes: the training engine, the makers
// of every stock parallelism, adapter and optimizer runtime, and the
// inference engine. A stock plugin names hundreds of Trainers but only four
// engines per device; without this each plugin, each test program and each
// third party's plugin generated those engines again.
//
// A target that links ft::engine (ft_add_plugin does) is built with
// FT_COMPILED_ENGINE, so the declarations below (`extern template`) make it
// call the library's copies; a target that links ft::ft alone generates
// them itself, header-only as before. Dtypes or policies outside these lists
// are generated where they are named, either way.
//
// The CUDA plugin still generates its engines itself: its source needs nvcc
// anyway (device::Cuda's header holds kernels), and nvcc's cost per source is
// high, so a CUDA library plus the plugin cost more than the plugin alone
// (docs/design.md, Build).
//
// The list is a macro over EXTERN (`extern` in a declaration, empty in the
// source that compiles it) and the device, used inside namespace ft.
#include <filesystem>
#include <memory>

#include "ft/adapters/adapter.hpp"
#include "ft/adapters/full_runtime.hpp"
#include "ft/adapters/lora_runtime.hpp"
#include "ft/adapters/prompt_runtime.hpp"
#include "ft/core/half.hpp"
#include "ft/device/cpu.hpp"
#include "ft/infer/served.hpp"
#include "ft/optim/adafactor_runtime.hpp"
#include "ft/optim/quantized_adamw_runtime.hpp"
#include "ft/optim/elementwise_runtimes.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/data_parallel.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline.hpp"
#include "ft/train/assembly.hpp"
#include "ft/train/engine.hpp"
#include "ft/train/makers.hpp"

// One stock parallelism's runtime for storage T and master M on D.
#define FT_COMPILED_PARALLELISM(EXTERN, P, T, M, D)                                                              \
  EXTERN template std::unique_ptr<parallel::Runtime<T, M, D>> train::make_parallel_runtime<P, T, M, D>( \
      comm::Communicator&, const recipe::Recipe&);

// The training engine for storage T and master M on D, and every stock parallelism's runtime.
#define FT_COMPILED_TRAINING(EXTERN, T, M, D)                                                  \
  EXTERN template void train::run_engine<T, M, D>(recipe::Recipe, train::Policies<T, M, D>); \
  EXTERN template void train::run_assembly<T, M, D>(const train::Assembly&, recipe::Recipe); \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::Single, T, M, D)                                   \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::DDP, T, M, D)                                      \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::ZeRO<1>, T, M, D)                                  \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::ZeRO<2>, T, M, D)                                  \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::ZeRO<3>, T, M, D)                                  \
  FT_COMPILED_PARALLELISM(EXTERN, parallel::Pipeline, T, M, D)

// Every stock adapter's runtime over weights of T on D.
#define FT_COMPILED_ADAPTERS(EXTERN, T, D)                                                                         \
  EXTERN template std::unique_ptr<adapters::Runtime<T, D>> train::make_adapter_runtime<adapters::Full, T, D>(    \
      const recipe::Recipe&);                                                                                      \
  EXTERN template std::unique_ptr<adapters::Runtime<T, D>> train::make_adapter_runtime<adapters::LoRA, T, D>(    \
      const recipe::Recipe&);                                                                                      \
  EXTERN template std::unique_ptr<adapters::Runtime<T, D>> train::make_adapter_runtime<adapters::Prompt, T, D>(  \
      const recipe::Recipe&);

// One stock optimizer updating M, stepping on D.
#define FT_COMPILED_OPTIMIZER(EXTERN, O, M, D)                                                           \
  EXTERN template std::unique_ptr<optim::Runtime<M>> train::make_optimizer_runtime<O, M, D>( \
      const std::vector<models::ParameterEntry>&, index_t, const recipe::TrainSection&);

// Every stock optimizer updating M, stepping on D.
#define FT_COMPILED_OPTIMIZERS(EXTERN, M, D)         \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::SGD, M, D)       \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::AdamW, M, D)     \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::Adafactor, M, D) \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::AdamW8bit, M, D) \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::AdamW4bit, M, D) \
  FT_COMPILED_OPTIMIZER(EXTERN, optim::Lion, M, D)

// The inference engine over weights of T on D.
#define FT_COMPILED_SERVING(EXTERN, T, D) \
  EXTERN template std::unique_ptr<infer::Served> infer::open_served<T, D>(models::ModelSpec, const std::filesystem::path&,   \
                                                                       const infer::LoadOptions&);

// Everything on D: the engine for each stock precision's (storage, master)
// pair (fp32, bf16-true, bf16-mixed, fp16-mixed), the adapters over each
// storage dtype, the optimizers over each master dtype, the inference engine
// in float32 and bfloat16. An optimizer on a device also steps on the host
// (strategy.optimizer_offload): the host's copies are the CPU's list.
#define FT_COMPILED(EXTERN, D)                  \
  FT_COMPILED_TRAINING(EXTERN, float, float, D) \
  FT_COMPILED_TRAINING(EXTERN, bf16, bf16, D)   \
  FT_COMPILED_TRAINING(EXTERN, bf16, float, D)  \
  FT_COMPILED_TRAINING(EXTERN, f16, float, D)   \
  FT_COMPILED_ADAPTERS(EXTERN, float, D)        \
  FT_COMPILED_ADAPTERS(EXTERN, bf16, D)         \
  FT_COMPILED_ADAPTERS(EXTERN, f16, D)          \
  FT_COMPILED_OPTIMIZERS(EXTERN, float, D)      \
  FT_COMPILED_OPTIMIZERS(EXTERN, bf16, D)       \
  FT_COMPILED_SERVING(EXTERN, float, D)         \
  FT_COMPILED_SERVING(EXTERN, bf16, D)

#ifdef FT_COMPILED_ENGINE
namespace ft {
FT_COMPILED(extern, device::Cpu)
}  // namespace ft
#endif
