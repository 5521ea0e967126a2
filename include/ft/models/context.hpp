#pragma once
// What one micro-batch in flight keeps between its forward and its backward:
// the residual stream at every stage boundary, each block's saved
// activations, the head's normalised input, the loss. The model's stages
// hold only weights; everything a forward leaves for its backward lives
// here, so several micro-batches can be in flight at once (a pipeline
// schedule keeps one context per micro-batch it has started and not
// finished) and the weights are shared by all of them.
//
// Memory options act on a context:
//   checkpointing  a checkpointed block saves nothing of its own: its forward
//                  writes into the model's one shared set, and its backward
//                  recomputes it from the block's input, the one thing kept
//   offloading     the stream has two device buffers used in turn; each
//                  block's input goes to a host copy after its forward and
//                  comes back for its backward
// Buffers are made on first use, for the stages that run on this context,
// and kept while the batch keeps its shape. They live in the device's
// memory, and so does the copy of the batch's token arrays the stages read
// (on the CPU, the batch's own arrays).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ft/device/cpu.hpp"
#include "ft/device/upload.hpp"
#include "ft/models/batch.hpp"
#include "ft/models/sequence_objective.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/nn/moe.hpp"
#include "ft/tensor/array.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::models {

// Trading compute or copies for memory; all of it leaves results bit-equal.
//   checkpoint_every  0: every block keeps its activations; K >= 1: blocks
//                     0, K, 2K, ... keep only their input and recompute the
//                     rest in backward (1 is every block)
//   offload_inputs    each block's input goes to a host buffer after forward
//                     and comes back for its backward, so the device keeps two
//                     residual buffers instead of one per block. On the CPU
//                     both sides are host memory and this only costs copies;
//                     it exists for accelerators and composes with checkpointing.
struct MemoryOptions {
  index_t checkpoint_every = 0;
  bool offload_inputs = false;

  bool checkpoints(index_t layer) const { return checkpoint_every > 0 && layer % checkpoint_every == 0; }
};

// A layout visitor that makes each buffer of `set` anew at its shape.
template <class Set>
auto make_into(Set& set) {
  return [&set]<class U, class Space>(Tensor<U, Space> Set::*member, const Shape& shape) {
    set.*member = Tensor<U, Space>(shape);
  };
}

// What a block's forward keeps for its backward.
template <element T, memory::memory_space Space = memory::Host>
struct BlockActivations {
  using A = acc_t<T>;
  Tensor<T, Space> n1, qkv, attention, mid, n2, mlp_in, hidden;
  Tensor<A, Space> n1_mean, n1_rstd, lse, n2_mean, n2_rstd;
  Tensor<T, Space> qk_input;  // with qk_norm: the query and key heads before their norm
  Tensor<A, Space> qk_rstd;
  // With sandwich_norms: each branch's output before its norm, and the norm's statistics.
  Tensor<T, Space> attention_branch, mlp_branch;
  Tensor<A, Space> attention_branch_mean, attention_branch_rstd, mlp_branch_mean, mlp_branch_rstd;
  // In a sparse layer (nn/moe.hpp): the router's logits; the rows this
  // rank's experts multiply, expert after expert (the N k sorted rows, or
  // with expert parallelism those the group sends them): their inputs, the
  // gate and up products, the hidden rows; the N k sorted rows' outputs;
  // the shared expert's output and gate.
  Tensor<T, Space> router_logits, expert_x, expert_in, expert_hidden, expert_out, shared_out, shared_gate_logit;
  Tensor<A, Space> shared_gate;
  // The routing (and with expert parallelism, the rows' route), on the
  // host, and the index arrays and weights the device's kernels read
  // (small: a few numbers per token, left out of the layout).
  nn::Routing<A> routing;
  nn::ExpertRoute route;
  memory::Array<std::int32_t, Space> token_at, row_of, received_at, local_at;
  memory::Array<A, Space> route_weight;

  // Its buffers and their shapes for `rows` rows of `tokens` tokens, in the
  // order they are made: resize() makes them, the memory estimate counts
  // them (estimate/memory.hpp), so the two cannot differ.
  template <class Visit>
  static void layout(const TransformerConfig& c, index_t rows, index_t tokens, Visit&& visit) {
    const index_t N = rows * tokens, C = c.hidden_size;
    visit(&BlockActivations::n1, Shape{N, C});
    visit(&BlockActivations::n1_mean, Shape{N});
    visit(&BlockActivations::n1_rstd, Shape{N});
    visit(&BlockActivations::qkv, Shape{N, c.qkv_width()});
    if (c.qk_norm) {
      visit(&BlockActivations::qk_input, Shape{N, (c.num_heads + c.num_kv_heads) * c.head_dim});
      visit(&BlockActivations::qk_rstd, Shape{N * (c.num_heads + c.num_kv_heads)});
    }
    visit(&BlockActivations::attention, Shape{N, c.num_heads * c.head_dim});
    visit(&BlockActivations::lse, Shape{rows * c.num_heads * tokens});
    if (c.sandwich_norms) {
      visit(&BlockActivations::attention_branch, Shape{N, C});
      visit(&BlockActivations::attention_branch_mean, Shape{N});
      visit(&BlockActivations::attention_branch_rstd, Shape{N});
    }
    visit(&BlockActivations::mid, Shape{N, C});
    visit(&BlockActivations::n2, Shape{N, C});
    visit(&BlockActivations::n2_mean, Shape{N});
    visit(&BlockActivations::n2_rstd, Shape{N});
    visit(&BlockActivations::mlp_in, Shape{N, c.mlp_in_width()});
    visit(&BlockActivations::hidden, Shape{N, c.widest_mlp()});
    if (c.sandwich_norms) {
      visit(&BlockActivations::mlp_branch, Shape{N, C});
      visit(&BlockActivations::mlp_branch_mean, Shape{N});
      visit(&BlockActivations::mlp_branch_rstd, Shape{N});
    }
    if (c.moe.sparse_layers() > 0) {
      const index_t R = N * c.moe.top_k, Rl = c.moe.local_rows(N), F = c.moe.expert_size;
      visit(&BlockActivations::router_logits, Shape{N, c.moe.experts});
      visit(&BlockActivations::expert_x, Shape{Rl, C});
      visit(&BlockActivations::expert_in, Shape{Rl, 2 * F});
      visit(&BlockActivations::expert_hidden, Shape{Rl, F});
      visit(&BlockActivations::expert_out, Shape{R, C});
      if (c.moe.shared_expert_size > 0) visit(&BlockActivations::shared_out, Shape{N, C});
      if (c.moe.gated_shared_expert()) {
        visit(&BlockActivations::shared_gate_logit, Shape{N, 1});
        visit(&BlockActivations::shared_gate, Shape{N});
      }
    }
  }

  void resize(const TransformerConfig& c, const Batch& batch) {
    if (n1.size(0) == batch.rows() && lse.numel() == batch.B * c.num_heads * batch.T) return;
    layout(c, batch.B, batch.T, make_into(*this));
  }
};

// Gradient buffers of one block's backward; one set serves every block and
// every context, since one backward runs at a time.
template <element T, memory::memory_space Space = memory::Host>
struct BlockScratch {
  Tensor<T, Space> d_norm_a, d_norm_b, d_attention, d_qkv, d_mlp_in, d_hidden;
  Tensor<T, Space> d_branch;  // with a residual_multiplier: a branch's output gradient
  Tensor<T, Space> d_branch_norm;  // with sandwich_norms: the gradient of a branch's output before its norm
  // In a sparse layer: the gradients of the sorted rows' outputs and
  // inputs, of the local experts' hidden rows and gate and up products
  // (as BlockActivations), the router logits' and the shared expert's
  // output and gate logit's.
  Tensor<T, Space> d_expert_out, d_expert_hidden, d_expert_in, d_expert_x, d_router_logits, d_shared_out,
      d_shared_gate;
  Tensor<acc_t<T>, Space> d_route_weight;

  template <class Visit>
  static void layout(const TransformerConfig& c, index_t N, Visit&& visit) {
    visit(&BlockScratch::d_norm_a, Shape{N, c.hidden_size});
    visit(&BlockScratch::d_norm_b, Shape{N, c.hidden_size});
    visit(&BlockScratch::d_attention, Shape{N, c.num_heads * c.head_dim});
    visit(&BlockScratch::d_qkv, Shape{N, c.qkv_width()});
    visit(&BlockScratch::d_mlp_in, Shape{N, c.mlp_in_width()});
    visit(&BlockScratch::d_hidden, Shape{N, c.widest_mlp()});
    if (c.residual_multiplier != 1) visit(&BlockScratch::d_branch, Shape{N, c.hidden_size});
    if (c.sandwich_norms) visit(&BlockScratch::d_branch_norm, Shape{N, c.hidden_size});
    if (c.moe.sparse_layers() > 0) {
      const index_t R = N * c.moe.top_k, Rl = c.moe.local_rows(N), F = c.moe.expert_size;
      visit(&BlockScratch::d_expert_out, Shape{R, c.hidden_size});
      visit(&BlockScratch::d_expert_hidden, Shape{Rl, F});
      visit(&BlockScratch::d_expert_in, Shape{Rl, 2 * F});
      visit(&BlockScratch::d_expert_x, Shape{R, c.hidden_size});
      visit(&BlockScratch::d_router_logits, Shape{N, c.moe.experts});
      visit(&BlockScratch::d_route_weight, Shape{R});
      if (c.moe.gated_shared_expert()) {
        visit(&BlockScratch::d_shared_out, Shape{N, c.hidden_size});
        visit(&BlockScratch::d_shared_gate, Shape{N, 1});
      }
    }
  }
  void resize(const TransformerConfig& c, index_t N) {
    if (d_norm_a.size(0) != N) layout(c, N, make_into(*this));
  }
};

// A block's projections' output gradients, kept from its backward for its
// deferred weight gradients: the MLP's output (d y), the MLP's first
// projection, the attention's output projection, the rotated q, k, v.
template <element T, memory::memory_space Space = memory::Host>
struct DeferredGradients {
  Tensor<T, Space> output, mlp_in, attention_output, qkv;

  template <class Visit>
  static void layout(const TransformerConfig& c, index_t N, Visit&& visit) {
    visit(&DeferredGradients::output, Shape{N, c.hidden_size});
    visit(&DeferredGradients::mlp_in, Shape{N, c.mlp_in_width()});
    visit(&DeferredGradients::attention_output, Shape{N, c.hidden_size});
    visit(&DeferredGradients::qkv, Shape{N, c.qkv_width()});
  }
  void resize(const TransformerConfig& c, index_t N) {
    if (output.size(0) != N) layout(c, N, make_into(*this));
  }
};

// What the head keeps: its normalised input and, when training, that
// input's gradient, which its forward already computes.
template <element T, memory::memory_space Space = memory::Host>
struct HeadActivations {
  using A = acc_t<T>;
  Tensor<T, Space> normed, d_normed;
  Tensor<A, Space> mean, rstd;

  template <class Visit>
  static void layout(index_t N, index_t C, Visit&& visit) {
    visit(&HeadActivations::normed, Shape{N, C});
    visit(&HeadActivations::d_normed, Shape{N, C});
    visit(&HeadActivations::mean, Shape{N});
    visit(&HeadActivations::rstd, Shape{N});
  }
  void resize(index_t N, index_t C) {
    if (normed.size(0) != N) layout(N, C, make_into(*this));
  }
};

// What the embedding keeps when a norm follows it (embedding_norm, Bloom):
// the norm's input and its statistics.
template <element T, memory::memory_space Space = memory::Host>
struct EmbeddingActivations {
  using A = acc_t<T>;
  Tensor<T, Space> input;
  Tensor<A, Space> mean, rstd;

  template <class Visit>
  static void layout(const TransformerConfig& c, index_t N, Visit&& visit) {
    if (!c.embedding_norm) return;
    visit(&EmbeddingActivations::input, Shape{N, c.hidden_size});
    visit(&EmbeddingActivations::mean, Shape{N});
    visit(&EmbeddingActivations::rstd, Shape{N});
  }
  void resize(const TransformerConfig& c, index_t N) {
    if (c.embedding_norm && input.size(0) != N) layout(c, N, make_into(*this));
  }
};

// What the model's stages share across contexts: the activations every
// checkpointed block recomputes into, and the backward scratch.
template <element T, memory::memory_space Space = memory::Host>
struct SharedActivations {
  BlockActivations<T, Space> checkpointed;
  BlockScratch<T, Space> scratch;
};

// A batch's token arrays where a device's kernels read them: the batch's
// own vectors on the host, a copy in the device's memory elsewhere.
template <class Device>
class BatchArrays {
public:
  void upload(const Batch& batch) {
    if constexpr (std::is_same_v<typename Device::Memory, memory::Host>) {
      input_ids_ = batch.input_ids.data();
      targets_ = batch.targets.data();
      positions_ = batch.positions.data();
      documents_ = batch.documents.empty() ? nullptr : batch.documents.data();
    } else {
      input_ids_ = device::upload<Device>(input_ids_copy_, batch.input_ids);
      targets_ = device::upload<Device>(targets_copy_, batch.targets);
      positions_ = device::upload<Device>(positions_copy_, batch.positions);
      documents_ = batch.documents.empty() ? nullptr : device::upload<Device>(documents_copy_, batch.documents);
    }
  }
  const std::int32_t* input_ids() const { return input_ids_; }
  const std::int32_t* targets() const { return targets_; }
  const std::int32_t* positions() const { return positions_; }
  const std::int32_t* documents() const { return documents_; }  // null: one document per row

private:
  using Copy = memory::Array<std::int32_t, typename Device::Memory>;
  const std::int32_t *input_ids_ = nullptr, *targets_ = nullptr, *positions_ = nullptr, *documents_ = nullptr;
  Copy input_ids_copy_, targets_copy_, positions_copy_, documents_copy_;
};

// How a context's forward ends.
struct HeadOptions {
  double token_count = 1;  // divisor of the loss gradient (see nn/cross_entropy.hpp)
  bool backward = true;
  index_t chunk_rows = 256;
  SequenceObjective* objective = nullptr;  // scores whole sequences instead of tokens (not owned)
};

template <element T, class Device = device::Cpu>
class Context {
public:
  using Memory = typename Device::Memory;

  Context(const TransformerConfig& config, const MemoryOptions& memory, SharedActivations<T, Memory>& shared)
      : config_(&config), memory_(memory), shared_(&shared), blocks_(std::size_t(config.num_layers)) {}
  Context(const Context&) = delete;  // stages keep pointers into it
  Context& operator=(const Context&) = delete;

  // Starts a micro-batch on this context: its buffers follow the batch's
  // shape. The batch (and logits, when asked for) must outlive its backward.
  void begin(const Batch& batch, const HeadOptions& options, T* logits = nullptr) {
    const index_t N = batch.rows();
    if (batch.positions.size() != std::size_t(N) || batch.targets.size() != std::size_t(N))
      throw Error("a batch needs positions and targets for each of its " + std::to_string(N) + " tokens");
    batch_ = &batch;
    arrays_.upload(batch);
    options_ = options;
    logits_ = logits;
    loss = 0;
  }

  const Batch& batch() const { return *batch_; }
  // The batch's token arrays in the device's memory.
  const BatchArrays<Device>& arrays() const { return arrays_; }
  const HeadOptions& options() const { return options_; }
  T* logits() const { return logits_; }
  const TransformerConfig& config() const { return *config_; }
  const MemoryOptions& memory() const { return memory_; }
  BlockScratch<T, Memory>& scratch() { return shared_->scratch; }

  // The summed loss over the batch's scored targets, once the head has run
  // (with the load-balancing loss's share when the model adds it).
  double loss = 0;

  // Each sparse layer's counts for the load-balancing loss (nn/moe.hpp),
  // left by its forward: every sparse layer's forward runs before any
  // backward reads them, and a recomputed forward leaves the same.
  template <class A>
  void set_router_counts(index_t layer, const nn::Routing<A>& routing) {
    if (router_counts_.size() != std::size_t(config_->num_layers)) router_counts_.resize(std::size_t(config_->num_layers));
    router_counts_[std::size_t(layer)] = {routing.picks, routing.prob_sums, routing.counted_tokens};
  }
  // HF's load-balancing loss over the batch's sparse layers, and its
  // gradient on each probability of expert e (the same for every token).
  double router_aux_loss() const {
    const RouterTotals t = router_totals();
    double aux = 0;
    if (t.rows == 0) return 0;  // every token padding
    for (std::size_t e = 0; e < t.picks.size(); ++e) aux += t.picks[e] / t.rows * (t.prob_sums[e] / t.rows);
    return double(t.picks.size()) * aux;
  }
  std::vector<acc_t<T>> router_aux_gradient(double scale) const {
    const RouterTotals t = router_totals();
    std::vector<acc_t<T>> d(t.picks.size());
    if (t.rows == 0) return d;
    for (std::size_t e = 0; e < d.size(); ++e) d[e] = acc_t<T>(scale * double(d.size()) * t.picks[e] / t.rows / t.rows);
    return d;
  }
  // Backward leaves the blocks' weight gradients for Transformer::weights
  // (zero-bubble pipelines run them where the pipeline would wait).
  bool defer_weight_gradients = false;
  DeferredGradients<T, Memory>& deferred(index_t l) {
    if (deferred_.size() != std::size_t(config_->num_layers)) deferred_.resize(std::size_t(config_->num_layers));
    return deferred_[std::size_t(l)];
  }

  // The residual stream entering stage s: block s for s < L, the head for
  // s = L; the embedding writes stream(0).
  T* stream(index_t s) {
    const index_t L = config_->num_layers;
    const std::size_t count = memory_.offload_inputs ? 2 : std::size_t(L + 1);
    if (streams_.size() != count) streams_.resize(count);
    return sized(streams_[std::size_t(s) % count]);
  }
  // The gradient of the residual stream at the stage boundary a backward is
  // at: the gradient of a stage's output going in, of its input coming out.
  T* gradient() { return sized(gradient_); }

  // Where block l's forward saves what its backward reads: its own set, or
  // the shared set when the block is checkpointed.
  BlockActivations<T, Memory>& activations(index_t l) {
    BlockActivations<T, Memory>& a = recomputes(l) ? shared_->checkpointed : blocks_[std::size_t(l)];
    a.resize(*config_, *batch_);
    return a;
  }
  bool recomputes(index_t l) const { return memory_.checkpoints(l); }
  HeadActivations<T, Memory>& head() {
    head_.resize(batch_->rows(), config_->hidden_size);
    return head_;
  }
  EmbeddingActivations<T, Memory>& embedding() {
    embedding_.resize(*config_, batch_->rows());
    return embedding_;
  }

  // Offloading: block l's input leaves for host memory after its forward ...
  void offload_input(index_t l) {
    if (!memory_.offload_inputs) return;
    const index_t n = batch_->rows() * config_->hidden_size;
    if (offloaded_.size() != std::size_t(config_->num_layers)) offloaded_.resize(std::size_t(config_->num_layers));
    offloaded_[std::size_t(l)].resize(std::size_t(n));
    Device::to_host(offloaded_[std::size_t(l)].data(), stream(l), std::size_t(n) * sizeof(T));
  }
  // ... and comes back before its backward.
  void restore_input(index_t l) {
    if (!memory_.offload_inputs) return;
    Device::from_host(sized(restored_), offloaded_[std::size_t(l)].data(),
                      std::size_t(batch_->rows() * config_->hidden_size) * sizeof(T));
  }
  // The input block l's backward reads: where its forward read it, or its restored copy.
  const T* saved_input(index_t l) { return memory_.offload_inputs ? restored_.data() : stream(l); }

private:
  struct RouterCounts {
    std::vector<double> picks, prob_sums;
    index_t rows = 0;
  };
  struct RouterTotals {
    std::vector<double> picks, prob_sums;
    double rows = 0;
  };
  RouterTotals router_totals() const {
    RouterTotals t;
    for (const RouterCounts& layer : router_counts_) {
      if (layer.rows == 0) continue;
      t.picks.resize(layer.picks.size());
      t.prob_sums.resize(layer.picks.size());
      for (std::size_t e = 0; e < layer.picks.size(); ++e) {
        t.picks[e] += layer.picks[e];
        t.prob_sums[e] += layer.prob_sums[e];
      }
      t.rows += double(layer.rows);
    }
    return t;
  }

  T* sized(Tensor<T, Memory>& t) {
    const index_t N = batch_->rows();
    if (t.size(0) != N) t = Tensor<T, Memory>(Shape{N, config_->hidden_size});
    return t.data();
  }

  const TransformerConfig* config_;
  MemoryOptions memory_;
  SharedActivations<T, Memory>* shared_;
  const Batch* batch_ = nullptr;
  BatchArrays<Device> arrays_;
  HeadOptions options_;
  T* logits_ = nullptr;
  std::vector<Tensor<T, Memory>> streams_;
  Tensor<T, Memory> gradient_, restored_;
  std::vector<BlockActivations<T, Memory>> blocks_;
  HeadActivations<T, Memory> head_;
  EmbeddingActivations<T, Memory> embedding_;
  std::vector<DeferredGradients<T, Memory>> deferred_;
  std::vector<memory::HostVector<T>> offloaded_;
  std::vector<RouterCounts> router_counts_;
};

}  // namespace ft::models
