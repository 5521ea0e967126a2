#pragma once
// The parameters a run trains, with what the precision policy adds to them,
// as one rank holds them.
//
// Each trainable flat buffer (a stage of the model under full fine-tuning, a
// block's LoRA matrices under LoRA) holds values and gradients in the storage
// dtype T, which is what forward and backward use. This rank steps the range
// [begin, end) of it: all of it, unless the parallelism shards the optimizer
// state (parallel/shard_layout.hpp). When the policy keeps a master copy in
// M != T (bf16-mixed, fp16-mixed), a buffer also holds:
//   master  the weights of [begin, end) in M, which the optimizer updates; T
//           is re-rounded from it after every step
// and, whenever the step's gradient does not simply accumulate in the T
// gradient buffer:
//   grads   the step's gradient in M, for the whole buffer, or for
//           [begin, end) when gradients are sharded. Each micro-batch's T
//           gradient (one rounding of an f32-accumulated GEMM result) is
//           added here and the T buffer is cleared, so accumulation over
//           micro-batches is in M.
// Without a master copy (fp32, bf16-true) and unsharded, the optimizer works
// on the T buffers directly and micro-batches accumulate in T.
//
// When the parameters themselves are sharded (ZeRO-3), the T values of
// [begin, end) live in `values_shard` (owned by the parallel runtime), and
// the whole buffer exists only while its stage runs.
//
// Offloaded (strategy.optimizer_offload on a device, DeepSpeed's
// offload_optimizer), the optimizer steps [begin, end) on the host: its
// values in M (the master copy, or a copy of the T values when T is M) and
// its state live in host memory, the step's gradient is copied there, and
// the stepped values go back to the device in T. Gradients stay on the device.
//
// Everything lives in the device's memory (device/cpu.hpp), and the
// element-wise work below runs there as named functors.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ft/device/cpu.hpp"
#include "ft/models/parameters.hpp"
#include "ft/optim/runtime.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::parallel {

// acc[i] += g[i], in M's arithmetic.
template <class M, class G>
struct AddInto {
  M* acc;
  const G* g;
  FT_HOST_DEVICE void operator()(index_t i) const { acc[i] = M(acc_t<M>(acc[i]) + acc_t<M>(g[i])); }
};

// to[i] = from[i], rounded to To.
template <class To, class From>
struct Convert {
  To* to;
  const From* from;
  FT_HOST_DEVICE void operator()(index_t i) const { to[i] = To(float(from[i])); }
};

template <element T, class M, class Device = device::Cpu>
class TrainableSet {
public:
  static constexpr bool has_master = !std::is_same_v<T, M>;
  using Memory = typename Device::Memory;

  // A run of elements of a parameter buffer: the whole of it, or with
  // expert parallelism a block's routed experts or the rest of the block.
  struct Segment {
    index_t offset = 0, length = -1;  // length -1: to the buffer's end
  };

  struct Buffer {
    std::string name;
    index_t stage;  // the model stage whose backward completes its gradient (see models::StageHooks)
    models::ParameterBuffer<T, Memory>* params;
    index_t offset = 0, length = 0;  // the segment of params it is
    index_t begin = 0, end = 0;  // the range of the segment this rank steps
    bool sharded_grads = false;  // grads hold [begin, end) only
    // ZeRO-3: this rank's T values of [begin, end) live apart, in values_shard
    // (null when the range is empty: a rank may hold none of a buffer cut at
    // tensor boundaries).
    bool values_sharded = false;
    T* values_shard = nullptr;
    Tensor<M, Memory> master, grads;  // null data() when the run keeps none
    std::unique_ptr<optim::Runtime<M>> optimizer;  // over [begin, end)
    // Offloaded: the values the optimizer steps and the step gradient, on
    // the host, and the T values on their way back (when T is not M).
    bool offloaded = false;
    memory::HostVector<M> host_values, host_grads;
    memory::HostVector<T> host_storage;

    index_t size() const { return length; }
    // The segment's values and gradient (a micro-batch's, in T).
    T* values() { return params->values().data() + offset; }
    T* t_grads() { return params->grads().data() + offset; }
    void zero_t_grads() {
      if (params->grads().data()) Memory::zero(t_grads(), std::size_t(length) * sizeof(T));
    }
    index_t owned() const { return end - begin; }
    // The values the optimizer updates, from begin.
    M* owned_values() {
      if (offloaded) return host_values.data();
      if constexpr (has_master) return master.data();
      else return owned_storage();
    }
    // Bytes this buffer keeps in host memory (offloaded).
    std::size_t host_bytes() const {
      return (host_values.size() + host_grads.size()) * sizeof(M) + host_storage.size() * sizeof(T);
    }
    // The T values of [begin, end), where this rank keeps them.
    T* owned_storage() { return values_sharded ? values_shard : values() + begin; }
    // The step's gradient, from begin.
    M* owned_grads() {
      if (sharded_grads) return grads.data();
      return whole_grads() + begin;
    }
    // The step's gradient of the whole buffer (unsharded gradients only).
    M* whole_grads() {
      if constexpr (has_master) return grads.data();
      else return grads.data() ? grads.data() : t_grads();
    }
  };

  // Adds a buffer whose range [begin, end) this rank steps. `step_grads`:
  // keep a step gradient in M (not needed when the optimizer is fused into
  // backward: each stage is stepped from its fresh gradient). With
  // `values_sharded` the T values of the range are in `values_shard`. With
  // `offloaded` the optimizer (made for the host) steps the range there.
  void add(std::string name, index_t stage, models::ParameterBuffer<T, Memory>& params, Segment segment,
           index_t begin, index_t end, bool sharded_grads, bool step_grads,
           std::unique_ptr<optim::Runtime<M>> optimizer, bool values_sharded = false, T* values_shard = nullptr,
           bool offloaded = false) {
    if (!params.trainable()) throw Error("internal: buffer \"" + name + "\" is frozen and cannot train");
    const index_t length = segment.length < 0 ? params.size() - segment.offset : segment.length;
    Buffer b{std::move(name), stage, &params, segment.offset, length, begin, end, sharded_grads, values_sharded,
             values_shard, {}, {}, std::move(optimizer), false, {}, {}, {}};
    if (offloaded) {
      b.offloaded = true;
      b.host_values.resize(std::size_t(end - begin));
      b.host_grads.resize(std::size_t(end - begin));
      if constexpr (has_master) b.host_storage.resize(std::size_t(end - begin));
      pull_values(b);
    } else if constexpr (has_master) {
      b.master = Tensor<M, Memory>(Shape{end - begin}, typename Tensor<M, Memory>::Uninitialized{});
      Device::parallel_for(end - begin, Convert<M, T>{b.master.data(), b.owned_storage()});
    }
    if (step_grads && (has_master || sharded_grads))
      b.grads = Tensor<M, Memory>(Shape{sharded_grads ? end - begin : length});
    buffers_.push_back(std::move(b));
  }

  std::vector<Buffer>& buffers() { return buffers_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  index_t parameter_count() const {
    index_t n = 0;
    for (const Buffer& b : buffers_) n += b.size();
    return n;
  }

  void begin_step() {
    for (Buffer& b : buffers_) {
      b.zero_t_grads();
      if (b.grads.data()) Memory::zero(b.grads.data(), std::size_t(b.grads.numel()) * sizeof(M));
    }
  }

  // Moves a micro-batch's T gradient into the step's M gradient of the whole
  // buffer and clears it (unsharded gradients under a master copy).
  static void accumulate(Buffer& b) {
    if constexpr (has_master) {
      Device::parallel_for(b.size(), AddInto<M, T>{b.grads.data(), b.t_grads()});
      b.zero_t_grads();
    }
  }

  // Steps [begin, end) of b with the gradient `g` (from begin) and refreshes
  // the T values of that range from the master copy.
  static void step(Buffer& b, const M* g, double lr, std::int64_t optimizer_step) {
    if (b.offloaded) return step_on_host(b, g, lr, optimizer_step);
    b.optimizer->step(b.owned_values(), g, lr, optimizer_step);
    if constexpr (has_master) Device::parallel_for(b.owned(), Convert<T, M>{b.owned_storage(), b.master.data()});
  }

  // After loading values (resume, adapters): refresh the master copy from
  // where this rank keeps its T values.
  void sync_master_from_storage() {
    for (Buffer& b : buffers_) {
      if (b.offloaded) pull_values(b);
      else if constexpr (has_master)
        Device::parallel_for(b.owned(), Convert<M, T>{b.master.data(), b.owned_storage()});
    }
  }

private:
  // Offloaded: the host's values of b's range from the device's T values.
  static void pull_values(Buffer& b) {
    const std::size_t n = std::size_t(b.owned());
    if (n == 0) return;
    if constexpr (has_master) {
      Device::to_host(b.host_storage.data(), b.owned_storage(), n * sizeof(T));
      device::Cpu::parallel_for(b.owned(), Convert<M, T>{b.host_values.data(), b.host_storage.data()});
    } else {
      Device::to_host(b.host_values.data(), b.owned_storage(), n * sizeof(M));
    }
  }
  // Offloaded: the gradient to the host, the step there, the values back.
  static void step_on_host(Buffer& b, const M* g, double lr, std::int64_t optimizer_step) {
    const std::size_t n = std::size_t(b.owned());
    if (n == 0) return;
    Device::to_host(b.host_grads.data(), g, n * sizeof(M));
    b.optimizer->step(b.host_values.data(), b.host_grads.data(), lr, optimizer_step);
    if constexpr (has_master) {
      device::Cpu::parallel_for(b.owned(), Convert<T, M>{b.host_storage.data(), b.host_values.data()});
      Device::from_host(b.owned_storage(), b.host_storage.data(), n * sizeof(T));
    } else {
      Device::from_host(b.owned_storage(), b.host_values.data(), n * sizeof(M));
    }
  }

  std::vector<Buffer> buffers_;
};

}  // namespace ft::parallel
