#pragma once
// The parameters a run trains, with what the precision policy adds to them.
//
// Each trainable flat buffer (a stage of the model under full fine-tuning, a
// block's LoRA matrices under LoRA) holds values and gradients in the storage
// dtype T, which is what forward and backward use. When the policy keeps a
// master copy in M != T (bf16-mixed, fp16-mixed), this class also holds:
//   master  the weights in M, which the optimizer updates; T is re-rounded
//           from it after every step
//   grads   the step's gradient in M: each micro-batch's T gradient (one
//           rounding of an f32-accumulated GEMM result) is added here and the
//           T buffer is cleared, so accumulation over micro-batches is in M.
// Without a master copy (fp32, bf16-true) the optimizer works on the T
// buffers directly and micro-batches accumulate in T.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ft/kernels/cpu/launch.hpp"
#include "ft/models/parameters.hpp"
#include "ft/optim/clip.hpp"
#include "ft/train/optimizer_state.hpp"

namespace ft::train {

template <class M>
using OptimizerFactory =
    std::function<std::unique_ptr<ParameterOptimizer<M>>(const std::vector<models::ParameterEntry>&, index_t)>;

template <element T, class M>
class TrainableSet {
public:
  static constexpr bool has_master = !std::is_same_v<T, M>;

  struct Buffer {
    std::string name;
    index_t stage;  // the model stage whose backward completes its gradient (see Transformer::StageDone)
    models::ParameterBuffer<T>* params;
    memory::HostVector<M> master, grads;  // empty without a master copy
    std::unique_ptr<ParameterOptimizer<M>> optimizer;

    M* values() {
      if constexpr (has_master) return master.data();
      else return params->values().data();
    }
    M* step_grads() {
      if constexpr (has_master) return grads.data();
      else return params->grads().data();
    }
    index_t size() const { return params->size(); }
  };

  explicit TrainableSet(OptimizerFactory<M> factory) : factory_(std::move(factory)) {}

  // With fused = true every buffer is stepped on its own inside backward
  // (step_stage), so no step gradient in M is kept per buffer: one scratch
  // serves them in turn.
  void add(std::string name, index_t stage, models::ParameterBuffer<T>& params, bool fused = false) {
    if (!params.trainable()) throw Error("internal: buffer \"" + name + "\" is frozen and cannot train");
    Buffer b{std::move(name), stage, &params, {}, {}, factory_(params.entries(), params.size())};
    if constexpr (has_master) {
      const T* v = params.values().data();
      b.master.assign(v, v + params.size());
      if (!fused) b.grads.assign(std::size_t(params.size()), M(0.0f));
    }
    buffers_.push_back(std::move(b));
  }

  std::vector<Buffer>& buffers() { return buffers_; }
  index_t parameter_count() const {
    index_t n = 0;
    for (const Buffer& b : buffers_) n += b.size();
    return n;
  }

  void begin_step() {
    for (Buffer& b : buffers_) {
      b.params->zero_grads();
      if constexpr (has_master) std::fill(b.grads.begin(), b.grads.end(), M(0.0f));
    }
  }

  // Fused into backward: steps every buffer of `stage` with its fresh
  // gradient and clears that gradient for the next buffer sharing its
  // memory. Returns the sum of squares of the gradients stepped (for the
  // logged norm; clipping needs them all at once and is refused with fusing).
  double step_stage(index_t stage, double lr, std::int64_t optimizer_step) {
    double squares = 0;
    for (Buffer& b : buffers_) {
      if (b.stage != stage) continue;
      const T* g = b.params->grads().data();
      squares += optim::sum_of_squares(g, b.size());
      if constexpr (has_master) {
        scratch_.resize(std::size_t(b.size()));
        M* s = scratch_.data();
        cpu::parallel_for(b.size(), [=](index_t i) { s[i] = M(float(g[i])); });
        b.optimizer->step(b.master.data(), s, lr, optimizer_step);
        copy_master_to_storage(b);
      } else {
        b.optimizer->step(b.params->values().data(), g, lr, optimizer_step);
      }
      b.params->zero_grads();
    }
    return squares;
  }

  // After each micro-batch's backward: move its gradient into the step's.
  void end_micro_batch() {
    if constexpr (has_master)
      for (Buffer& b : buffers_) {
        T* g = b.params->grads().data();
        M* acc = b.grads.data();
        cpu::parallel_for(b.size(), [=](index_t i) { acc[i] = M(acc_t<M>(acc[i]) + acc_t<M>(g[i])); });
        b.params->zero_grads();
      }
  }

  // Multiplies the step's gradients by `factor` (undoing a loss scale).
  void scale_grads(double factor) {
    for (Buffer& b : buffers_) {
      M* g = b.step_grads();
      cpu::parallel_for(b.size(), [=](index_t i) { g[i] = M(acc_t<M>(g[i]) * acc_t<M>(factor)); });
    }
  }

  // Global gradient norm before clipping; clips to max_norm when max_norm > 0.
  double clip(double max_norm) {
    std::vector<optim::GradientBuffer<M>> grads;
    for (Buffer& b : buffers_) grads.push_back({b.step_grads(), b.size()});
    return optim::clip_grad_norm<M>(std::span<const optim::GradientBuffer<M>>(grads), max_norm);
  }

  void step(double lr, std::int64_t optimizer_step) {
    for (Buffer& b : buffers_) {
      b.optimizer->step(b.values(), b.step_grads(), lr, optimizer_step);
      if constexpr (has_master) copy_master_to_storage(b);
    }
  }

  // After loading values into the storage buffers (resume, adapters): refresh the master copy.
  void sync_master_from_storage() {
    if constexpr (has_master)
      for (Buffer& b : buffers_) {
        const T* v = b.params->values().data();
        std::copy(v, v + b.size(), b.master.begin());
      }
  }
  void copy_master_to_storage(Buffer& b) {
    if constexpr (has_master) {
      T* v = b.params->values().data();
      const M* m = b.master.data();
      cpu::parallel_for(b.size(), [=](index_t i) { v[i] = T(float(m[i])); });
    }
  }

private:
  OptimizerFactory<M> factory_;
  std::vector<Buffer> buffers_;
  memory::HostVector<M> scratch_;  // the step gradient in M of the buffer being stepped, when fused
};

}  // namespace ft::train
