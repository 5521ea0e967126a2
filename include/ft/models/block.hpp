#pragma once
// One transformer block as a stage: its parameters in one flat buffer, the
// activations it saves for backward, and a hand-written forward and backward.
// Every family's block is this one, configured by TransformerConfig:
//
//   sequential (Llama):   m = x + O(attn(rope(QKV(n1(x)))));  y = m + Down(act(In(n2(m))))
//   parallel (GPT-NeoX):  y = x + O(attn(rope(QKV(n1(x))))) + Down(act(In(n2(x))))
//
// The block reads its input x from the context's residual stream and writes
// its output y after it; x is the one activation a checkpointed block keeps,
// everything else here can be recomputed from it.
//
// Backward works in place on the context's gradient of the residual stream:
// it comes in as d y and leaves as d x (both paths add into it, see
// nn/README.md).
#include <cstring>
#include <functional>
#include <string>

#include "ft/models/batch.hpp"
#include "ft/models/context.hpp"
#include "ft/models/linear_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/stage.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/nn/attention.hpp"
#include "ft/nn/linear.hpp"
#include "ft/nn/mlp.hpp"
#include "ft/nn/norm.hpp"
#include "ft/nn/rope.hpp"

namespace ft::models {

template <element T>
class Block final : public Stage<T> {
public:
  using A = acc_t<T>;

  // A frozen block (trainable = false) keeps no parameter gradients and skips
  // computing them; its input gradient still flows.
  Block(const TransformerConfig& config, index_t layer, bool trainable = true) : c_(config), layer_(layer) {
    index_t C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    bool layer_norm = c_.norm == nn::NormKind::layer;
    params_.declare("attn_norm.weight", {C});
    if (layer_norm) params_.declare("attn_norm.bias", {C});
    params_.declare("qkv.weight", {c_.qkv_width(), C});
    if (c_.qkv_bias) params_.declare("qkv.bias", {c_.qkv_width()});
    params_.declare("o.weight", {C, HD});
    if (c_.o_bias) params_.declare("o.bias", {C});
    params_.declare("mlp_norm.weight", {C});
    if (layer_norm) params_.declare("mlp_norm.bias", {C});
    params_.declare("mlp_in.weight", {c_.mlp_in_width(), C});
    if (c_.mlp_bias) params_.declare("mlp_in.bias", {c_.mlp_in_width()});
    params_.declare("mlp_out.weight", {C, c_.intermediate_size});
    if (c_.mlp_bias) params_.declare("mlp_out.bias", {C});
    params_.allocate(trainable);
    inv_freq_ = nn::rope_inverse_frequencies(c_.rope);
  }

  // Adds an adapter to this block's linear layers (null removes it). Not owned.
  void set_adapter(LinearAdapter<T>* adapter) { adapter_ = adapter; }
  index_t layer() const { return layer_; }

  ParameterBuffer<T>& parameters() override { return params_; }
  const ParameterBuffer<T>& parameters() const { return params_; }
  std::string prefix() const override { return "layers." + std::to_string(layer_) + "."; }

  void forward(Context<T>& context) override {
    forward(context.stream(layer_ + 1), context.stream(layer_), context.batch(), context.activations(layer_));
  }

  // A checkpointed block first recomputes its activations; its output
  // buffer is free by now (the stages after it are done with this context).
  // When the context defers weight gradients, the four projections' output
  // gradients are kept for weight_gradients() instead.
  void backward(Context<T>& context) override {
    const T* x = context.saved_input(layer_);
    BlockActivations<T>& a = context.activations(layer_);
    if (context.recomputes(layer_)) forward(context.stream(layer_ + 1), x, context.batch(), a);
    backward(context.gradient(), x, context.batch(), a, context.scratch(),
             context.defer_weight_gradients ? &context.deferred(layer_) : nullptr);
  }

  // What writes a block's attention output (a.attention) from its rotated
  // queries, keys and values (a.qkv): causal attention within the batch
  // when training, attention over a key/value cache at inference (infer/).
  using Attend = std::function<void(BlockActivations<T>& a)>;

  // y = block(x) for the batch's rows, saving into a what backward reads;
  // `attend` is the attention step, the rest is the same math for both.
  void forward(T* y, const T* x, const Batch& batch, BlockActivations<T>& a, const Attend& attend) {
    const index_t N = batch.rows(), C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    auto p = [&](const char* name) { return params_.value(name); };

    nn::norm_forward(c_.norm, a.n1.data(), a.n1_mean.data(), a.n1_rstd.data(), x, p("attn_norm.weight"),
                     p("attn_norm.bias"), N, C, A(c_.norm_eps));
    nn::linear_forward(a.qkv.data(), a.n1.data(), p("qkv.weight"), p("qkv.bias"), N, C, c_.qkv_width());
    adapt(LinearSlot::qkv, a.qkv.data(), a.n1.data(), N);
    nn::rope_forward(a.qkv.data(), batch.positions.data(), inv_freq_, N, c_.num_heads, c_.num_kv_heads, c_.head_dim);
    attend(a);
    // Sequential: mid = x + O(att). Parallel: the attention branch goes to y, mid is only scratch.
    T* attention_out = c_.parallel_residual ? y : a.mid.data();
    nn::linear_forward(attention_out, a.attention.data(), p("o.weight"), p("o.bias"), N, HD, C);
    adapt(LinearSlot::o, attention_out, a.attention.data(), N);
    if (!c_.parallel_residual) add_into(a.mid.data(), x, N * C);

    const T* mlp_input = c_.parallel_residual ? x : a.mid.data();
    nn::norm_forward(c_.norm, a.n2.data(), a.n2_mean.data(), a.n2_rstd.data(), mlp_input, p("mlp_norm.weight"),
                     p("mlp_norm.bias"), N, C, A(c_.norm_eps));
    nn::linear_forward(a.mlp_in.data(), a.n2.data(), p("mlp_in.weight"), p("mlp_in.bias"), N, C, c_.mlp_in_width());
    adapt(LinearSlot::mlp_in, a.mlp_in.data(), a.n2.data(), N);
    nn::mlp_forward(a.hidden.data(), a.mlp_in.data(), N, c_.intermediate_size, c_.gated_mlp, c_.activation);
    if (c_.parallel_residual) {
      nn::linear_forward(a.mid.data(), a.hidden.data(), p("mlp_out.weight"), p("mlp_out.bias"), N,
                         c_.intermediate_size, C);
      adapt(LinearSlot::mlp_out, a.mid.data(), a.hidden.data(), N);
      add_into(y, a.mid.data(), N * C);
      add_into(y, x, N * C);
    } else {
      nn::linear_forward(y, a.hidden.data(), p("mlp_out.weight"), p("mlp_out.bias"), N, c_.intermediate_size, C);
      adapt(LinearSlot::mlp_out, y, a.hidden.data(), N);
      add_into(y, a.mid.data(), N * C);
    }
  }

  // The projections' weight and bias gradients, from what backward kept.
  void weight_gradients(Context<T>& context) override {
    if (!context.defer_weight_gradients || !params_.trainable()) return;
    const index_t N = context.batch().rows(), C = c_.hidden_size, HD = c_.num_heads * c_.head_dim;
    const BlockActivations<T>& a = context.activations(layer_);
    const DeferredGradients<T>& d = context.deferred(layer_);
    auto g = [&](const char* name) { return params_.grad(name); };
    nn::linear_backward<device::Cpu, T>(nullptr, g("mlp_out.weight"), g("mlp_out.bias"), d.output.data(), a.hidden.data(), nullptr,
                           N, c_.intermediate_size, C);
    nn::linear_backward<device::Cpu, T>(nullptr, g("mlp_in.weight"), g("mlp_in.bias"), d.mlp_in.data(), a.n2.data(), nullptr, N, C,
                           c_.mlp_in_width());
    nn::linear_backward<device::Cpu, T>(nullptr, g("o.weight"), g("o.bias"), d.attention_output.data(), a.attention.data(), nullptr,
                           N, HD, C);
    nn::linear_backward<device::Cpu, T>(nullptr, g("qkv.weight"), g("qkv.bias"), d.qkv.data(), a.n1.data(), nullptr, N, C,
                           c_.qkv_width());
  }

private:
  // Training's forward: causal attention within the batch (documents kept apart).
  void forward(T* y, const T* x, const Batch& batch, BlockActivations<T>& a) {
    const std::int32_t* documents = batch.documents.empty() ? nullptr : batch.documents.data();
    forward(y, x, batch, a, [&](BlockActivations<T>& saved) {
      nn::attention_forward(saved.attention.data(), saved.lse.data(), saved.qkv.data(), documents,
                            attention_shape(batch));
    });
  }

  // dres: d y in, d x out; x: the input forward read. With `deferred`, the
  // projections' weight gradients are left out and their output gradients
  // copied there.
  void backward(T* dres, const T* x, const Batch& batch, const BlockActivations<T>& a, BlockScratch<T>& s,
                DeferredGradients<T>* deferred) {
    const index_t N = batch.rows(), C = c_.hidden_size, HD = c_.num_heads * c_.head_dim, F = c_.intermediate_size;
    s.resize(c_, N);
    if (deferred) deferred->resize(c_, N);
    auto p = [&](const char* name) { return params_.value(name); };
    auto g = [&](const char* name) { return params_.grad(name); };
    // A projection's weight and bias gradients, unless deferred.
    auto gw = [&](const char* name) { return deferred ? nullptr : g(name); };

    const std::int32_t* documents = batch.documents.empty() ? nullptr : batch.documents.data();
    const T* mlp_input = c_.parallel_residual ? x : a.mid.data();

    // MLP branch: d n2 into d_norm_a.
    zero(s.d_hidden);
    if (deferred) std::copy_n(dres, deferred->output.numel(), deferred->output.data());
    nn::linear_backward(s.d_hidden.data(), gw("mlp_out.weight"), gw("mlp_out.bias"), dres, a.hidden.data(),
                        p("mlp_out.weight"), N, F, C);
    adapt_backward(LinearSlot::mlp_out, s.d_hidden.data(), dres, a.hidden.data(), N);
    zero(s.d_mlp_in);
    nn::mlp_backward(s.d_mlp_in.data(), s.d_hidden.data(), a.mlp_in.data(), N, F, c_.gated_mlp, c_.activation);
    zero(s.d_norm_a);
    if (deferred) std::copy_n(s.d_mlp_in.data(), deferred->mlp_in.numel(), deferred->mlp_in.data());
    nn::linear_backward(s.d_norm_a.data(), gw("mlp_in.weight"), gw("mlp_in.bias"), s.d_mlp_in.data(), a.n2.data(),
                        p("mlp_in.weight"), N, C, c_.mlp_in_width());
    adapt_backward(LinearSlot::mlp_in, s.d_norm_a.data(), s.d_mlp_in.data(), a.n2.data(), N);
    // Sequential: the MLP's input is mid, so dres becomes d mid before the attention branch reads it.
    if (!c_.parallel_residual)
      nn::norm_backward(c_.norm, dres, g("mlp_norm.weight"), g("mlp_norm.bias"), s.d_norm_a.data(), mlp_input,
                        p("mlp_norm.weight"), a.n2_mean.data(), a.n2_rstd.data(), N, C);

    // Attention branch: d n1 into d_norm_b.
    zero(s.d_attention);
    if (deferred) std::copy_n(dres, deferred->attention_output.numel(), deferred->attention_output.data());
    nn::linear_backward(s.d_attention.data(), gw("o.weight"), gw("o.bias"), dres, a.attention.data(), p("o.weight"),
                        N, HD, C);
    adapt_backward(LinearSlot::o, s.d_attention.data(), dres, a.attention.data(), N);
    zero(s.d_qkv);
    nn::attention_backward(s.d_qkv.data(), s.d_attention.data(), a.attention.data(), a.lse.data(), a.qkv.data(),
                           documents, attention_shape(batch));
    nn::rope_backward(s.d_qkv.data(), batch.positions.data(), inv_freq_, N, c_.num_heads, c_.num_kv_heads,
                      c_.head_dim);
    zero(s.d_norm_b);
    if (deferred) std::copy_n(s.d_qkv.data(), deferred->qkv.numel(), deferred->qkv.data());
    nn::linear_backward(s.d_norm_b.data(), gw("qkv.weight"), gw("qkv.bias"), s.d_qkv.data(), a.n1.data(),
                        p("qkv.weight"), N, C, c_.qkv_width());
    adapt_backward(LinearSlot::qkv, s.d_norm_b.data(), s.d_qkv.data(), a.n1.data(), N);

    if (c_.parallel_residual)
      nn::norm_backward(c_.norm, dres, g("mlp_norm.weight"), g("mlp_norm.bias"), s.d_norm_a.data(), mlp_input,
                        p("mlp_norm.weight"), a.n2_mean.data(), a.n2_rstd.data(), N, C);
    nn::norm_backward(c_.norm, dres, g("attn_norm.weight"), g("attn_norm.bias"), s.d_norm_b.data(), x,
                      p("attn_norm.weight"), a.n1_mean.data(), a.n1_rstd.data(), N, C);
  }

  nn::AttentionShape attention_shape(const Batch& batch) const {
    return {batch.B, batch.T, c_.num_heads, c_.num_kv_heads, c_.head_dim, c_.sliding_window[std::size_t(layer_)]};
  }

  void adapt(LinearSlot slot, T* y, const T* x, index_t N) {
    if (adapter_) adapter_->forward(slot, y, x, N);
  }
  void adapt_backward(LinearSlot slot, T* dx, const T* dy, const T* x, index_t N) {
    if (adapter_) adapter_->backward(slot, dx, dy, x, N);
  }

  static void add_into(T* y, const T* x, index_t count) {
    cpu::parallel_for(count, [&](index_t i) { y[i] = T(A(y[i]) + A(x[i])); });
  }
  static void zero(Tensor<T>& t) { std::fill_n(t.data(), t.numel(), T(0.0f)); }

  TransformerConfig c_;
  index_t layer_;
  ParameterBuffer<T> params_;
  std::vector<float> inv_freq_;
  LinearAdapter<T>* adapter_ = nullptr;
};

}  // namespace ft::models
