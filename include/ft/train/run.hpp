#pragma once
// What a training run holds, in one place. The Trainer's five policies
// arrive resolved (Policies): the storage dtype T and the optimizer's dtype M
// from the precision policy, and from the others the piece each owns: the
// model family's reader of config.json, the adapter's runtime, the
// parallelism's runtime, the optimizer's maker. One engine, written once,
// therefore serves every combination, and a plugin instantiates it once per
// (T, M) pair rather than once per combination.
//
// The parts of the engine work on a Run, each in its header:
//   setup.hpp          the data, the model, the adapter, the trainable state
//   step.hpp           one optimizer step (loss scaling, clipping)
//   evaluation.hpp     the validation loss
//   checkpointing.hpp  checkpoints written and read back
//   engine.hpp         the loop, metrics and the result
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/adapters/runtime.hpp"
#include "ft/comm/communicator.hpp"
#include "ft/data/batches.hpp"
#include "ft/text/model_text.hpp"
#include "ft/models/transformer.hpp"
#include "ft/parallel/runtime.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/preference.hpp"

namespace ft::train {

// Device: where the model, its buffers and the trainable state live (device/cpu.hpp).
template <element T, class M, class Device = device::Cpu>
struct Policies {
  std::string trainer;              // the Trainer's C++ type, for logs and checkpoints
  // The Trainer's type with any parallelism: what a checkpoint must match to
  // resume (optimizer state re-shards between parallelisms).
  std::string resumable_as;
  std::string adapter_description;  // "lora: r 16, alpha 32, ...", for the run's header
  bool loss_scaling = false;        // fp16: dynamic loss scale, overflowing steps skipped
  std::function<models::ModelSpec(const std::filesystem::path&)> model;  // the family reads config.json
  bool trains_base_weights = true;  // the model keeps gradients
  std::function<std::unique_ptr<adapters::Runtime<T, Device>>(const recipe::Recipe&)> adapter;
  std::function<std::unique_ptr<parallel::Runtime<T, M, Device>>(comm::Communicator&, const recipe::Recipe&)> parallel;
  parallel::OptimizerMaker<M> optimizer;
};

// torch's GradScaler: a non-finite gradient halves the scale and skips the
// step; 2000 good steps in a row double it.
struct LossScale {
  bool enabled = false;
  double value = 1;
  std::int64_t good_steps = 0;
};

template <element T, class M, class Device = device::Cpu>
struct Run {
  using device_type = Device;
  recipe::Recipe recipe;
  Policies<T, M, Device> policies;
  std::filesystem::path out;
  comm::Communicator* comm = nullptr;

  text::ModelText text;
  std::string data_cache;  // where the tokenised data came from, for the run's header
  std::unique_ptr<data::BatchPlan> train_plan, eval_plan;
  std::int64_t train_rows = 0, skipped_rows = 0, total_steps = 0;

  std::unique_ptr<models::Transformer<T, Device>> model;
  std::unique_ptr<adapters::Runtime<T, Device>> adapter;
  std::unique_ptr<parallel::Runtime<T, M, Device>> parallel;
  nlohmann::ordered_json fingerprint;  // of the model's config and tokenizer, checked on resume
  // A preference objective (dpo, simpo, orpo), and DPO's reference log-probabilities of every example.
  std::unique_ptr<PreferenceObjective> preference;
  ReferenceLogps reference;
  double flops_per_token = 0, peak_flops = 1;

  // What the run is doing ("step 12"): collectives and out-of-memory reports name it.
  std::string phase = "setup";
  void enter(std::string what) {
    phase = what;
    if (comm) comm->set_phase(std::move(what));
  }

  // What a checkpoint restores besides the weights and optimizer state.
  LossScale loss_scale;
  std::int64_t optimizer_step = 0;
  std::string last_checkpoint = "none";
};

}  // namespace ft::train
