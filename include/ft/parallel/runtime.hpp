#pragma once
// The parallelism policy at run time: what the training engine asks of
// whatever spreads a run over ranks. It owns the trainable state (values'
// master copies, step gradients, optimizer state) as this rank holds it, and
// says through models::StageHooks what happens around each stage of a
// forward and backward (gather parameters, reduce gradients).
//
// One optimizer step, as the engine drives it:
//   begin_step()
//   forward_backward(the step's micro-batches): the runtime's schedule
//   scale_grads() (loss scaling), clip(), step()
// With the optimizer fused into backward there is one micro-batch, and the
// runtime steps each stage as soon as its gradient is reduced.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ft/adapters/runtime.hpp"
#include "ft/comm/communicator.hpp"
#include "ft/data/batches.hpp"
#include "ft/models/transformer.hpp"
#include "ft/optim/runtime.hpp"

namespace ft::parallel {

// What a data-parallel policy shards (see parallelism.hpp).
struct Sharding {
  bool optimizer_state = false, gradients = false, parameters = false;
  int group_size = 0;  // shard within groups of this many ranks, replicate across them; 0: every rank

  template <class Policy>
  static constexpr Sharding of() {
    return {Policy::shards_optimizer_state, Policy::shards_gradients, Policy::shards_parameters};
  }
};

// Makes the optimizer of (a rank's part of) a flat buffer from the entries
// that part holds. by_element: the optimizer's state is one value per
// parameter, so a buffer may be cut anywhere; otherwise cuts fall between
// tensors (Adafactor factors matrices, 8-bit AdamW quantises per tensor).
// make_on_host makes the same optimizer with its state in host memory,
// stepping there (strategy.optimizer_offload on a device).
template <class M>
struct OptimizerMaker {
  using Make =
      std::function<std::unique_ptr<optim::Runtime<M>>(const std::vector<models::ParameterEntry>&, index_t)>;
  Make make, make_on_host;
  bool by_element = false;
};

// Where a micro-batch stands in its optimizer step.
struct MicroBatchRole {
  bool last = true;  // the step's gradient is complete after this one
  // Fused into backward: step each stage at this rate once its gradient is complete.
  bool fused = false;
  double lr = 0;
  std::int64_t optimizer_step = 0;
};

// The forward and backward work of one optimizer step.
struct StepWork {
  std::int64_t step = 1;                   // the step's number, as metrics count them (from 1)
  std::span<const models::Batch> batches;  // this rank's micro-batches, in order
  double token_count = 1;                  // the loss gradient's divisor (models::HeadOptions)
  models::SequenceObjective* objective = nullptr;  // scores whole sequences (preference tuning); null: tokens
  // Called before each forward and each backward of micro-batch k: the
  // adapter's dropout follows the micro-batch, whichever order they run in.
  std::function<void(std::size_t k)> begin_micro_batch;
  // The optimizer fused into backward (one micro-batch): its rate and step.
  bool fused = false;
  double lr = 0;
  std::int64_t optimizer_step = 0;
};

template <element T, class M, class Device = device::Cpu>
class Runtime {
public:
  using Model = models::Transformer<T, Device>;

  virtual ~Runtime() = default;

  virtual comm::Communicator& comm() = 0;
  // Before the model is built from its reading of config.json: what this
  // rank's copy holds of the whole (with expert parallelism, its run of
  // each sparse layer's experts).
  virtual void shape(models::ModelSpec& spec) const { (void)spec; }
  // Once, on the model built unallocated (models::unallocated), before its
  // weights load: allocates what this rank keeps of each stage and says how
  // a load treats each stage (models::StageLoading), so that loading the
  // model, at setup or when resuming, never puts more of it on this rank.
  // `optimizer` says how the trained buffers will be cut.
  virtual void place(Model& model, const OptimizerMaker<M>& optimizer) = 0;
  // Once, after the adapter has attached: the buffers that train.
  virtual void attach(std::vector<adapters::Trainable<T, Device>> trainables, bool fused) = 0;
  virtual index_t trainable_parameters() const = 0;

  // Which share of the data this rank reads, and the ranks that read the
  // others: token counts are summed over that group.
  virtual data::Shard data_shard() const = 0;
  virtual comm::Communicator& data_group() = 0;

  virtual void begin_step() = 0;
  // Forward and backward of the step's micro-batches, in this runtime's
  // schedule; the gradients are reduced into the step's. Returns the summed
  // loss this rank computed.
  virtual double forward_backward(const StepWork& work) = 0;
  // Sum of squares of the gradients stepped inside backward (fused), over all ranks.
  virtual double fused_squares() = 0;
  // Multiplies the step's gradient (undoing a loss scale).
  virtual void scale_grads(double factor) = 0;
  // The global gradient norm before clipping; clips to max_norm when > 0.
  virtual double clip(double max_norm) = 0;
  virtual void step(double lr, std::int64_t optimizer_step) = 0;

  // Forward only: the summed loss this rank computed (0 on a rank without
  // the head), of tokens or, given an objective, of whole sequences.
  virtual double evaluate(const models::Batch& batch, models::SequenceObjective* objective) = 0;
  // Hooks around a forward on this rank of the whole model (the preview):
  // each stage's values are there while it runs. Every rank runs it.
  virtual models::StageHooks evaluation_hooks() = 0;
  // Runs `use` while the model's whole values are there (ZeRO-3 and a
  // pipeline put them together first: call it on every rank). What `use`
  // writes into them (a LoRA merged at the end) is not kept in the shards.
  virtual void with_whole_model(const std::function<void()>& use) = 0;
  // After values were loaded into the model or an adapter (resuming):
  // refreshes what derives from them (master weights).
  virtual void values_loaded() = 0;
  // Runs `use` on rank 0, which reads the model's values through
  // Transformer::read_hf_rows (writing an HF model); the other ranks serve it.
  // Under ZeRO-3 each stage is gathered when first read and dropped when the
  // next is, so no rank ever holds the whole model. Call it on every rank.
  virtual void read_model_on_rank0(const std::function<void()>& use) = 0;
  // Bytes this rank holds for parameters, gradients, master weights and
  // optimizer state between steps.
  virtual std::size_t state_bytes() const = 0;
  // Every array of optimizer state and master weights this rank holds, by
  // name; a rank's range of a per-element array says which range it is.
  virtual std::vector<optim::StateArray> state_arrays() = 0;
  // Which part of the optimizer state this rank writes to a checkpoint:
  // nothing (writes false: another rank holds the same), the whole of it
  // (parts 0: optimizer.safetensors), or part `part` of `parts`.
  struct StateShard {
    bool writes = true;
    int part = 0, parts = 0;
  };
  virtual StateShard state_shard() const = 0;
  // The share of the last step this rank spent waiting for a peer's
  // activations or gradients (a pipeline's bubble); negative: not measured.
  virtual double bubble_fraction() const { return -1; }
};

}  // namespace ft::parallel
