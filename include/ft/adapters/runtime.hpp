#pragma once
// The adapter policy at run time: what the training engine asks of whatever
// decides which parameters train. Each adapter policy names its runtime
// (`Adapter::runtime<T>`): FullRuntime, LoraRuntime, PromptRuntime, or a
// third party's own class deriving from this one, which then trains through
// the same engine as ft's own adapters.
//
// Its life in a run: attach() once to the loaded model as this rank holds it
// (a pipeline rank has only its stages' values, ZeRO-3 no whole stage
// between uses), returning the flat buffers that train; set_training()
// before each micro-batch and before evaluation; save()/load() for
// checkpoints, and load() from initial_weights() when a new run starts from
// an adapter trained before; save_final() at the end.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/text/model_text.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/transformer.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::adapters {

// A flat buffer a run trains, and the model stage whose backward completes
// its gradient (the index models::StageHooks use).
template <element T, class Device = device::Cpu>
struct Trainable {
  std::string name;  // unique in the run: names its optimizer state in checkpoints
  index_t stage;
  models::ParameterBuffer<T, typename Device::Memory>* params;
};

// Device: where the model runs (device/cpu.hpp); the buffers live there.
template <element T, class Device = device::Cpu>
class Runtime {
public:
  virtual ~Runtime() = default;

  // Attaches to the loaded model (which keeps gradients only when the policy
  // trains base weights) and returns the buffers that train.
  virtual std::vector<Trainable<T, Device>> attach(models::Transformer<T, Device>& model,
                                                   const text::ModelText& text) = 0;
  // Placeholder positions the batch plan puts before every row (prompt tuning).
  virtual index_t virtual_tokens() const { return 0; }
  // Before a training micro-batch (key: its position in the data stream, for
  // dropout masks) or before evaluation (training false).
  virtual void set_training(bool training, std::uint64_t key) {
    (void)training;
    (void)key;
  }
  // Parameters it adds to the matrix products of a token's forward (LoRA's
  // matrices), for FLOPs.
  virtual double added_matmul_parameters() const { return 0; }
  // The trained parameters into a checkpoint directory, and back.
  virtual void save(const std::filesystem::path& dir) = 0;
  virtual void load(const std::filesystem::path& dir) = 0;
  // Where a new run's trained parameters start from instead of their own
  // initialisation: a directory load() reads (an adapter trained before,
  // [lora] init_from), or none. A resumed run starts from its checkpoint.
  virtual std::filesystem::path initial_weights() const { return {}; }
  // What the run leaves in output_dir when it ends; returns one line per
  // thing written ("adapter (PEFT) in ...").
  virtual std::vector<std::string> save_final(const std::filesystem::path& output_dir) = 0;
  // save_final writes into the model's values (a merged LoRA), so it needs
  // the whole model at once rather than one stage after another.
  virtual bool final_save_changes_model() const { return false; }
};

}  // namespace ft::adapters
