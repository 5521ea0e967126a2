#pragma once
// The first and last stages of a model.
//
// Embedding: token ids -> the residual stream (with Bloom's embedding norm
//   after the lookup; it normalises virtual tokens too, as HF normalises
//   whatever inputs_embeds holds).
// Head: final norm, LM head and cross-entropy, fused. Its forward already
//   computes the gradient of its input when training (the loss is the end of
//   the graph, so there is nothing to wait for), and its backward finishes the
//   final norm. What it keeps between the two is in the context. With tied embeddings the head multiplies by the embedding
//   table and adds its gradient into the embedding's buffer.
#include <string>

#include "ft/models/batch.hpp"
#include "ft/models/context.hpp"
#include "ft/models/input_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/stage.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/nn/cross_entropy.hpp"
#include "ft/nn/embedding.hpp"
#include "ft/nn/norm.hpp"
#include "ft/nn/residual.hpp"
#include "ft/nn/rope.hpp"

namespace ft::models {

template <element T, class Device = device::Cpu>
class EmbeddingStage final : public Stage<T, Device> {
public:
  using Parameters = ParameterBuffer<T, typename Device::Memory>;

  explicit EmbeddingStage(const TransformerConfig& c, bool trainable = true)
      : C_(c.hidden_size), V_(c.vocab_size), P_(c.position_embeddings), padding_idx_(std::int32_t(c.padding_idx)),
        multiplier_(embedding_scale<T>(c)), config_(c) {
    declare(params_, c);
    weight_ = params_.slot("weight");
    positions_ = params_.slot_if(P_ > 0, "positions");
    norm_weight_ = params_.slot_if(c.embedding_norm, "norm.weight");
    norm_bias_ = params_.slot_if(c.embedding_norm && c.norm == nn::NormKind::layer, "norm.bias");
    params_.set_trainable(trainable);
  }
  template <class Buffer>
  static void declare(Buffer& params, const TransformerConfig& c) {
    params.declare("weight", {c.vocab_size, c.hidden_size});
    if (c.position_embeddings > 0) params.declare("positions", {c.position_embeddings, c.hidden_size});
    if (c.embedding_norm) {
      params.declare("norm.weight", {c.hidden_size});
      if (c.norm == nn::NormKind::layer) params.declare("norm.bias", {c.hidden_size});
    }
  }
  Parameters& parameters() override { return params_; }
  const Parameters& parameters() const { return params_; }
  std::string prefix() const override { return "embed."; }
  // The embedding table [V, C].
  const T* table() const { return params_.value(weight_); }
  // The learned position table [P, C]; null for a model whose positions are rotary.
  const T* position_table() const { return P_ > 0 ? params_.value(positions_) : nullptr; }
  // With embedding_norm: out = norm(in) over N rows, its statistics into
  // mean and rstd (the inference engine's embedding runs it too).
  void normalise(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* in, index_t N) const {
    nn::norm_forward<Device>(config_.norm, out, mean, rstd, in, params_.value(norm_weight_),
                             params_.value(norm_bias_), N, C_, acc_t<T>(config_.norm_eps));
  }
  // The adapter that fills a batch's virtual tokens; null detaches it.
  void set_adapter(InputAdapter<T, Device>* adapter) { adapter_ = adapter; }

  void forward(Context<T, Device>& context) override {
    const Batch& batch = context.batch();
    // With a norm after the lookup, the lookup goes to the norm's saved input.
    T* y = config_.embedding_norm ? context.embedding().input.data() : context.stream(0);
    for (std::int32_t id : batch.input_ids)
      if (id < 0 || id >= V_)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(V_) + ")");
    if (P_ > 0) nn::check_position_rows(P_, batch.positions);
    if (batch.virtual_tokens > 0 && !adapter_)
      throw Error("the batch starts with " + std::to_string(batch.virtual_tokens) +
                  " virtual tokens, but no prompt adapter is attached to fill them");
    nn::embedding_forward<Device>(y, context.arrays().input_ids(), params_.value(weight_), batch.rows(), C_);
    if (scales_tokens()) nn::scale_into<Device>(y, y, multiplier_, batch.rows() * C_);  // virtual rows are replaced
    if (batch.virtual_tokens > 0) adapter_->forward(y, batch);
    // Virtual tokens take their positions' rows too, as inputs_embeds do in HF.
    if (P_ > 0)
      nn::embedding_forward<Device>(y, context.arrays().positions(), params_.value(positions_), batch.rows(), C_,
                                    /*accumulate=*/true);
    if (scales_all()) nn::scale_into<Device>(y, y, multiplier_, batch.rows() * C_);  // virtual rows too
    if (config_.embedding_norm) {
      EmbeddingActivations<T, typename Device::Memory>& saved = context.embedding();
      normalise(context.stream(0), saved.mean.data(), saved.rstd.data(), y, batch.rows());
    }
  }
  // The virtual tokens' rows of dres reach the adapter; their placeholder ids
  // also receive them in the table's gradient, which only a full fine-tune
  // keeps, and a full fine-tune has no virtual tokens.
  void backward(Context<T, Device>& context) override {
    const Batch& batch = context.batch();
    T* dres = context.gradient();
    if (!params_.trainable() && !(batch.virtual_tokens > 0 && adapter_)) return;
    if (config_.embedding_norm) norm_backward(context, dres);
    if (scales_all()) nn::scale_into<Device>(dres, dres, multiplier_, batch.rows() * C_);
    if (batch.virtual_tokens > 0 && adapter_) adapter_->backward(dres, batch);
    if (!params_.trainable()) return;
    if (P_ > 0)
      nn::embedding_backward<Device>(params_.grad(positions_), batch.positions.data(), dres, batch.rows(), C_);
    if (scales_tokens()) nn::scale_into<Device>(dres, dres, multiplier_, batch.rows() * C_);
    nn::embedding_backward<Device>(params_.grad(weight_), batch.input_ids.data(), dres, batch.rows(), C_,
                                   padding_idx_);
  }

private:
  // The multiplier on the whole output (Granite), or on the token rows of the lookup only (Gemma).
  bool scales_all() const { return multiplier_ != 1 && !config_.embedding_scale_in_lookup; }
  bool scales_tokens() const { return multiplier_ != 1 && config_.embedding_scale_in_lookup; }

  // dres: the norm's output gradient in, its input gradient out (through
  // the blocks' shared scratch, free while the embedding's backward runs).
  void norm_backward(Context<T, Device>& context, T* dres) {
    const index_t N = context.batch().rows();
    const EmbeddingActivations<T, typename Device::Memory>& saved = context.embedding();
    BlockScratch<T, typename Device::Memory>& scratch = context.scratch();
    scratch.resize(config_, N);
    T* din = scratch.d_norm_a.data();
    Device::Memory::zero(din, std::size_t(N * C_) * sizeof(T));
    nn::norm_backward<Device>(config_.norm, din, params_.grad(norm_weight_), params_.grad(norm_bias_), dres,
                              saved.input.data(), params_.value(norm_weight_), saved.mean.data(), saved.rstd.data(),
                              N, C_);
    Device::copy(dres, din, std::size_t(N * C_) * sizeof(T));
  }

  index_t C_, V_;
  index_t P_;                 // rows of the learned position table (0: none)
  std::int32_t padding_idx_;  // the row that takes no gradient (-1: none)
  acc_t<T> multiplier_;       // embedding_multiplier, as T's accumulation type takes it
  TransformerConfig config_;
  Parameters params_;
  ParameterSlot weight_, positions_, norm_weight_, norm_bias_;
  InputAdapter<T, Device>* adapter_ = nullptr;
};

template <element T, class Device = device::Cpu>
class HeadStage final : public Stage<T, Device> {
public:
  using A = acc_t<T>;
  using Memory = typename Device::Memory;
  using Parameters = ParameterBuffer<T, Memory>;

  explicit HeadStage(const TransformerConfig& c, bool trainable = true) : c_(c) {
    declare(params_, c);
    norm_weight_ = params_.slot("final_norm.weight");
    norm_bias_ = params_.slot_if(c.norm == nn::NormKind::layer, "final_norm.bias");
    lm_head_ = params_.slot_if(!c.tie_embeddings, "lm_head.weight");
    params_.set_trainable(trainable);
  }
  template <class Buffer>
  static void declare(Buffer& params, const TransformerConfig& c) {
    params.declare("final_norm.weight", {c.hidden_size});
    if (c.norm == nn::NormKind::layer) params.declare("final_norm.bias", {c.hidden_size});
    if (!c.tie_embeddings) params.declare("lm_head.weight", {c.vocab_size, c.hidden_size});
  }
  Parameters& parameters() override { return params_; }
  const Parameters& parameters() const { return params_; }
  std::string prefix() const override { return ""; }

  // Ties the LM head to the embedding table (weights and gradients), read
  // from the embedding's buffer at each use: its memory may change between
  // steps (ZeRO-3 gathers it anew, a fused optimizer shares gradients).
  void tie_to(EmbeddingStage<T, Device>& embedding) {
    tied_ = &embedding.parameters();
    tied_weight_ = tied_->slot("weight");
  }

  // Sets context.loss, the summed loss over scored targets; writes the
  // context's logits [N, V] (the device's memory) when it has them.
  void forward(Context<T, Device>& context) override {
    const Batch& batch = context.batch();
    const HeadOptions& options = context.options();
    const index_t N = batch.rows(), C = c_.hidden_size;
    for (std::int32_t t : batch.targets)
      if (t != nn::ignore_index && (t < 0 || t >= c_.vocab_size))
        throw Error("label " + std::to_string(t) + " is outside the vocabulary [0, " +
                    std::to_string(c_.vocab_size) + ") and is not -100");
    HeadActivations<T, Memory>& h = context.head();
    const T* x = context.stream(c_.num_layers);
    nn::norm_forward<Device>(c_.norm, h.normed.data(), h.mean.data(), h.rstd.data(), x, params_.value(norm_weight_),
                     params_.value(norm_bias_), N, C, A(c_.norm_eps));
    if (options.backward) Memory::zero(h.d_normed.data(), std::size_t(N * C) * sizeof(T));  // evaluation writes no gradient
    nn::CrossEntropyOptions ce{.chunk_rows = options.chunk_rows, .token_count = options.token_count,
                               .backward = options.backward, .logit_scale = 1 / c_.logits_scaling,
                               .softcap = c_.logit_softcap};
    if (options.objective) {
      context.loss = sequence_objective(context, ce, *options.objective);
      return;
    }
    context.loss = nn::lm_head_cross_entropy<Device>(h.d_normed.data(), lm_grad(), h.normed.data(), lm_weight(),
                                                     context.arrays().targets(), N, C, c_.vocab_size, ce,
                                                     context.logits());
  }

  // An objective over whole sequences: a first pass gives it every
  // position's token loss and mean logit, a second (training only) computes
  // the gradient with the weights it returns. One more pass over the head
  // than token-level training, and still no logits kept.
  double sequence_objective(Context<T, Device>& context, nn::CrossEntropyOptions ce, SequenceObjective& objective) {
    const Batch& batch = context.batch();
    const index_t N = batch.rows(), C = c_.hidden_size;
    HeadActivations<T, Memory>& h = context.head();
    auto token_loss = std::vector<double>(std::size_t(N)), logit_mean = std::vector<double>(std::size_t(N));
    std::vector<double> weight;
    const bool backward = ce.backward;
    ce.backward = false;
    ce.row_loss = token_loss.data();
    ce.row_logit_mean = logit_mean.data();
    nn::lm_head_cross_entropy<Device>(static_cast<T*>(nullptr), static_cast<T*>(nullptr), h.normed.data(), lm_weight(),
                                      context.arrays().targets(), N, C, c_.vocab_size, ce, context.logits());
    if (backward) weight.resize(std::size_t(N));
    const double loss = objective.score(batch, token_loss, logit_mean, weight, backward);
    if (backward) {
      ce.backward = true;
      ce.row_loss = ce.row_logit_mean = nullptr;
      ce.row_weights = weight.data();
      nn::lm_head_cross_entropy<Device>(h.d_normed.data(), lm_grad(), h.normed.data(), lm_weight(),
                                        context.arrays().targets(), N, C, c_.vocab_size, ce);
    }
    return loss;
  }

  // Writes (=) the gradient of the head's input into the context's gradient.
  void backward(Context<T, Device>& context) override {
    const index_t N = context.batch().rows(), C = c_.hidden_size;
    HeadActivations<T, Memory>& h = context.head();
    T* dres = context.gradient();
    Memory::zero(dres, std::size_t(N * C) * sizeof(T));
    nn::norm_backward<Device>(c_.norm, dres, params_.grad(norm_weight_), params_.grad(norm_bias_),
                      h.d_normed.data(), context.stream(c_.num_layers), params_.value(norm_weight_),
                      h.mean.data(), h.rstd.data(), N, C);
  }

  // The final norm's weight and bias (null for RMSNorm).
  const T* norm_weight() const { return params_.value(norm_weight_); }
  const T* norm_bias() const { return params_.value(norm_bias_); }
  // The LM head's weight [V, C]: the embedding table when tied.
  const T* lm_weight() const { return tied_ ? tied_->value(tied_weight_) : params_.value(lm_head_); }

private:
  T* lm_grad() const { return tied_ ? tied_->grad(tied_weight_) : params_.grad(lm_head_); }

  TransformerConfig c_;
  Parameters params_;
  ParameterSlot norm_weight_, norm_bias_, lm_head_;  // lm_head_ is absent when tied
  const Parameters* tied_ = nullptr;
  ParameterSlot tied_weight_;
};

}  // namespace ft::models
