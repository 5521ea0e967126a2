#pragma once
// Data parallelism: every rank runs the whole model on its own micro-batches
// and the ranks combine gradients. One mechanism serves Single (a job of one
// rank), DDP and ZeRO-1/2, chosen by what the policy shards:
//
//   DDP     every rank keeps everything; a stage's gradient is all-reduced
//           as soon as its backward completes, while earlier stages still
//           run backward; with gradient accumulation only the step's last
//           micro-batch reduces
//   ZeRO-1  the optimizer state and master weights of each buffer are cut
//           into one range per rank (shard_layout.hpp); gradients are
//           all-reduced as in DDP, each rank steps its range, and the
//           updated values are all-gathered
//   ZeRO-2  gradients are sharded too: each micro-batch's stage gradient is
//           reduce-scattered as soon as it is complete and each rank adds
//           its range into its step gradient, so no rank keeps a whole
//           step gradient
//   ZeRO-3  the model's values are sharded too (stage_shards.hpp), from
//           the load on: it keeps each stage's shard as the stage arrives.
//           A stage is gathered before its forward and again before its
//           backward, the next one prefetched, and dropped after; its whole
//           gradient lives only from its backward to its reduce-scatter.
//           Each rank steps its range in place. Adapter buffers (LoRA,
//           prompts) are small and stay whole, sharded as in ZeRO-2.
//
// With expert parallelism (strategy.expert_parallel = P) each group of P
// consecutive ranks splits every sparse layer's routed experts, rank q of
// a group holding run q (models/expert_exchange.hpp moves the rows), and
// the ranks that hold the same run (one per group) are the experts' data
// parallelism: a block's experts are a buffer of their own, reduced and
// sharded over those ranks (under ZeRO-3 their values too), while the rest
// of the block is over all.
//
// A reduction in flight overlaps the backward of the next stage; it is
// settled (waited for, its result used, its memory freed) after that
// stage's backward, so at most one stage's reductions are in flight.
//
// Each rank's loss gradient is divided by the scored tokens of the whole
// global step (the engine sums them over ranks first), so the summed
// gradient is exactly the mean one process would take over the same rows.
// Reductions run in the gradient dtype M (f32 under mixed precision).
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/models/gather_windows.hpp"
#include "ft/optim/clip.hpp"
#include "ft/parallel/runtime.hpp"
#include "ft/parallel/shard_layout.hpp"
#include "ft/parallel/stage_reads.hpp"
#include "ft/parallel/stage_shards.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/parallel/trainable.hpp"

namespace ft::parallel {

// On a device other than the CPU, buffers (ZeRO-3's shards too) live in its
// memory and the element-wise work runs there; with optimizer offload, the
// optimizer steps each rank's range on the host (parallel/trainable.hpp),
// buffer after buffer, while the previous buffer's values are all-gathered.
template <element T, class M, class Device>
class DataParallel final : public Runtime<T, M, Device> {
  using Set = TrainableSet<T, M, Device>;
  using Buffer = typename Set::Buffer;
  using Memory = typename Device::Memory;
  using Scratch = Tensor<M, Memory>;
  using Model = models::Transformer<T, Device>;

public:
  DataParallel(comm::Communicator& comm, Sharding sharding) : comm_(comm), sharding_(sharding) {}
  // What a Trainer makes: the recipe adds the shard group's size.
  DataParallel(comm::Communicator& comm, const recipe::Recipe& r, Sharding sharding)
      : DataParallel(comm, Sharding{sharding.optimizer_state, sharding.gradients, sharding.parameters,
                                    int(r.launch.shard_group_size)}) {
    offload_ = r.strategy.optimizer_offload && !std::is_same_v<Device, device::Cpu>;
    expert_parallel_ = int(r.strategy.expert_parallel);
  }

  // Data parallelism over the replicas of a part of the model (a pipeline
  // rank's stages): `holds` says which stages this rank keeps, and the
  // gradient norm also sums over `across` (the ranks that hold the others).
  DataParallel(comm::Communicator& replicas, Sharding sharding, comm::Communicator& across,
               std::function<bool(index_t stage)> holds)
      : comm_(replicas), sharding_(sharding), across_(&across), holds_(std::move(holds)) {}

  comm::Communicator& comm() override { return comm_; }

  void shape(models::ModelSpec& spec) const override {
    if (expert_parallel_ == 1 || spec.config.moe.experts == 0) return;
    spec.config.moe.parallel = expert_parallel_;
    spec.config.moe.rank = comm_.rank() % expert_parallel_;
  }

  void place(Model& model, const OptimizerMaker<M>& optimizer) override {
    model_ = &model;
    optimizer_ = optimizer;
    if (const int P = model.config().moe.parallel; P > 1) {
      const int r = comm_.rank();
      expert_group_ = comm_.split(r / P, "expert group " + std::to_string(r / P));
      expert_replicas_ = comm_.split(r % P, "holders of experts run " + std::to_string(r % P));
      model.set_expert_group(expert_group_.get());
    }
    const int G = sharding_.group_size;
    if (sharding_.optimizer_state && G > 0 && G < comm_.size()) {
      // Hybrid: shard within groups of G consecutive ranks, replicate across them.
      shard_group_ = comm_.split(comm_.rank() / G, "shard group " + std::to_string(comm_.rank() / G));
      replicas_ = comm_.split(comm_.rank() % G, "replicas of shard " + std::to_string(comm_.rank() % G));
    }
    if (sharding_.parameters) return place_shards();
    // Each kept stage's values are made as it loads (Transformer::load), so
    // a 4-bit base never holds more than one block of whole values.
    auto keeps = [this](index_t s) { return !holds_ || holds_(s); };
    model.set_stage_loading({.begin = keeps, .end = {}});
  }

  void attach(std::vector<adapters::Trainable<T, Device>> trainables, bool fused) override {
    for (const adapters::Trainable<T, Device>& t : trainables) {
      // Spread over the group, a buffer's run of routed experts (its windows, declared last) trains apart.
      const index_t experts = expert_group_ ? t.params->windows_begin() : t.params->size();
      add(t, {0, experts}, t.name, {&shards(), &comm_, false}, fused);
      if (experts < t.params->size()) {
        const auto& moe = model_->config().moe;
        const index_t first = moe.first_local_expert();
        add(t, {experts, -1}, t.name + ".experts." + std::to_string(first) + "-" +
                                  std::to_string(first + moe.local_experts() - 1),
            {expert_replicas_.get(), expert_replicas_.get(), true}, fused);
      }
    }
    if (fused) share_block_gradients();
    // Gradients for what trains here (ZeRO-3 makes a stage's at its backward).
    for (Buffer& b : set_.buffers())
      if (!b.values_sharded && !b.params->grads().data()) b.params->allocate_grads();
  }

  // The model's (each run of experts counted on every rank that holds one).
  index_t trainable_parameters() const override {
    index_t n = 0;
    for (std::size_t i = 0; i < set_.buffers().size(); ++i)
      n += set_.buffers()[i].size() * (groups_[i].experts ? expert_parallel_ : 1);
    return n;
  }

  data::Shard data_shard() const override { return {comm_.rank(), comm_.size()}; }
  comm::Communicator& data_group() override { return comm_; }

  void begin_step() override { set_.begin_step(); }

  // The sequential schedule, one micro-batch after the other.
  double forward_backward(const StepWork& work) override {
    double loss = 0;
    for (std::size_t k = 0; k < work.batches.size(); ++k) {
      if (work.begin_micro_batch) work.begin_micro_batch(k);
      const MicroBatchRole role{.last = k + 1 == work.batches.size(), .fused = work.fused, .lr = work.lr,
                                .optimizer_step = work.optimizer_step};
      loss += model_->forward_backward(work.batches[k], {.token_count = work.token_count, .objective = work.objective},
                                       nullptr, training_hooks(role));
      end_micro_batch();
    }
    return loss;
  }

  // Adds `g` (a whole buffer's gradient in T) to the step's gradient of the
  // model stage `stage`, once this step's reductions are done: a pipeline's
  // last rank hands the first the tied LM head's part of the embedding's.
  void add_to_step_gradient(index_t stage, const T* g) {
    settle(0);
    for (Buffer& b : set_.buffers()) {
      if (b.stage != stage || !is_model_stage(b)) continue;
      if (b.sharded_grads) throw Error("internal: a tied gradient added to sharded gradients");
      Device::parallel_for(b.size(), AddInto<M, T>{b.whole_grads(), g});
    }
  }

  double evaluate(const models::Batch& batch, models::SequenceObjective* objective) override {
    return model_->forward_backward(batch, {.backward = false, .objective = objective}, nullptr, evaluation_hooks());
  }

  // What happens around each stage of one micro-batch's forward and backward.
  models::StageHooks training_hooks(const MicroBatchRole& role) {
    models::StageHooks hooks = shards_ ? gather_hooks(true) : models::StageHooks{};
    hooks.after_backward = [this, role](index_t stage) {
      const std::size_t before = pending_.size();
      for (std::size_t i = 0; i < set_.buffers().size(); ++i)
        if (set_.buffers()[i].stage == stage) gradient_complete(i, role);
      settle(pending_.size() - before);
      if (shards_) release_after(stage);
    };
    return hooks;
  }

  // After each micro-batch: its reductions are done.
  void end_micro_batch() { settle(0); }

  double fused_squares() override {
    const double squares = job_squares(fused_squares_) + experts_squares(fused_expert_squares_);
    fused_squares_ = fused_expert_squares_ = 0;
    return squares;
  }

  void scale_grads(double factor) override {
    for (Buffer& b : set_.buffers()) optim::scale<Device>(b.owned_grads(), b.owned(), factor);
  }

  double clip(double max_norm) override {
    std::vector<optim::GradientBuffer<M>> grads, expert_grads;
    for (std::size_t i = 0; i < set_.buffers().size(); ++i) {
      Buffer& b = set_.buffers()[i];
      (groups_[i].experts ? expert_grads : grads).push_back({b.owned_grads(), b.owned()});
    }
    const auto buffers = std::span<const optim::GradientBuffer<M>>(grads),
               experts = std::span<const optim::GradientBuffer<M>>(expert_grads);
    const double norm = std::sqrt(job_squares(optim::sum_of_squares<Device>(buffers)) +
                                  experts_squares(optim::sum_of_squares<Device>(experts)));
    optim::clip_to_norm<Device, M>(buffers, norm, max_norm);
    optim::clip_to_norm<Device, M>(experts, norm, max_norm);
    return norm;
  }

  void step(double lr, std::int64_t optimizer_step) override {
    for (std::size_t i = 0; i < set_.buffers().size(); ++i) {
      Buffer& b = set_.buffers()[i];
      Set::step(b, b.owned_grads(), lr, optimizer_step);
      gather_values(i);
    }
    end_micro_batch();
  }

  models::StageHooks evaluation_hooks() override { return shards_ ? gather_hooks(false) : models::StageHooks{}; }

  void with_whole_model(const std::function<void()>& use) override {
    if (shards_)
      for (index_t s = -1; s <= shards_->last(); ++s) shards_->gather(s);
    if (expert_group_) {
      for (index_t s = 0; s < model_->config().num_layers; ++s) model_->gather_rows(s, *expert_group_);
      gather_adapter_experts();
    }
    use();
    model_->drop_gathered_rows();
    drop_adapter_experts();
    if (shards_)
      for (index_t s = -1; s <= shards_->last(); ++s) shards_->release(s);
  }

  void values_loaded() override { set_.sync_master_from_storage(); }

  void read_model_on_rank0(const std::function<void()>& use) override {
    if (expert_group_) {
      // Each sparse stage's experts put together from its group as rank 0
      // reads it; an adapter's (small beside them) all at once.
      gather_adapter_experts();
      read_stages_on_rank0(
          comm_, *model_, use,
          [this](index_t s) {
            if (shards_) shards_->gather(s);
            model_->gather_rows(s, *expert_group_);
          },
          [this](index_t s) {
            model_->drop_gathered_rows();
            if (shards_) shards_->release(s);
          });
      drop_adapter_experts();
      return;
    }
    if (!shards_) {
      if (comm_.rank() == 0) use();
      return;
    }
    read_stages_on_rank0(
        comm_, *model_, use, [this](index_t s) { shards_->gather(s); }, [this](index_t s) { shards_->release(s); });
  }

  std::size_t state_bytes() const override {
    std::size_t n = shards_ ? shards_->shard_bytes() : 0;
    if (!shards_) {
      for (index_t s = -1; s <= model_->config().num_layers; ++s) {
        if (holds_ && !holds_(s)) continue;
        auto& p = model_->stage_parameters(s);
        n += std::size_t(p.size()) * sizeof(T) * (p.trainable() ? 2 : 1);
      }
    }
    for (const Buffer& b : set_.buffers()) {
      if (!is_model_stage(b)) n += std::size_t(b.size()) * sizeof(T) * 2;  // an adapter's values and gradients
      n += (held(b.master) + held(b.grads)) * sizeof(M) + b.host_bytes();
      for (const optim::StateArray& a : b.optimizer->state()) n += a.bytes;
    }
    return n;
  }

  std::vector<optim::StateArray> state_arrays() override {
    std::vector<optim::StateArray> arrays;
    for (std::size_t i = 0; i < set_.buffers().size(); ++i) {
      Buffer& b = set_.buffers()[i];
      // Unsharded and spread, the first rank of each expert group writes its run of experts, rank 0 the rest.
      const bool written = !expert_group_ || sharding_.optimizer_state || groups_[i].experts || comm_.rank() == 0;
      for (optim::StateArray a : b.optimizer->state()) {
        a.name = b.name + "/" + a.name;
        a.written = written;
        if (optimizer_.by_element) std::tie(a.begin, a.total) = std::pair{b.begin, b.size()};
        arrays.push_back(std::move(a));
      }
      if constexpr (Set::has_master) {
        const auto [to_host, from_host] = b.offloaded ? std::pair{&device::Cpu::to_host, &device::Cpu::from_host}
                                                      : std::pair{&Device::to_host, &Device::from_host};
        arrays.push_back({b.name + "/master", io::safetensors_dtype_of<M>(), b.owned_values(),
                          std::size_t(b.owned()) * sizeof(M), b.begin, b.size(), to_host, from_host, written});
      }
    }
    return arrays;
  }

  typename Runtime<T, M, Device>::StateShard state_shard() const override {
    if (expert_group_ && !sharding_.optimizer_state)
      return {expert_replicas_->rank() == 0, expert_group_->rank(), expert_group_->size()};
    if (expert_group_) return {true, comm_.rank(), comm_.size()};
    if (!sharding_.optimizer_state || shards().size() == 1) return {comm_.rank() == 0, 0, 0};
    return {!replicas_ || replicas_->rank() == 0, shards().rank(), shards().size()};
  }

private:
  struct Pending {
    comm::Work work;
    std::function<void()> then;  // runs on this thread once the work is complete
  };

  // The ranks a trained buffer's reductions run over: those that share its
  // sharded state, and all that hold it.
  struct Groups {
    comm::Communicator* shards;
    comm::Communicator* holders;
    bool experts;  // a block's run of routed experts (expert parallelism)
  };

  // Adds segment `segment` of t's buffer, cut over `groups.shards` when the optimizer state is sharded.
  void add(const adapters::Trainable<T, Device>& t, typename Set::Segment segment, std::string name, Groups groups,
           bool fused) {
    const int world = sharding_.optimizer_state ? groups.shards->size() : 1;
    const index_t length = segment.length < 0 ? t.params->size() - segment.offset : segment.length;
    const auto entries = entries_in(t.params->entries(), segment.offset, segment.offset + length);
    ShardLayout layout(entries, length, world, optimizer_.by_element);
    const int part = world > 1 ? groups.shards->rank() : 0;
    const index_t begin = layout.begin(part), end = layout.end(part);
    // ZeRO-3: a stage's values live in its shard, cut as this layout cuts them
    // (place_shards); a block's run of experts is the shard's second part.
    const bool values_sharded = shards_ && t.params == &model_->stage_parameters(t.stage);
    const auto& make = offload_ ? optimizer_.make_on_host : optimizer_.make;
    set_.add(std::move(name), t.stage, *t.params, segment, begin, end, sharding_.gradients, !fused,
             make(entries_in(entries, begin, end), end - begin), values_sharded,
             values_sharded ? shards_->shard(t.stage, groups.experts ? 1 : 0) : nullptr, offload_);
    layouts_.push_back(layout);
    groups_.push_back(groups);
  }

  // Completes the reductions in flight but the newest `keep`, oldest first.
  void settle(std::size_t keep) {
    while (pending_.size() > keep) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      p.work.wait();
      if (p.then) p.then();
    }
  }

  // The ranks that share one copy of the sharded state: the job, or with
  // hybrid sharding this rank's group.
  comm::Communicator& shards() const { return shard_group_ ? *shard_group_ : comm_; }

  bool is_model_stage(const Buffer& b) const { return b.params == &model_->stage_parameters(b.stage); }

  // Expert parallelism: an adapter's runs of experts (LoRA on the stacked
  // experts) put together whole on every rank of each group, as the
  // model's are by Transformer::gather_rows, for its save and merge.
  void gather_adapter_experts() {
    for (std::size_t i = 0; i < set_.buffers().size(); ++i)
      if (groups_[i].experts && !is_model_stage(set_.buffers()[i]))
        models::gather_windows(*set_.buffers()[i].params, *expert_group_, set_.buffers()[i].name + ".");
  }
  void drop_adapter_experts() {
    for (Buffer& b : set_.buffers())
      if (!is_model_stage(b)) b.params->drop_wholes();
  }

  // ZeRO-3: cuts every stage of the model (one that trains as the optimizer
  // needs, a frozen one anywhere, a packed one between its tensors; a
  // block's run of experts over the ranks that hold it), and a load keeps
  // this rank's range of each stage as it arrives, so no rank holds more
  // than one whole stage.
  void place_shards() {
    std::vector<std::vector<ShardedPart>> parts;
    for (index_t s = -1; s <= model_->config().num_layers; ++s) {
      auto& p = model_->stage_parameters(s);
      const bool by_element = p.trainable() ? optimizer_.by_element : true;
      const index_t experts = expert_group_ ? p.windows_begin() : p.size();
      auto cut = [&](index_t begin, index_t end, comm::Communicator& group) {
        return ShardedPart{begin, ShardLayout(entries_in(p.entries(), begin, end), end - begin, group.size(), by_element),
                           &group};
      };
      parts.push_back({cut(0, experts, shards())});
      if (experts < p.size()) parts.back().push_back(cut(experts, p.size(), *expert_replicas_));
    }
    shards_ = std::make_unique<StageShards<T, Device>>(shards(), *model_, std::move(parts));
    model_->set_stage_loading({.begin =
                                   [this](index_t s) {
                                     model_->stage_parameters(s).allocate_zeroed_values();
                                     return true;
                                   },
                               .end =
                                   [this](index_t s) {
                                     shards_->keep_from_whole(s);
                                     shards_->release(s);
                                   },
                               .packed_range =
                                   [this](index_t s, const std::vector<models::ParameterEntry>& parts) {
                                     return shards_->cut_packed(s, parts);
                                   }});
  }

  // ZeRO-3's gathers: a stage's values (and the embedding table for a head
  // tied to it) before its forward and backward, the next stage's prefetched;
  // in training the head's and the embedding's gradients from the head's
  // forward on (it begins their backward), a block's from its backward on.
  models::StageHooks gather_hooks(bool training) {
    const index_t L = model_->config().num_layers;
    const bool tied = model_->config().tie_embeddings;
    models::StageHooks hooks;
    hooks.before_forward = [=, this](index_t s) {
      shards_->gather(s);
      if (s == L && tied) shards_->gather(-1);
      shards_->prefetch(s + 1);
      if (training && s == L) {
        model_->stage_parameters(L).allocate_grads();
        if (tied) model_->stage_parameters(-1).allocate_grads();
      }
    };
    hooks.after_forward = [=, this](index_t s) {
      shards_->release(s);
      if (s == L && tied) shards_->release(-1);
    };
    if (training)
      hooks.before_backward = [this](index_t s) {
        shards_->gather(s);
        shards_->prefetch(s - 1);
        auto& p = model_->stage_parameters(s);
        if (!p.grads().data()) p.allocate_grads();
      };
    return hooks;
  }
  void release_after(index_t stage) {
    shards_->release(stage);
    if (stage == model_->config().num_layers && model_->config().tie_embeddings) shards_->release(-1);
  }

  // A stage's gradient for this micro-batch is complete in b's T buffer.
  void gradient_complete(std::size_t i, const MicroBatchRole& role) {
    Buffer& b = set_.buffers()[i];
    if (role.fused) return fused_step(i, role);
    comm::Communicator& holders = *groups_[i].holders;
    if (!b.sharded_grads) {
      Set::accumulate(b);
      if (role.last && holders.size() > 1)
        pending_.push_back({holders.all_reduce_sum(std::span<M>(b.whole_grads(), std::size_t(b.size())),
                                                   "gradients of " + b.name),
                            {}});
      return;
    }
    // Sharded: this rank's range of the sum over ranks joins its step gradient.
    auto whole = take_scratch(0), part = take_scratch(std::size_t(b.owned()));
    const M* source = gradient_in_m(b, *whole);
    comm::Work work = groups_[i].shards->reduce_scatter_sum(std::span<const M>(source, std::size_t(b.size())),
                                                  std::span<M>(part->data(), held(*part)),
                                                  layouts_[i].counts(), "gradients of " + b.name);
    if (replicas_) {
      // Hybrid: the shard group's sum, then the sum of that over the groups.
      pending_.push_back({work, [this, &b, part] {
                            replicas_->all_reduce_sum(std::span<M>(part->data(), held(*part)),
                                                      "gradients of " + b.name)
                                .wait();
                          }});
      work = {};
    }
    // ZeRO-3 makes a stage's gradient anew at its next backward: it is
    // dropped once the reductions of its last segment (the experts, when
    // split) are done, which are settled after those of the segments before.
    const bool drops_gradient = b.values_sharded && (i + 1 == set_.buffers().size() || set_.buffers()[i + 1].params != b.params);
    pending_.push_back({work, [this, &b, whole, part, drops_gradient]() mutable {
                          Device::parallel_for(b.owned(), AddInto<M, M>{b.grads.data(), part->data()});
                          if (drops_gradient) b.params->release_grads();
                          else if (!b.values_sharded) b.zero_t_grads();
                          give_back(std::move(whole));
                          give_back(std::move(part));
                        }});
  }

  // Fused into backward: reduce this stage's fresh gradient, step this
  // rank's range with it, share the result, clear the gradient for the next
  // buffer that uses its memory.
  void fused_step(std::size_t i, const MicroBatchRole& role) {
    Buffer& b = set_.buffers()[i];
    // (The Trainer refuses a fused optimizer with sharded gradients.)
    auto whole = take_scratch(0);
    M* source = gradient_in_m(b, *whole);
    comm::Communicator& holders = *groups_[i].holders;
    if (holders.size() > 1)
      holders.all_reduce_sum(std::span<M>(source, std::size_t(b.size())), "gradients of " + b.name).wait();
    const M* g = source + b.begin;
    (groups_[i].experts ? fused_expert_squares_ : fused_squares_) += optim::sum_of_squares<Device>(g, b.owned());
    Set::step(b, g, role.lr, role.optimizer_step);
    gather_values(i);
    end_micro_batch();
    b.zero_t_grads();
    give_back(std::move(whole));
  }

  // The sum of squares of the job's routed experts' gradients from this
  // rank's run of them: each run once, summed over its holders' shards,
  // then over the runs. 0 when no routed expert trains apart.
  double experts_squares(double mine) {
    if (!expert_group_ || std::none_of(groups_.begin(), groups_.end(), [](const Groups& g) { return g.experts; }))
      return 0;
    if (sharding_.optimizer_state) mine = expert_replicas_->sum(mine, "the experts' gradient norm");
    return expert_group_->sum(mine, "the gradient norm over the expert group");
  }

  // The sum of squares of the job's gradient from this rank's: ranks hold
  // disjoint ranges when the optimizer state is sharded, the same whole
  // gradient otherwise.
  double job_squares(double squares) {
    if (sharding_.optimizer_state) squares = shards().sum(squares, "the gradient norm");
    return across_ ? across_->sum(squares, "the gradient norm over the pipeline") : squares;
  }

  // The T gradient of b as M: itself when T is M, else converted into `scratch`.
  M* gradient_in_m(Buffer& b, Scratch& scratch) {
    T* g = b.t_grads();
    if constexpr (Set::has_master) {
      resize(scratch, b.size());
      Device::parallel_for(b.size(), Convert<M, T>{scratch.data(), g});
      return scratch.data();
    } else {
      return g;
    }
  }

  // After a sharded optimizer stepped its range, every rank takes the others'.
  void gather_values(std::size_t i) {
    Buffer& b = set_.buffers()[i];
    comm::Communicator& group = *groups_[i].shards;
    if (!sharding_.optimizer_state || group.size() == 1 || b.values_sharded) return;  // ZeRO-3 gathers before use
    T* v = b.values();
    pending_.push_back({group.all_gather(std::span<const T>(v + b.begin, std::size_t(b.owned())),
                                         std::span<T>(v, std::size_t(b.size())), layouts_[i].counts(),
                                         "values of " + b.name),
                        {}});
  }

  // Fused into backward, a block's gradient is applied and cleared before the
  // next block's backward starts, so all blocks can write into one buffer.
  void share_block_gradients() {
    auto& blocks = model_->blocks();
    const index_t size = blocks.front().parameters().size();
    for (auto& b : blocks)
      if (!b.parameters().trainable() || b.parameters().size() != size) return;  // frozen, or of different shapes
    block_gradients_ = Tensor<T, Memory>(Shape{size});
    for (auto& b : blocks) b.parameters().share_gradients(block_gradients_);
  }

  std::shared_ptr<Scratch> take_scratch(std::size_t n) {
    std::shared_ptr<Scratch> s;
    if (free_scratch_.empty()) s = std::make_shared<Scratch>();
    else {
      s = std::move(free_scratch_.back());
      free_scratch_.pop_back();
    }
    resize(*s, index_t(n));
    return s;
  }
  // Elements a buffer holds (a default tensor holds none).
  static std::size_t held(const Tensor<M, Memory>& t) { return t.data() ? std::size_t(t.numel()) : 0; }
  // Scratch of n values (unwritten); kept when it has that size already.
  static void resize(Scratch& s, index_t n) {
    if (!s.data() || s.numel() != n) s = n > 0 ? Scratch(Shape{n}, typename Scratch::Uninitialized{}) : Scratch();
  }
  void give_back(std::shared_ptr<Scratch> s) { free_scratch_.push_back(std::move(s)); }

  comm::Communicator& comm_;
  Sharding sharding_;
  bool offload_ = false;                      // the optimizer steps on the host (a device's runs only)
  comm::Communicator* across_ = nullptr;      // the gradient norm sums over these ranks too
  std::function<bool(index_t)> holds_;         // the stages this rank keeps; empty: all
  OptimizerMaker<M> optimizer_;  // how the trained buffers are cut and their optimizers made
  Model* model_ = nullptr;
  Set set_;
  std::vector<ShardLayout> layouts_;  // one per buffer of set_, in order
  std::vector<Groups> groups_;        // one per buffer of set_, in order
  std::deque<Pending> pending_;
  std::vector<std::shared_ptr<Scratch>> free_scratch_;
  Tensor<T, Memory> block_gradients_;  // shared by every block when the optimizer is fused into backward
  std::unique_ptr<StageShards<T, Device>> shards_;  // ZeRO-3
  std::unique_ptr<comm::Communicator> shard_group_, replicas_;  // hybrid sharding
  int expert_parallel_ = 1;
  // Expert parallelism: the ranks that split the experts, and those that hold the same run of them.
  std::unique_ptr<comm::Communicator> expert_group_, expert_replicas_;
  double fused_squares_ = 0, fused_expert_squares_ = 0;  // this step's, when the optimizer is fused into backward
};

}  // namespace ft::parallel
