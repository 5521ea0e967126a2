#pragma once
// One transformer block as a stage: its parameters in one flat buffer, the
// activations it saves for backward, and a hand-written forward and backward.
// Every family's block is this one, configured by TransformerConfig:
//
//   sequential (Llama):   m = x + O(attn(rope(QKV(n1(x)))));  y = m + Down(act(In(n2(m))))
//   parallel (GPT-NeoX):  y = x + O(attn(rope(QKV(n1(x))))) + Down(act(In(n2(x))))
//
// With qk_norm (Qwen3) each query and key head is RMS-normalised between QKV
// and rope (nn/head_norm.hpp). With sandwich_norms (Gemma 2) each branch's
// output, O(...) and Down(...), passes through a norm of its own before it
// joins; with a residual_multiplier (Granite) it is then scaled by it.
// In a sparse layer (Mixtral, Qwen-MoE) the MLP is a mixture of experts
// (nn/moe.hpp), with Qwen2-MoE's shared expert as the layer's dense MLP.
//
// The block reads its input x from the context's residual stream and writes
// its output y after it; x is the one activation a checkpointed block keeps,
// everything else here can be recomputed from it.
//
// Backward works in place on the context's gradient of the residual stream:
// it comes in as d y and leaves as d x (both paths add into it, see
// nn/README.md).
//
// The device (device/cpu.hpp) holds the parameters and activations and runs
// every piece; the layer code is the same for all.
#include <cstring>
#include <functional>
#include <vector>
#include <string>

#include "ft/models/batch.hpp"
#include "ft/models/context.hpp"
#include "ft/models/expert_exchange.hpp"
#include "ft/models/linear_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/stage.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/device/upload.hpp"
#include "ft/nn/attention_rows.hpp"
#include "ft/nn/head_norm.hpp"
#include "ft/nn/linear.hpp"
#include "ft/nn/mlp.hpp"
#include "ft/nn/moe.hpp"
#include "ft/nn/norm.hpp"
#include "ft/nn/residual.hpp"
#include "ft/nn/rope.hpp"

namespace ft::models {

template <element T, class Device = device::Cpu>
class Block final : public Stage<T, Device> {
public:
  using A = acc_t<T>;
  using Memory = typename Device::Memory;
  using Parameters = ParameterBuffer<T, Memory>;
  using Activations = BlockActivations<T, Memory>;

  // A frozen block (trainable = false) keeps no parameter gradients and skips
  // computing them; its input gradient still flows. The parameters are
  // declared here; the model allocates them (models/transformer.hpp).
  Block(const TransformerConfig& config, index_t layer, bool trainable = true)
      : c_(config), layer_(layer), w_((declare(params_, c_, layer_), Weights::of(params_, c_, layer_))) {
    params_.set_trainable(trainable);
    inv_freq_ = device_table(nn::rope_inverse_frequencies(c_.rope_of(layer_)));
    if (!c_.rope_of(layer_).long_factors.empty())
      long_inv_freq_ = device_table(nn::rope_inverse_frequencies(c_.rope_of(layer_), /*long_factors=*/true));
  }

  // A block's parameters, declared into any buffer: the block's own, or one
  // the memory estimate only counts (estimate/memory.hpp).
  template <class Buffer>
  static void declare(Buffer& params, const TransformerConfig& c, index_t layer) {
    const index_t C = c.hidden_size, HD = c.num_heads * c.head_dim, F = c.mlp_width(layer);
    const bool layer_norm = c.norm == nn::NormKind::layer;
    params.declare("attn_norm.weight", {C});
    if (layer_norm) params.declare("attn_norm.bias", {C});
    params.declare("qkv.weight", {c.qkv_width(), C});
    if (c.qkv_bias) params.declare("qkv.bias", {c.qkv_width()});
    if (c.qk_norm) {
      params.declare("q_norm.weight", {c.head_dim});
      params.declare("k_norm.weight", {c.head_dim});
    }
    params.declare("o.weight", {C, HD});
    if (c.o_bias) params.declare("o.bias", {C});
    if (c.sandwich_norms) {
      params.declare("attn_post_norm.weight", {C});
      if (layer_norm) params.declare("attn_post_norm.bias", {C});
    }
    params.declare("mlp_norm.weight", {C});
    if (layer_norm) params.declare("mlp_norm.bias", {C});
    if (F > 0) {
      params.declare("mlp_in.weight", {c.mlp_in_width(layer), C});
      if (c.mlp_bias) params.declare("mlp_in.bias", {c.mlp_in_width(layer)});
      params.declare("mlp_out.weight", {C, F});
      if (c.mlp_bias) params.declare("mlp_out.bias", {C});
    }
    if (c.moe.sparse_at(layer)) {
      params.declare("router.weight", {c.moe.experts, C});
      if (F > 0 && c.moe.shared_expert_gate) params.declare("shared_gate.weight", {1, C});
    }
    if (c.sandwich_norms) {
      params.declare("mlp_post_norm.weight", {C});
      if (layer_norm) params.declare("mlp_post_norm.bias", {C});
    }
    // The routed experts come last, windows of the whole stack
    // (ParameterBuffer::declare_rows): this copy's run of experts, expert
    // e's gate rows, then its up rows.
    if (c.moe.sparse_at(layer)) {
      const index_t E = c.moe.experts, El = c.moe.local_experts(), first = c.moe.first_local_expert();
      const index_t FE = c.moe.expert_size;
      params.declare_rows("experts.gate_up.weight", {El * 2 * FE, C}, first * 2 * FE, E * 2 * FE);
      params.declare_rows("experts.down.weight", {El * C, FE}, first * C, E * C);
    }
  }

  // The block's parameters, found once in its buffer: every call reads them
  // through these slots. The optional ones are present when declare() declares them.
  struct Weights {
    ParameterSlot attn_norm_weight, attn_norm_bias, qkv_weight, qkv_bias, o_weight, o_bias;
    ParameterSlot mlp_norm_weight, mlp_norm_bias, mlp_in_weight, mlp_in_bias, mlp_out_weight, mlp_out_bias;
    ParameterSlot q_norm_weight, k_norm_weight;
    ParameterSlot attn_post_norm_weight, attn_post_norm_bias, mlp_post_norm_weight, mlp_post_norm_bias;
    ParameterSlot router_weight, experts_gate_up, experts_down, shared_gate_weight;

    static Weights of(const Parameters& p, const TransformerConfig& c, index_t layer) {
      const bool layer_norm = c.norm == nn::NormKind::layer, sandwich = c.sandwich_norms;
      const bool dense = c.mlp_width(layer) > 0, sparse = c.moe.sparse_at(layer);
      return {.attn_norm_weight = p.slot("attn_norm.weight"),
              .attn_norm_bias = p.slot_if(layer_norm, "attn_norm.bias"),
              .qkv_weight = p.slot("qkv.weight"),
              .qkv_bias = p.slot_if(c.qkv_bias, "qkv.bias"),
              .o_weight = p.slot("o.weight"),
              .o_bias = p.slot_if(c.o_bias, "o.bias"),
              .mlp_norm_weight = p.slot("mlp_norm.weight"),
              .mlp_norm_bias = p.slot_if(layer_norm, "mlp_norm.bias"),
              .mlp_in_weight = p.slot_if(dense, "mlp_in.weight"),
              .mlp_in_bias = p.slot_if(dense && c.mlp_bias, "mlp_in.bias"),
              .mlp_out_weight = p.slot_if(dense, "mlp_out.weight"),
              .mlp_out_bias = p.slot_if(dense && c.mlp_bias, "mlp_out.bias"),
              .q_norm_weight = p.slot_if(c.qk_norm, "q_norm.weight"),
              .k_norm_weight = p.slot_if(c.qk_norm, "k_norm.weight"),
              .attn_post_norm_weight = p.slot_if(sandwich, "attn_post_norm.weight"),
              .attn_post_norm_bias = p.slot_if(sandwich && layer_norm, "attn_post_norm.bias"),
              .mlp_post_norm_weight = p.slot_if(sandwich, "mlp_post_norm.weight"),
              .mlp_post_norm_bias = p.slot_if(sandwich && layer_norm, "mlp_post_norm.bias"),
              .router_weight = p.slot_if(sparse, "router.weight"),
              .experts_gate_up = p.slot_if(sparse, "experts.gate_up.weight"),
              .experts_down = p.slot_if(sparse, "experts.down.weight"),
              .shared_gate_weight = p.slot_if(sparse && dense && c.moe.shared_expert_gate, "shared_gate.weight")};
    }
  };

  // Adds an adapter to this block's linear layers (null removes it). Not owned.
  void set_adapter(LinearAdapter<T, Device>* adapter) { adapter_ = adapter; }
  // With expert parallelism: how the rows reach the experts. Not owned.
  void set_expert_exchange(ExpertExchange<T, Device>* exchange) { exchange_ = exchange; }
  index_t layer() const { return layer_; }

  Parameters& parameters() override { return params_; }
  const Parameters& parameters() const { return params_; }
  std::string prefix() const override { return "layers." + std::to_string(layer_) + "."; }

  void forward(Context<T, Device>& context) override {
    forward(context.stream(layer_ + 1), context.stream(layer_), context, context.activations(layer_));
  }

  // A checkpointed block first recomputes its activations; its output
  // buffer is free by now (the stages after it are done with this context).
  // When the context defers weight gradients, the four projections' output
  // gradients are kept for weight_gradients() instead.
  void backward(Context<T, Device>& context) override {
    const T* x = context.saved_input(layer_);
    Activations& a = context.activations(layer_);
    if (context.recomputes(layer_)) forward(context.stream(layer_ + 1), x, context, a);
    backward(context.gradient(), x, context, a, context.defer_weight_gradients ? &context.deferred(layer_) : nullptr);
  }

  // What writes a block's attention output (a.attention) from its rotated
  // queries, keys and values (a.qkv): causal attention within the batch
  // when training, attention over a key/value cache at inference (infer/).
  using Attend = std::function<void(Activations& a)>;

  // The rotary frequencies of a training batch: LongRoPE's long ones for
  // every row once the batch reaches the limit, as HF decides per forward.
  nn::RopeTables rope_tables(const Batch& batch) const {
    return {nn::takes_long_factors(c_.rope_of(layer_), batch.positions) ? long_inv_freq() : inv_freq()};
  }
  // Row by row: the long ones for the rows flagged in long_rows (the
  // device's memory; null: none), each sequence by its own length.
  nn::RopeTables rope_tables(const std::uint8_t* long_rows) const {
    return {inv_freq(), long_rows ? long_inv_freq_.data() : nullptr, long_rows};
  }

  // y = block(x) for N rows at the given positions (the device's memory),
  // rotated by `rope`, saving into a what backward reads; `attend` is the
  // attention step, the rest is the same math for both.
  void forward(T* y, const T* x, index_t N, const std::int32_t* positions, const nn::RopeTables& rope,
               Activations& a, const Attend& attend) {
    const index_t C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };

    nn::norm_forward<Device>(c_.norm, a.n1.data(), a.n1_mean.data(), a.n1_rstd.data(), x, p(w_.attn_norm_weight),
                             p(w_.attn_norm_bias), N, C, A(c_.norm_eps));
    nn::linear_forward<Device>(a.qkv.data(), a.n1.data(), p(w_.qkv_weight), p(w_.qkv_bias), N, C, c_.qkv_width());
    adapt(LinearSlot::qkv, a.qkv.data(), a.n1.data(), N);
    if (c_.qk_norm)
      nn::head_norm_forward<Device>(a.qkv.data(), a.qk_input.data(), a.qk_rstd.data(), p(w_.q_norm_weight),
                                    p(w_.k_norm_weight), N, c_.num_heads, c_.num_kv_heads, c_.head_dim, A(c_.norm_eps),
                                    nn::norm_weight_offset<A>(c_.norm));
    nn::rope_forward<Device>(a.qkv.data(), positions, rope, N, c_.num_heads, c_.num_kv_heads, c_.head_dim,
                             float(c_.rope_of(layer_).attention_factor));
    attend(a);
    // Sequential: mid = x + O(att). Parallel: the attention branch goes to y, mid is only scratch.
    T* attention_out = c_.parallel_residual ? y : a.mid.data();
    T* attention_branch = c_.sandwich_norms ? a.attention_branch.data() : attention_out;
    nn::linear_forward<Device>(attention_branch, a.attention.data(), p(w_.o_weight), p(w_.o_bias), N, HD, C);
    adapt(LinearSlot::o, attention_branch, a.attention.data(), N);
    finish_branch(attention_out, a, /*mlp=*/false, N);
    if (!c_.parallel_residual) nn::add_into<Device>(a.mid.data(), x, N * C);

    const T* mlp_input = c_.parallel_residual ? x : a.mid.data();
    nn::norm_forward<Device>(c_.norm, a.n2.data(), a.n2_mean.data(), a.n2_rstd.data(), mlp_input,
                             p(w_.mlp_norm_weight), p(w_.mlp_norm_bias), N, C, A(c_.norm_eps));
    // Parallel: the MLP branch goes to mid, then y = x + both. Sequential: y = mid + the branch.
    T* mlp_out = c_.parallel_residual ? a.mid.data() : y;
    T* mlp_branch = c_.sandwich_norms ? a.mlp_branch.data() : mlp_out;
    if (c_.moe.sparse_at(layer_)) experts_forward(mlp_branch, a, N);
    else dense_mlp_forward(mlp_branch, a, N);
    finish_branch(mlp_out, a, /*mlp=*/true, N);
    nn::add_into<Device>(y, a.mid.data(), N * C);
    if (c_.parallel_residual) nn::add_into<Device>(y, x, N * C);
  }

  // The projections' weight and bias gradients, from what backward kept.
  void weight_gradients(Context<T, Device>& context) override {
    if (!context.defer_weight_gradients || !params_.trainable()) return;
    const index_t N = context.batch().rows(), C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    const Activations& a = context.activations(layer_);
    const DeferredGradients<T, Memory>& d = context.deferred(layer_);
    auto g = [&](ParameterSlot slot) { return params_.grad(slot); };
    // A sparse layer's MLP gradients are complete after its backward (not deferred).
    if (!c_.moe.sparse_at(layer_)) {
      nn::linear_backward<Device, T>(nullptr, g(w_.mlp_out_weight), g(w_.mlp_out_bias), d.output.data(),
                                     a.hidden.data(), nullptr, N, c_.intermediate_size, C);
      nn::linear_backward<Device, T>(nullptr, g(w_.mlp_in_weight), g(w_.mlp_in_bias), d.mlp_in.data(), a.n2.data(),
                                     nullptr, N, C, c_.mlp_in_width(layer_));
    }
    nn::linear_backward<Device, T>(nullptr, g(w_.o_weight), g(w_.o_bias), d.attention_output.data(),
                                   a.attention.data(), nullptr, N, HD, C);
    nn::linear_backward<Device, T>(nullptr, g(w_.qkv_weight), g(w_.qkv_bias), d.qkv.data(), a.n1.data(), nullptr, N, C,
                                   c_.qkv_width());
  }

private:
  // Training's forward: causal attention within the batch (documents kept apart).
  void forward(T* y, const T* x, Context<T, Device>& context, Activations& a) {
    const std::int32_t* documents = context.arrays().documents();
    const nn::AttentionShape shape = attention_shape(context.batch());
    forward(y, x, context.batch().rows(), context.arrays().positions(), rope_tables(context.batch()), a,
            [&](Activations& saved) {
      nn::attention_forward_on<Device>(saved.attention.data(), saved.lse.data(), saved.qkv.data(), documents, shape);
    });
    if (c_.moe.sparse_at(layer_)) {
      nn::count_routes(a.routing, [&batch = context.batch()](index_t n) { return batch.attends(n); });
      context.set_router_counts(layer_, a.routing);
    }
  }

  // dres: d y in, d x out; x: the input forward read. With `deferred`, the
  // projections' weight gradients are left out and their output gradients
  // copied there.
  void backward(T* dres, const T* x, Context<T, Device>& context, const Activations& a,
                DeferredGradients<T, Memory>* deferred) {
    const Batch& batch = context.batch();
    BlockScratch<T, Memory>& s = context.scratch();
    const index_t N = batch.rows(), C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    s.resize(c_, N);
    if (deferred) deferred->resize(c_, N);
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };
    auto g = [&](ParameterSlot slot) { return params_.grad(slot); };
    // A projection's weight and bias gradients, unless deferred.
    auto gw = [&](ParameterSlot slot) { return deferred ? nullptr : g(slot); };

    const std::int32_t* documents = context.arrays().documents();
    const std::int32_t* positions = context.arrays().positions();
    const T* mlp_input = c_.parallel_residual ? x : a.mid.data();

    // MLP branch: d n2 into d_norm_a.
    const T* d_mlp_out = branch_gradient(dres, s, a, /*mlp=*/true, N);
    zero(s.d_norm_a);
    if (c_.moe.sparse_at(layer_)) experts_backward(d_mlp_out, context, s, a, N);
    else dense_mlp_backward(d_mlp_out, s, a, N, deferred);
    // Sequential: the MLP's input is mid, so dres becomes d mid before the attention branch reads it.
    if (!c_.parallel_residual)
      nn::norm_backward<Device>(c_.norm, dres, g(w_.mlp_norm_weight), g(w_.mlp_norm_bias), s.d_norm_a.data(), mlp_input,
                        p(w_.mlp_norm_weight), a.n2_mean.data(), a.n2_rstd.data(), N, C);

    // Attention branch: d n1 into d_norm_b.
    zero(s.d_attention);
    const T* d_o = branch_gradient(dres, s, a, /*mlp=*/false, N);
    if (deferred) copy(deferred->attention_output, d_o);
    nn::linear_backward<Device>(s.d_attention.data(), gw(w_.o_weight), gw(w_.o_bias), d_o, a.attention.data(),
                                p(w_.o_weight), N, HD, C);
    adapt_backward(LinearSlot::o, s.d_attention.data(), d_o, a.attention.data(), N);
    zero(s.d_qkv);
    nn::attention_backward_on<Device>(s.d_qkv.data(), s.d_attention.data(), a.attention.data(), a.lse.data(),
                                      a.qkv.data(), documents, attention_shape(batch));
    nn::rope_backward<Device>(s.d_qkv.data(), positions, rope_tables(batch), N, c_.num_heads, c_.num_kv_heads, c_.head_dim,
                              float(c_.rope_of(layer_).attention_factor));
    if (c_.qk_norm)
      nn::head_norm_backward<Device>(s.d_qkv.data(), g(w_.q_norm_weight), g(w_.k_norm_weight), a.qk_input.data(),
                                     a.qk_rstd.data(), p(w_.q_norm_weight), p(w_.k_norm_weight), N, c_.num_heads,
                                     c_.num_kv_heads, c_.head_dim, nn::norm_weight_offset<A>(c_.norm));
    zero(s.d_norm_b);
    if (deferred) copy(deferred->qkv, s.d_qkv.data());
    nn::linear_backward<Device>(s.d_norm_b.data(), gw(w_.qkv_weight), gw(w_.qkv_bias), s.d_qkv.data(), a.n1.data(),
                        p(w_.qkv_weight), N, C, c_.qkv_width());
    adapt_backward(LinearSlot::qkv, s.d_norm_b.data(), s.d_qkv.data(), a.n1.data(), N);

    if (c_.parallel_residual)
      nn::norm_backward<Device>(c_.norm, dres, g(w_.mlp_norm_weight), g(w_.mlp_norm_bias), s.d_norm_a.data(), mlp_input,
                        p(w_.mlp_norm_weight), a.n2_mean.data(), a.n2_rstd.data(), N, C);
    nn::norm_backward<Device>(c_.norm, dres, g(w_.attn_norm_weight), g(w_.attn_norm_bias), s.d_norm_b.data(), x,
                      p(w_.attn_norm_weight), a.n1_mean.data(), a.n1_rstd.data(), N, C);
  }

  // The layer's dense MLP over the normalised rows a.n2, its output to `out`.
  void dense_mlp_forward(T* out, Activations& a, index_t N) {
    const index_t C = c_.hidden_size, F = c_.mlp_width(layer_);
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };
    nn::linear_forward<Device>(a.mlp_in.data(), a.n2.data(), p(w_.mlp_in_weight), p(w_.mlp_in_bias), N, C,
                               c_.mlp_in_width(layer_));
    adapt(LinearSlot::mlp_in, a.mlp_in.data(), a.n2.data(), N);
    nn::mlp_forward<Device>(a.hidden.data(), a.mlp_in.data(), N, F, c_.gated_mlp, c_.activation);
    nn::linear_forward<Device>(out, a.hidden.data(), p(w_.mlp_out_weight), p(w_.mlp_out_bias), N, F, C);
    adapt(LinearSlot::mlp_out, out, a.hidden.data(), N);
  }
  // Its backward from its output's gradient, adding d n2 into s.d_norm_a;
  // with `deferred`, its weight gradients are left out and its output
  // gradients copied there.
  void dense_mlp_backward(const T* d_out, BlockScratch<T, Memory>& s, const Activations& a, index_t N,
                          DeferredGradients<T, Memory>* deferred) {
    const index_t C = c_.hidden_size, F = c_.mlp_width(layer_);
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };
    auto gw = [&](ParameterSlot slot) { return deferred ? nullptr : params_.grad(slot); };
    zero(s.d_hidden);
    if (deferred) copy(deferred->output, d_out);
    nn::linear_backward<Device>(s.d_hidden.data(), gw(w_.mlp_out_weight), gw(w_.mlp_out_bias), d_out, a.hidden.data(),
                                p(w_.mlp_out_weight), N, F, C);
    adapt_backward(LinearSlot::mlp_out, s.d_hidden.data(), d_out, a.hidden.data(), N);
    zero(s.d_mlp_in);
    nn::mlp_backward<Device>(s.d_mlp_in.data(), s.d_hidden.data(), a.mlp_in.data(), N, F, c_.gated_mlp, c_.activation);
    if (deferred) copy(deferred->mlp_in, s.d_mlp_in.data());
    nn::linear_backward<Device>(s.d_norm_a.data(), gw(w_.mlp_in_weight), gw(w_.mlp_in_bias), s.d_mlp_in.data(),
                                a.n2.data(), p(w_.mlp_in_weight), N, C, c_.mlp_in_width(layer_));
    adapt_backward(LinearSlot::mlp_in, s.d_norm_a.data(), s.d_mlp_in.data(), a.n2.data(), N);
  }

  // A sparse layer's MLP over a.n2 (nn/moe.hpp), its output to `out`: the
  // router, the routing on the host, each local expert's two products over
  // its run of rows, and the weighted sum back per token. With expert
  // parallelism the sorted rows travel to their experts' ranks first and
  // their outputs come back (models/expert_exchange.hpp).
  void experts_forward(T* out, Activations& a, index_t N) {
    const index_t C = c_.hidden_size, E = c_.moe.experts, k = c_.moe.top_k, F = c_.moe.expert_size, R = N * k;
    const bool spread = c_.moe.parallel > 1;
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };
    nn::linear_forward<Device>(a.router_logits.data(), a.n2.data(), p(w_.router_weight),
                               static_cast<const T*>(nullptr), N, C, E);
    adapt(LinearSlot::router, a.router_logits.data(), a.n2.data(), N);
    std::vector<T> logits(static_cast<std::size_t>(N * E));
    Device::to_host(logits.data(), a.router_logits.data(), logits.size() * sizeof(T));
    a.routing = nn::route(logits.data(), N, E, k, c_.moe.normalize_top_k);
    const std::int32_t* token_at = device::upload<Device>(a.token_at, a.routing.token_at);
    const std::int32_t* row_of = device::upload<Device>(a.row_of, a.routing.row_of);
    const A* weight = device::upload<Device>(a.route_weight, a.routing.weight);

    // Spread, the sorted rows wait in expert_out (free until their outputs come back).
    T* sorted = spread ? a.expert_out.data() : a.expert_x.data();
    Device::parallel_rows(R, C, nn::GatherRows<T>{sorted, a.n2.data(), token_at, C});
    if (spread) {
      a.route = exchange().route(a.routing.first, c_.moe, what());
      fit_local_rows(a);
      exchange().send(sorted, a.expert_x.data(), a.route, device::upload<Device>(a.received_at, a.route.received_at), C,
                      what());
    }
    const std::vector<index_t>& first = local_first(a);
    const index_t rows = first.back(), first_expert = c_.moe.first_local_expert();
    for_each_expert(first, [&](index_t e, index_t at, index_t n) {
      nn::linear_forward<Device>(a.expert_in.data() + at * 2 * F, a.expert_x.data() + at * C,
                                 p(w_.experts_gate_up) + e * 2 * F * C, static_cast<const T*>(nullptr), n, C, 2 * F);
      adapt(LinearSlot::experts_gate_up, a.expert_in.data() + at * 2 * F, a.expert_x.data() + at * C, n,
            first_expert + e);
    });
    nn::mlp_forward<Device>(a.expert_hidden.data(), a.expert_in.data(), rows, F, /*gated=*/true, c_.activation);
    T* local_out = spread ? exchange().local_rows.data() : a.expert_out.data();
    for_each_expert(first, [&](index_t e, index_t at, index_t n) {
      nn::linear_forward<Device>(local_out + at * C, a.expert_hidden.data() + at * F, p(w_.experts_down) + e * C * F,
                                 static_cast<const T*>(nullptr), n, F, C);
      adapt(LinearSlot::experts_down, local_out + at * C, a.expert_hidden.data() + at * F, n, first_expert + e);
    });
    if (spread)
      exchange().bring_back(local_out, a.expert_out.data(), a.route, device::upload<Device>(a.local_at, a.route.local_at),
                            C, what());
    const bool shared = c_.moe.shared_expert_size > 0, gated = c_.moe.gated_shared_expert();
    if (shared) dense_mlp_forward(a.shared_out.data(), a, N);
    if (gated) {
      nn::linear_forward<Device>(a.shared_gate_logit.data(), a.n2.data(), p(w_.shared_gate_weight),
                                 static_cast<const T*>(nullptr), N, C, 1);
      adapt(LinearSlot::shared_gate, a.shared_gate_logit.data(), a.n2.data(), N);
      Device::parallel_for(N, nn::SigmoidOf<T>{a.shared_gate.data(), a.shared_gate_logit.data()});
    }
    Device::parallel_rows(N, C, nn::CombineExperts<T>{out, a.expert_out.data(), row_of, weight,
                                                       shared ? a.shared_out.data() : nullptr,
                                                       gated ? a.shared_gate.data() : nullptr, k, C});
  }

  // Its backward from its output's gradient, adding d n2 into s.d_norm_a
  // and every gradient of its weights (none deferred): back through the
  // weighted sum, each local expert's products (the rows' gradients
  // travelling as the rows did), the shared expert and its gate, and the
  // routing with the load-balancing loss's share (on the host).
  void experts_backward(const T* d_out, const Context<T, Device>& context, BlockScratch<T, Memory>& s,
                        const Activations& a, index_t N) {
    const index_t C = c_.hidden_size, E = c_.moe.experts, k = c_.moe.top_k, F = c_.moe.expert_size, R = N * k;
    const bool spread = c_.moe.parallel > 1;
    auto p = [&](ParameterSlot slot) { return params_.value(slot); };
    auto g = [&](ParameterSlot slot) { return params_.grad(slot); };
    const nn::Routing<A>& r = a.routing;
    const std::vector<index_t>& first = local_first(a);
    const index_t rows = first.back(), first_expert = c_.moe.first_local_expert();
    Device::parallel_rows(N, C, nn::CombineExpertsBackward<T>{s.d_route_weight.data(), s.d_expert_out.data(), d_out,
                                                               a.expert_out.data(), a.row_of.data(),
                                                               a.route_weight.data(), k, C});
    // Spread, the local rows' output gradients and then their input gradients share one buffer.
    T* d_local_out = spread ? exchange().local_rows.data() : s.d_expert_out.data();
    T* d_local_x = spread ? exchange().local_rows.data() : s.d_expert_x.data();
    if (spread) {
      ExpertExchange<T, Device>::fit(s.d_expert_hidden, rows, F);
      ExpertExchange<T, Device>::fit(s.d_expert_in, rows, 2 * F);
      exchange().send(s.d_expert_out.data(), d_local_out, a.route, a.received_at.data(), C, what());
    }
    Memory::zero(s.d_expert_hidden.data(), std::size_t(rows * F) * sizeof(T));
    T* d_down = g(w_.experts_down);
    for_each_expert(first, [&](index_t e, index_t at, index_t n) {
      nn::linear_backward<Device>(s.d_expert_hidden.data() + at * F, d_down ? d_down + e * C * F : nullptr,
                                  static_cast<T*>(nullptr), d_local_out + at * C, a.expert_hidden.data() + at * F,
                                  p(w_.experts_down) + e * C * F, n, F, C);
      adapt_backward(LinearSlot::experts_down, s.d_expert_hidden.data() + at * F, d_local_out + at * C,
                     a.expert_hidden.data() + at * F, n, first_expert + e);
    });
    Memory::zero(s.d_expert_in.data(), std::size_t(rows * 2 * F) * sizeof(T));
    nn::mlp_backward<Device>(s.d_expert_in.data(), s.d_expert_hidden.data(), a.expert_in.data(), rows, F,
                             /*gated=*/true, c_.activation);
    Memory::zero(d_local_x, std::size_t(rows * C) * sizeof(T));
    T* d_gate_up = g(w_.experts_gate_up);
    for_each_expert(first, [&](index_t e, index_t at, index_t n) {
      nn::linear_backward<Device>(d_local_x + at * C, d_gate_up ? d_gate_up + e * 2 * F * C : nullptr,
                                  static_cast<T*>(nullptr), s.d_expert_in.data() + at * 2 * F,
                                  a.expert_x.data() + at * C, p(w_.experts_gate_up) + e * 2 * F * C, n, C, 2 * F);
      adapt_backward(LinearSlot::experts_gate_up, d_local_x + at * C, s.d_expert_in.data() + at * 2 * F,
                     a.expert_x.data() + at * C, n, first_expert + e);
    });
    if (spread) exchange().bring_back(d_local_x, s.d_expert_x.data(), a.route, a.local_at.data(), C, what());
    Device::parallel_rows(N, C, nn::ScatterAddRows<T>{s.d_norm_a.data(), s.d_expert_x.data(), a.row_of.data(), k, C});
    if (c_.moe.shared_expert_size > 0 && !c_.moe.shared_expert_gate) dense_mlp_backward(d_out, s, a, N, nullptr);
    if (c_.moe.gated_shared_expert()) {
      Device::parallel_rows(N, C, nn::SharedGateBackward<T>{s.d_shared_out.data(), s.d_shared_gate.data(), d_out,
                                                             a.shared_out.data(), a.shared_gate.data(), C});
      dense_mlp_backward(s.d_shared_out.data(), s, a, N, nullptr);
      nn::linear_backward<Device>(s.d_norm_a.data(), g(w_.shared_gate_weight), static_cast<T*>(nullptr),
                                  s.d_shared_gate.data(), a.n2.data(), p(w_.shared_gate_weight), N, C, 1);
      adapt_backward(LinearSlot::shared_gate, s.d_norm_a.data(), s.d_shared_gate.data(), a.n2.data(), N);
    }
    // The routing's gradient on the host; the load-balancing loss weighs as
    // much in the step as this batch's share of its scored tokens.
    std::vector<A> d_weight(static_cast<std::size_t>(R));
    Device::to_host(d_weight.data(), s.d_route_weight.data(), d_weight.size() * sizeof(A));
    std::vector<A> d_prob_aux;
    if (c_.moe.aux_loss_coef > 0)
      d_prob_aux = context.router_aux_gradient(c_.moe.aux_loss_coef * double(context.batch().scored_tokens()) /
                                               context.options().token_count);
    std::vector<T> d_logits(static_cast<std::size_t>(N * E));
    nn::route_backward(r, d_weight.data(), d_prob_aux, d_logits.data());
    Device::from_host(s.d_router_logits.data(), d_logits.data(), d_logits.size() * sizeof(T));
    nn::linear_backward<Device>(s.d_norm_a.data(), g(w_.router_weight), static_cast<T*>(nullptr),
                                s.d_router_logits.data(), a.n2.data(), p(w_.router_weight), N, C, E);
    adapt_backward(LinearSlot::router, s.d_norm_a.data(), s.d_router_logits.data(), a.n2.data(), N);
  }

  // The local experts' runs of rows: the routing's when this rank holds
  // every expert, else the route's.
  const std::vector<index_t>& local_first(const Activations& a) const {
    return c_.moe.parallel > 1 ? a.route.first : a.routing.first;
  }
  // f(local expert, its first row, its row count) for each local expert with rows.
  template <class F>
  static void for_each_expert(const std::vector<index_t>& first, F&& f) {
    for (std::size_t e = 0; e + 1 < first.size(); ++e)
      if (const index_t n = first[e + 1] - first[e]; n > 0) f(index_t(e), first[e], n);
  }
  // The local rows' activations hold what this step's route brings (more
  // than the layout's bound only when another rank's batch is larger).
  void fit_local_rows(Activations& a) const {
    const index_t rows = a.route.rows(), F = c_.moe.expert_size;
    ExpertExchange<T, Device>::fit(a.expert_x, rows, c_.hidden_size);
    ExpertExchange<T, Device>::fit(a.expert_in, rows, 2 * F);
    ExpertExchange<T, Device>::fit(a.expert_hidden, rows, F);
    ExpertExchange<T, Device>::fit(exchange().local_rows, rows, c_.hidden_size);
  }
  ExpertExchange<T, Device>& exchange() const {
    if (!exchange_) throw Error("internal: a block whose experts are split over ranks has no exchange");
    return *exchange_;
  }
  std::string what() const { return "layers." + std::to_string(layer_) + "'s experts"; }

  nn::AttentionShape attention_shape(const Batch& batch) const {
    return {batch.B, batch.T, c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.sliding_window[std::size_t(layer_)],
            c_.attention_multiplier, c_.alibi, c_.attention_softcap};
  }

  // A branch's post-norm (sandwich_norms): its weights and saved statistics.
  struct BranchNorm {
    ParameterSlot weight, bias;
    const T* input;
    const A *mean, *rstd;
  };
  BranchNorm branch_norm(const Activations& a, bool mlp) const {
    if (mlp) return {w_.mlp_post_norm_weight, w_.mlp_post_norm_bias, a.mlp_branch.data(), a.mlp_branch_mean.data(),
                     a.mlp_branch_rstd.data()};
    return {w_.attn_post_norm_weight, w_.attn_post_norm_bias, a.attention_branch.data(),
            a.attention_branch_mean.data(), a.attention_branch_rstd.data()};
  }

  // A branch's output [N, C] as it joins the residual stream, written to
  // `out`: with sandwich_norms, the norm of the branch output saved in `a`
  // (otherwise already in `out`), then scaled by the residual multiplier.
  void finish_branch(T* out, Activations& a, bool mlp, index_t N) {
    if (c_.sandwich_norms) {
      const BranchNorm n = branch_norm(a, mlp);
      A* mean = mlp ? a.mlp_branch_mean.data() : a.attention_branch_mean.data();
      A* rstd = mlp ? a.mlp_branch_rstd.data() : a.attention_branch_rstd.data();
      nn::norm_forward<Device>(c_.norm, out, mean, rstd, n.input, params_.value(n.weight), params_.value(n.bias), N,
                               c_.hidden_size, A(c_.norm_eps));
    }
    if (c_.residual_multiplier != 1) nn::scale_into<Device>(out, out, A(c_.residual_multiplier), N * c_.hidden_size);
  }
  // The gradient of a branch's output (O's or Down's), from the residual
  // stream's: back through the multiplier's scale and the branch's post-norm.
  const T* branch_gradient(const T* dres, BlockScratch<T, Memory>& s, const Activations& a, bool mlp, index_t N) {
    const T* d = dres;
    if (c_.residual_multiplier != 1) {
      nn::scale_into<Device>(s.d_branch.data(), dres, A(c_.residual_multiplier), N * c_.hidden_size);
      d = s.d_branch.data();
    }
    if (!c_.sandwich_norms) return d;
    const BranchNorm n = branch_norm(a, mlp);
    zero(s.d_branch_norm);
    nn::norm_backward<Device>(c_.norm, s.d_branch_norm.data(), params_.grad(n.weight), params_.grad(n.bias), d, n.input,
                              params_.value(n.weight), n.mean, n.rstd, N, c_.hidden_size);
    return s.d_branch_norm.data();
  }

  void adapt(LinearSlot slot, T* y, const T* x, index_t N, index_t expert = 0) {
    if (adapter_) adapter_->forward(slot, expert, y, x, N);
  }
  void adapt_backward(LinearSlot slot, T* dx, const T* dy, const T* x, index_t N, index_t expert = 0) {
    if (adapter_) adapter_->backward(slot, expert, dx, dy, x, N);
  }

  std::span<const float> inv_freq() const { return {inv_freq_.data(), std::size_t(inv_freq_.numel())}; }
  std::span<const float> long_inv_freq() const {
    return {long_inv_freq_.data(), std::size_t(long_inv_freq_.numel())};
  }
  static Tensor<float, Memory> device_table(const std::vector<float>& table) {
    Tensor<float, Memory> out(Shape{index_t(table.size())});
    Device::from_host(out.data(), table.data(), table.size() * sizeof(float));
    return out;
  }
  static void zero(Tensor<T, Memory>& t) { Memory::zero(t.data(), std::size_t(t.numel()) * sizeof(T)); }
  static void copy(Tensor<T, Memory>& to, const T* from) {
    Device::copy(to.data(), from, std::size_t(to.numel()) * sizeof(T));
  }

  TransformerConfig c_;
  index_t layer_;
  Parameters params_;
  Weights w_;
  Tensor<float, Memory> inv_freq_;       // the rotary frequencies, where the device reads them
  Tensor<float, Memory> long_inv_freq_;  // LongRoPE's long ones (empty without)
  LinearAdapter<T, Device>* adapter_ = nullptr;
  ExpertExchange<T, Device>* exchange_ = nullptr;
};

}  // namespace ft::models
