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
//
// Each rank's loss gradient is divided by the scored tokens of the whole
// global step (the engine sums them over ranks first), so the summed
// gradient is exactly the mean one process would take over the same rows.
// Reductions run in the gradient dtype M (f32 under mixed precision).
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/optim/clip.hpp"
#include "ft/parallel/runtime.hpp"
#include "ft/parallel/shard_layout.hpp"
#include "ft/train/trainable.hpp"

namespace ft::parallel {

template <element T, class M>
class DataParallel final : public Runtime<T, M> {
  using Set = train::TrainableSet<T, M>;
  using Buffer = typename Set::Buffer;
  using Scratch = memory::HostVector<M>;

public:
  DataParallel(comm::Communicator& comm, Sharding sharding) : comm_(comm), sharding_(sharding) {}

  comm::Communicator& comm() override { return comm_; }

  void attach(models::Transformer<T>& model, std::vector<adapters::Trainable<T>> trainables,
              const OptimizerMaker<M>& optimizer, bool fused) override {
    model_ = &model;
    by_element_ = optimizer.by_element;
    const int rank = comm_.rank(), world = sharding_.optimizer_state ? comm_.size() : 1;
    for (const adapters::Trainable<T>& t : trainables) {
      const auto& entries = t.params->entries();
      ShardLayout layout(entries, t.params->size(), world, optimizer.by_element);
      const int part = world > 1 ? rank : 0;
      const index_t begin = layout.begin(part), end = layout.end(part);
      set_.add(t.name, t.stage, *t.params, begin, end, sharding_.gradients, !fused,
               optimizer.make(entries_in(entries, begin, end), end - begin));
      layouts_.push_back(layout);
    }
    if (fused) share_block_gradients();
  }

  index_t trainable_parameters() const override { return set_.parameter_count(); }

  void begin_step() override { set_.begin_step(); }

  models::StageHooks training_hooks(const MicroBatchRole& role) override {
    models::StageHooks hooks;
    hooks.after_backward = [this, role](index_t stage) {
      for (std::size_t i = 0; i < set_.buffers().size(); ++i)
        if (set_.buffers()[i].stage == stage) gradient_complete(i, role);
    };
    return hooks;
  }

  void end_micro_batch() override {
    for (Pending& p : pending_) {
      p.work.wait();
      if (p.then) p.then();
    }
    pending_.clear();
  }

  double fused_squares() override {
    const double squares = job_squares(fused_squares_);
    fused_squares_ = 0;
    return squares;
  }

  void scale_grads(double factor) override {
    for (Buffer& b : set_.buffers()) {
      M* g = b.owned_grads();
      cpu::parallel_for(b.owned(), [=](index_t i) { g[i] = M(acc_t<M>(g[i]) * acc_t<M>(factor)); });
    }
  }

  double clip(double max_norm) override {
    std::vector<optim::GradientBuffer<M>> grads;
    double squares = 0;
    for (Buffer& b : set_.buffers()) {
      grads.push_back({b.owned_grads(), b.owned()});
      squares += optim::sum_of_squares(grads.back().data, grads.back().size);
    }
    const double norm = std::sqrt(job_squares(squares));
    optim::clip_to_norm<M>(std::span<const optim::GradientBuffer<M>>(grads), norm, max_norm);
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

  models::StageHooks evaluation_hooks() override { return {}; }

  void sync_master_from_storage() override { set_.sync_master_from_storage(); }

  std::vector<train::StateArray> state_arrays() override {
    std::vector<train::StateArray> arrays;
    for (Buffer& b : set_.buffers()) {
      for (train::StateArray a : b.optimizer->state()) {
        a.name = b.name + "/" + a.name;
        if (by_element_) std::tie(a.begin, a.total) = std::pair{b.begin, b.size()};
        arrays.push_back(std::move(a));
      }
      if constexpr (Set::has_master)
        arrays.push_back({b.name + "/master", io::safetensors_dtype_of<M>(), b.master.data(),
                          b.master.size() * sizeof(M), b.begin, b.size()});
    }
    return arrays;
  }

  bool state_is_sharded() const override { return sharding_.optimizer_state && comm_.size() > 1; }

private:
  struct Pending {
    comm::Work work;
    std::function<void()> then;  // runs on this thread once the work is complete
  };

  // A stage's gradient for this micro-batch is complete in b's T buffer.
  void gradient_complete(std::size_t i, const MicroBatchRole& role) {
    Buffer& b = set_.buffers()[i];
    if (role.fused) return fused_step(i, role);
    if (!b.sharded_grads) {
      Set::accumulate(b);
      if (role.last && comm_.size() > 1)
        pending_.push_back({comm_.all_reduce_sum(std::span<M>(b.whole_grads(), std::size_t(b.size())),
                                                 "gradients of " + b.name),
                            {}});
      return;
    }
    // Sharded: this rank's range of the sum over ranks joins its step gradient.
    auto whole = take_scratch(0), part = take_scratch(std::size_t(b.owned()));
    const M* source = gradient_in_m(b, *whole);
    comm::Work work = comm_.reduce_scatter_sum(std::span<const M>(source, std::size_t(b.size())), std::span<M>(*part),
                                               layouts_[i].counts(), "gradients of " + b.name);
    pending_.push_back({work, [this, &b, whole, part]() mutable {
                          M* acc = b.grads.data();
                          const M* add = part->data();
                          cpu::parallel_for(b.owned(), [=](index_t k) { acc[k] = M(acc_t<M>(acc[k]) + acc_t<M>(add[k])); });
                          b.params->zero_grads();
                          give_back(std::move(whole));
                          give_back(std::move(part));
                        }});
  }

  // Fused into backward: reduce this stage's fresh gradient, step this
  // rank's range with it, share the result, clear the gradient for the next
  // buffer that uses its memory.
  void fused_step(std::size_t i, const MicroBatchRole& role) {
    Buffer& b = set_.buffers()[i];
    auto whole = take_scratch(0), part = take_scratch(0);
    M* source = gradient_in_m(b, *whole);
    const M* g = source + b.begin;
    if (b.sharded_grads) {
      part->resize(std::size_t(b.owned()));
      comm_.reduce_scatter_sum(std::span<const M>(source, std::size_t(b.size())), std::span<M>(*part),
                               layouts_[i].counts(), "gradients of " + b.name)
          .wait();
      g = part->data();
    } else if (comm_.size() > 1) {
      comm_.all_reduce_sum(std::span<M>(source, std::size_t(b.size())), "gradients of " + b.name).wait();
    }
    fused_squares_ += optim::sum_of_squares(g, b.owned());
    Set::step(b, g, role.lr, role.optimizer_step);
    gather_values(i);
    end_micro_batch();
    b.params->zero_grads();
    give_back(std::move(whole));
    give_back(std::move(part));
  }

  // The sum of squares of the job's gradient from this rank's: ranks hold
  // disjoint ranges when the optimizer state is sharded, the same whole
  // gradient otherwise.
  double job_squares(double squares) {
    return sharding_.optimizer_state ? comm_.sum(squares, "the gradient norm") : squares;
  }

  // The T gradient of b as M: itself when T is M, else converted into `scratch`.
  M* gradient_in_m(Buffer& b, Scratch& scratch) {
    T* g = b.params->grads().data();
    if constexpr (Set::has_master) {
      scratch.resize(std::size_t(b.size()));
      M* s = scratch.data();
      cpu::parallel_for(b.size(), [=](index_t k) { s[k] = M(float(g[k])); });
      return s;
    } else {
      return g;
    }
  }

  // After a sharded optimizer stepped its range, every rank takes the others'.
  void gather_values(std::size_t i) {
    Buffer& b = set_.buffers()[i];
    if (!sharding_.optimizer_state || comm_.size() == 1) return;
    T* v = b.params->values().data();
    pending_.push_back({comm_.all_gather(std::span<const T>(v + b.begin, std::size_t(b.owned())),
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
    block_gradients_ = Tensor<T>(Shape{size});
    for (auto& b : blocks) b.parameters().share_gradients(block_gradients_);
  }

  std::shared_ptr<Scratch> take_scratch(std::size_t n) {
    std::shared_ptr<Scratch> s;
    if (free_scratch_.empty()) s = std::make_shared<Scratch>();
    else {
      s = std::move(free_scratch_.back());
      free_scratch_.pop_back();
    }
    s->resize(n);
    return s;
  }
  void give_back(std::shared_ptr<Scratch> s) { free_scratch_.push_back(std::move(s)); }

  comm::Communicator& comm_;
  Sharding sharding_;
  bool by_element_ = false;  // the optimizer's state is one value per parameter
  models::Transformer<T>* model_ = nullptr;
  Set set_;
  std::vector<ShardLayout> layouts_;  // one per buffer of set_, in order
  std::deque<Pending> pending_;
  std::vector<std::shared_ptr<Scratch>> free_scratch_;
  Tensor<T> block_gradients_;  // shared by every block when the optimizer is fused into backward
  double fused_squares_ = 0;
};

}  // namespace ft::parallel
