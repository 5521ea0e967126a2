#pragma once
// Pipeline parallelism: the model's stages are cut into chunks, each
// pipeline rank runs its chunks (pipeline_schedule.hpp) on every
// micro-batch of the step in the schedule's order, and the residual stream
// travels between ranks: activations forward, their gradients backward
// (point-to-point, tagged by chunk). Each micro-batch in flight has its own
// models::Context, so a rank may hold several.
//
// Ranks: launch.nproc = pipeline.ranks x replicas. World rank w is pipeline
// rank w / replicas and replica w % replicas; the replicas of a pipeline
// rank (the same stages) form a data-parallel group: DDP all-reduces their
// gradients, ZeRO-1 shards their optimizer state (DataParallel over that
// group, told which stages this rank holds). Every rank of a replica's pipe
// reads the same micro-batches; replicas read different ones.
//
// The loss is computed on the rank with the head and normalised by the whole
// step's scored tokens, as in one process. A rank keeps only its own
// stages' values and gradients; with tied embeddings the last rank also
// keeps the embedding table for the LM head: its part of the table's
// gradient goes to the first rank after backward, and the stepped table
// comes back after the step (Megatron-LM does the same).
//
// A rank allocates and loads only what it keeps, at setup and when resuming.
// The whole model (a preview, writing the model) is put together stage by
// stage: a stage's owner broadcasts it to the pipe when asked.
//
// With a timeline file each rank records every step's passes, sends and
// waits (pipeline_timeline.hpp) in wall-clock seconds, so the ranks' lines
// of one step line up on one machine (and on NTP-synchronised nodes).
//
// On a device (device/) the stages, contexts and stepping stay in its
// memory, and what travels point to point (the stream between chunks, the
// tied table and its gradient) goes through a host copy over the host's
// communicator: messages keep their tags, which NCCL's send and receive do
// not have (they match by order alone), and a blocking receive on one rank
// never waits behind its own queued send.
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/parallel/data_parallel.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/parallel/pipeline_schedule.hpp"
#include "ft/parallel/pipeline_timeline.hpp"
#include "ft/parallel/runtime.hpp"
#include "ft/parallel/stage_reads.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::parallel {

struct PipelineOptions {
  int ranks = 0;  // pipeline ranks; 0: every rank of the job
  int stages_per_rank = 1;
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int microbatches = 1;       // per step
  index_t sequence = 0;       // tokens per row, for the partition's cost estimate
  bool shard_optimizer_state = false;  // ZeRO-1 over a pipeline rank's replicas
  std::filesystem::path timeline;      // a directory for each rank's timeline; empty: none recorded
};

template <element T, class M, class Device>
class PipelineParallel final : public Runtime<T, M, Device> {
public:
  using Model = models::Transformer<T, Device>;

  // What a Trainer makes: the options from the recipe's pipeline section.
  PipelineParallel(comm::Communicator& comm, const recipe::Recipe& r, Sharding)
      : PipelineParallel(comm, options_of(r)) {}

  static PipelineOptions options_of(const recipe::Recipe& r) {
    return {.ranks = int(r.pipeline.ranks),
            .stages_per_rank = int(r.pipeline.stages_per_rank),
            .schedule = pipe_schedule_from_name(r.pipeline.schedule),
            .microbatches = int(r.train.gradient_accumulation_steps),
            .sequence = r.data.max_seq_length,
            .shard_optimizer_state = r.pipeline.data_parallel == ZeRO<1>::name,
            .timeline = r.pipeline.timeline ? std::filesystem::path(r.output_dir) / "timeline" : ""};
  }

  PipelineParallel(comm::Communicator& comm, PipelineOptions options) : comm_(comm), options_(options) {
    const int P = options.ranks > 0 ? options.ranks : comm.size();
    if (comm.size() % P != 0)
      throw Error("pipeline.ranks = " + std::to_string(P) + " does not divide the job's " + std::to_string(comm.size()) +
                  " ranks; launch.nproc must be pipeline.ranks x the number of data-parallel replicas");
    replicas_ = comm.size() / P;
    pipe_rank_ = comm.rank() / replicas_;
    replica_ = comm.rank() % replicas_;
    options_.ranks = P;
    data_ = comm.split(pipe_rank_, "replicas of pipeline rank " + std::to_string(pipe_rank_));
    pipe_ = comm.split(replica_, "pipeline of replica " + std::to_string(replica_));
  }

  comm::Communicator& comm() override { return comm_; }
  data::Shard data_shard() const override { return {replica_, replicas_}; }
  comm::Communicator& data_group() override { return *data_; }

  void place(Model& model, const OptimizerMaker<M>& optimizer) override {
    model_ = &model;
    const index_t L = model.config().num_layers;
    partition_ = partition_pipeline(model.config(), options_.sequence, options_.ranks, options_.stages_per_rank);
    ops_ = pipe_schedule(options_.schedule, partition_, pipe_rank_, options_.microbatches);
    started_.assign(std::size_t(options_.microbatches), false);
    tied_ = model.config().tie_embeddings && options_.ranks > 1;
    head_rank_ = partition_.rank_of(partition_.chunk_holding(L));
    Sharding sharding;
    sharding.optimizer_state = options_.shard_optimizer_state;
    inner_ = std::make_unique<DataParallel<T, M, Device>>(*data_, sharding, *pipe_,
                                                          [this](index_t s) { return holds(s); });
    inner_->place(model, optimizer);
    // The last rank also keeps the embedding table its tied head reads.
    if (keeps_tied_table()) model.stage_parameters(-1).allocate_zeroed_values();
    model.set_stage_loading({.begin = [this](index_t s) { return keeps(s); }, .end = {}});
  }

  void attach(std::vector<adapters::Trainable<T, Device>> trainables, bool fused) override {
    if (fused) throw Error("train.fuse_optimizer_with_backward does not combine with a pipeline");
    std::vector<adapters::Trainable<T, Device>> mine;
    for (const adapters::Trainable<T, Device>& t : trainables)
      if (holds(t.stage)) mine.push_back(t);
    trainables_ = std::move(trainables);
    inner_->attach(std::move(mine), false);
    if (keeps_tied_table()) model_->stage_parameters(-1).allocate_grads();
  }

  index_t trainable_parameters() const override {
    index_t n = 0;
    for (const adapters::Trainable<T, Device>& t : trainables_) n += t.params->size();
    return n;
  }

  const PipePartition& partition() const { return partition_; }

  void begin_step() override {
    inner_->begin_step();
    if (keeps_tied_table()) model_->stage_parameters(-1).zero_grads();
  }

  double forward_backward(const StepWork& work) override {
    const int m = int(work.batches.size());
    if (m != options_.microbatches)
      throw Error("internal: a pipeline step of " + std::to_string(m) + " micro-batches, planned for " +
                  std::to_string(options_.microbatches));
    std::vector<std::size_t> last_op(std::size_t(m), 0);
    for (std::size_t i = 0; i < ops_.size(); ++i) last_op[std::size_t(ops_[i].micro_batch)] = i;
    const bool defer = options_.schedule == PipeSchedule::zero_bubble;
    const auto start = Clock::now();
    double loss = 0, waited = 0;
    timeline_.clear();
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const PipeOp& op = ops_[i];
      // Records [since, now) as what this op was doing.
      auto mark = [&](PipeActivity activity, double since) {
        if (!options_.timeline.empty()) timeline_.push_back({activity, op.micro_batch, op.chunk, since, wall_clock()});
      };
      const std::size_t k = std::size_t(op.micro_batch);
      models::Context<T, Device>& context = context_of(op.micro_batch);
      if (!started_[k]) {
        context.begin(work.batches[k], {.token_count = work.token_count, .objective = work.objective});
        context.defer_weight_gradients = defer;
        started_[k] = true;
      }
      if (work.begin_micro_batch) work.begin_micro_batch(k);
      const index_t first = partition_.first[std::size_t(op.chunk)], last = partition_.last[std::size_t(op.chunk)];
      const models::StageHooks hooks = inner_->training_hooks({.last = op.micro_batch + 1 == m});
      const index_t width = context.batch().rows() * model_->config().hidden_size;
      const index_t L = model_->config().num_layers;
      auto wait_for = [&](T* into, int from, int tag) {
        const double since = wall_clock(), seconds = receive(into, width, from, tag);
        waited += seconds;
        if (seconds > 0) mark(PipeActivity::wait, since);
      };
      auto send_on = [&](const T* data, int to, int tag) {
        const double since = wall_clock();
        if (send(data, width, to, tag)) mark(PipeActivity::send, since);
      };
      double since = 0;
      switch (op.pass) {
        case PipePass::forward:
          if (op.chunk > 0) wait_for(context.stream(first), op.chunk - 1, forward_tag(op.chunk - 1));
          since = wall_clock();
          model_->forward(context, first, last, hooks);
          mark(PipeActivity::forward, since);
          if (last == L) loss += context.loss;
          else send_on(context.stream(last + 1), op.chunk + 1, forward_tag(op.chunk));
          break;
        case PipePass::backward:
          if (last < L) wait_for(context.gradient(), op.chunk + 1, backward_tag(op.chunk + 1));
          since = wall_clock();
          model_->backward(context, first, last, hooks);
          mark(PipeActivity::backward, since);
          if (op.chunk > 0) send_on(context.gradient(), op.chunk - 1, backward_tag(op.chunk));
          break;
        case PipePass::weights:
          since = wall_clock();
          model_->weights(context, first, last, hooks);
          mark(PipeActivity::weights, since);
          break;
      }
      if (i == last_op[k]) finish(op.micro_batch);
      drop_sent();
    }
    for (Sent& s : sent_) s.work.wait();
    sent_.clear();
    inner_->end_micro_batch();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    bubble_ = seconds > 0 ? waited / seconds : 0;
    if (!options_.timeline.empty()) write_timeline(work.step);
    if (tied_) send_tied_gradient();
    return loss;
  }

  double fused_squares() override { return 0; }
  void scale_grads(double factor) override { inner_->scale_grads(factor); }
  double clip(double max_norm) override { return inner_->clip(max_norm); }
  void step(double lr, std::int64_t optimizer_step) override {
    inner_->step(lr, optimizer_step);
    if (tied_) send_tied_values();
  }

  // Forward only, through the pipe: chunk by chunk in order. Between steps
  // every context is free, so evaluation borrows one rather than keep its
  // own beside them for the rest of the run.
  double evaluate(const models::Batch& batch, models::SequenceObjective* objective) override {
    std::unique_ptr<models::Context<T, Device>> borrowed = free_context();
    models::Context<T, Device>& context = *borrowed;
    context.begin(batch, {.backward = false, .objective = objective});
    const index_t width = batch.rows() * model_->config().hidden_size;
    double loss = 0;
    for (int c = 0; c < partition_.chunks(); ++c) {
      if (partition_.rank_of(c) != pipe_rank_) continue;
      const index_t first = partition_.first[std::size_t(c)], last = partition_.last[std::size_t(c)];
      if (c > 0) receive(context.stream(first), width, c - 1, forward_tag(c - 1));
      model_->forward(context, first, last);
      if (last == model_->config().num_layers) loss = context.loss;
      else send(context.stream(last + 1), width, c + 1, forward_tag(c));
    }
    for (Sent& s : sent_) s.work.wait();
    sent_.clear();
    free_.push_back(std::move(borrowed));
    return loss;
  }

  // The whole model on every rank of the pipe, a stage at a time.
  models::StageHooks evaluation_hooks() override {
    const index_t L = model_->config().num_layers;
    models::StageHooks hooks;
    hooks.before_forward = [this, L](index_t s) {
      gather(s);
      if (s == L && model_->config().tie_embeddings) gather(-1);
    };
    hooks.after_forward = [this, L](index_t s) {
      release(s);
      if (s == L && model_->config().tie_embeddings) release(-1);
    };
    return hooks;
  }

  void with_whole_model(const std::function<void()>& use) override {
    const index_t L = model_->config().num_layers;
    for (index_t s = -1; s <= L; ++s) gather(s);
    share_trainables();
    inner_->with_whole_model(use);
    for (index_t s = -1; s <= L; ++s) release(s);
  }

  void values_loaded() override { inner_->values_loaded(); }

  // The pipe of replica 0 puts the model together on world rank 0, a stage at
  // a time as it reads them; the other replicas hold copies and do nothing.
  void read_model_on_rank0(const std::function<void()>& use) override {
    if (replica_ != 0) return;
    share_trainables();
    read_stages_on_rank0<T, Device>(
        *pipe_, *model_, use, [this](index_t s) { gather(s); }, [this](index_t s) { release(s); });
  }

  std::size_t state_bytes() const override { return inner_->state_bytes(); }
  std::vector<optim::StateArray> state_arrays() override { return inner_->state_arrays(); }
  typename Runtime<T, M, Device>::StateShard state_shard() const override {
    const auto inner = inner_->state_shard();
    const int parts = std::max(inner.parts, 1);
    return {inner.writes, pipe_rank_ * parts + inner.part, options_.ranks * parts};
  }

  double bubble_fraction() const override { return bubble_; }

private:
  using Clock = std::chrono::steady_clock;
  struct Sent {
    Tensor<T> data;  // a host copy
    comm::Work work;
  };

  bool holds(index_t stage) const { return partition_.rank_of(partition_.chunk_holding(stage)) == pipe_rank_; }
  bool keeps_tied_table() const { return tied_ && pipe_rank_ == head_rank_; }
  // The stages whose values this rank keeps: its own, and a tied head's table.
  bool keeps(index_t stage) const { return holds(stage) || (stage == -1 && keeps_tied_table()); }
  int owner(index_t stage) const { return partition_.rank_of(partition_.chunk_holding(stage)); }
  static int forward_tag(int chunk) { return 2 * chunk; }
  static int backward_tag(int chunk) { return 2 * chunk + 1; }

  // The context of micro-batch mb, from a pool of contexts of finished ones.
  models::Context<T, Device>& context_of(int mb) {
    auto it = live_.find(mb);
    if (it != live_.end()) return *it->second;
    return *(live_[mb] = free_context());
  }
  // A context from the pool, or a new one when every context is in use.
  std::unique_ptr<models::Context<T, Device>> free_context() {
    if (free_.empty()) return model_->make_context();
    std::unique_ptr<models::Context<T, Device>> c = std::move(free_.back());
    free_.pop_back();
    return c;
  }
  void finish(int mb) {
    free_.push_back(std::move(live_.at(mb)));
    live_.erase(mb);
    started_[std::size_t(mb)] = false;
  }

  // Blocks until chunk `from`'s message arrives; returns the seconds waited.
  double receive(T* into, index_t count, int from, int tag) {
    const int peer = partition_.rank_of(from);
    if (peer == pipe_rank_) return 0;  // the same rank's chunk left it in this context
    const auto start = Clock::now();
    receive_from_rank(into, count, peer, what(tag), tag);
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  // Sends a copy, so the context may be written again before it arrives;
  // false when chunk `to` is on this rank and finds it in the context.
  bool send(const T* data, index_t count, int to, int tag) {
    const int peer = partition_.rank_of(to);
    if (peer == pipe_rank_) return false;
    Tensor<T> copy = host_copy(data, count);
    comm::Work work = pipe_->send(std::span<const T>(copy.data(), std::size_t(count)), peer, what(tag), tag);
    sent_.push_back({std::move(copy), std::move(work)});
    return true;
  }
  // Point to point through the host (see the top of this file): a host copy
  // of device values, and a receive into the device through one.
  static Tensor<T> host_copy(const T* data, index_t count) {
    Tensor<T> copy(Shape{count}, typename Tensor<T>::Uninitialized{});
    Device::to_host(copy.data(), data, std::size_t(count) * sizeof(T));
    return copy;
  }
  static constexpr bool in_host_memory = std::is_same_v<typename Device::Memory, memory::Host>;
  void send_to_rank(const T* data, index_t count, int peer, const std::string& what, int tag) {
    if constexpr (in_host_memory) {
      pipe_->send(std::span<const T>(data, std::size_t(count)), peer, what, tag).wait();
    } else {
      const Tensor<T> copy = host_copy(data, count);
      pipe_->send(std::span<const T>(copy.data(), std::size_t(count)), peer, what, tag).wait();
    }
  }
  void receive_from_rank(T* into, index_t count, int peer, const std::string& what, int tag) {
    if constexpr (in_host_memory) {
      pipe_->recv(std::span<T>(into, std::size_t(count)), peer, what, tag).wait();
    } else {
      Tensor<T> staged(Shape{count}, typename Tensor<T>::Uninitialized{});
      pipe_->recv(std::span<T>(staged.data(), std::size_t(count)), peer, what, tag).wait();
      Device::from_host(into, staged.data(), std::size_t(count) * sizeof(T));
    }
  }
  void drop_sent() {
    while (!sent_.empty() && sent_.front().work.ready()) sent_.pop_front();
  }
  static double wall_clock() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  // Appends this step's intervals to the rank's file, one JSON line.
  void write_timeline(std::int64_t step) {
    std::filesystem::create_directories(options_.timeline);
    const auto file = options_.timeline / ("rank-" + std::to_string(comm_.rank()) + ".jsonl");
    std::ofstream out(file, std::ios::app);
    out << timeline_record(step, pipe_rank_, replica_, timeline_).dump() << "\n";
    if (!out) throw Error(file.string() + ": cannot write the pipeline timeline");
  }
  static std::string what(int tag) {
    return (tag % 2 == 0 ? "activations of chunk " : "gradients of chunk ") + std::to_string(tag / 2);
  }

  // A stage's values on every rank of the pipe, from its owner.
  void gather(index_t s) {
    auto& p = model_->stage_parameters(s);
    const int root = owner(s);
    if (!p.values().data()) p.allocate_values();
    pipe_->broadcast(std::span<T>(p.values().data(), std::size_t(p.size())), root,
                     "values of stage " + std::to_string(s)).wait();
  }
  void release(index_t s) {
    if (keeps(s)) return;
    model_->stage_parameters(s).release_values();
  }
  // Every trainable buffer's values (an adapter's) on every rank of the pipe.
  void share_trainables() {
    for (const adapters::Trainable<T, Device>& t : trainables_)
      if (t.params != &model_->stage_parameters(t.stage))
        pipe_->broadcast(std::span<T>(t.params->values().data(), std::size_t(t.params->size())), owner(t.stage),
                         "values of " + t.name).wait();
  }

  // Tied embeddings: the head's part of the table's gradient, summed over the
  // last rank's replicas, joins the first rank's step gradient.
  void send_tied_gradient() {
    auto& table = model_->stage_parameters(-1);
    const std::size_t n = std::size_t(table.size());
    if (pipe_rank_ == head_rank_) {
      if (!table.trainable()) return;
      T* g = table.grads().data();
      data_->all_reduce_sum(std::span<T>(g, n), "the tied LM head's gradient").wait();
      send_to_rank(g, index_t(n), owner(-1), "the tied LM head's gradient", tied_tag);
    } else if (pipe_rank_ == owner(-1)) {
      if (!table.trainable()) return;
      using DeviceTensor = Tensor<T, typename Device::Memory>;
      DeviceTensor g(Shape{index_t(n)}, typename DeviceTensor::Uninitialized{});
      receive_from_rank(g.data(), index_t(n), head_rank_, "the tied LM head's gradient", tied_tag);
      inner_->add_to_step_gradient(-1, g.data());
    }
  }
  void send_tied_values() {
    auto& table = model_->stage_parameters(-1);
    if (!table.trainable()) return;
    const std::size_t n = std::size_t(table.size());
    if (pipe_rank_ == owner(-1))
      send_to_rank(table.values().data(), index_t(n), head_rank_, "the tied embedding table", tied_tag);
    else if (pipe_rank_ == head_rank_)
      receive_from_rank(table.values().data(), index_t(n), owner(-1), "the tied embedding table", tied_tag);
  }
  static constexpr int tied_tag = 30000;  // MPI guarantees tags up to 32767

  comm::Communicator& comm_;
  PipelineOptions options_;
  int replicas_ = 1, pipe_rank_ = 0, replica_ = 0, head_rank_ = 0;
  bool tied_ = false;
  std::unique_ptr<comm::Communicator> data_, pipe_;
  Model* model_ = nullptr;
  PipePartition partition_;
  std::vector<PipeOp> ops_;
  std::vector<adapters::Trainable<T, Device>> trainables_;
  std::unique_ptr<DataParallel<T, M, Device>> inner_;
  std::map<int, std::unique_ptr<models::Context<T, Device>>> live_;
  std::vector<std::unique_ptr<models::Context<T, Device>>> free_;
  std::vector<bool> started_;
  std::deque<Sent> sent_;
  double bubble_ = 0;
  std::vector<PipeInterval> timeline_;  // this step's, when recording
};

}  // namespace ft::parallel
