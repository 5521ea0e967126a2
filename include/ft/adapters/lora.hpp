#pragma once
// LoRA (Hu et al. 2021) as PEFT defines it: beside a frozen projection W,
//
//   y = W x + scale * B A dropout(x),   A [r, in], B [out, r], scale = alpha / r
//
// with A drawn from U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming_uniform with
// a = sqrt(5)) and B zero, so training starts from the base model exactly.
//
// PEFT names modules by HF's projections (q_proj, k_proj, ...); ft fuses
// several of them into one GEMM (q, k and v are rows of `qkv`). A target is
// therefore "these rows of that fused slot", read off the family's weight
// map, so every family that has a weight map gets LoRA for free and the
// adapter files keep PEFT's names and row order (GPT-NeoX's interleaved
// query_key_value included).
//
// Dropout masks are hashes of (seed, micro-batch, layer, module, element)
// (core/random.hpp): nothing is stored, and a recomputed forward sees the
// same mask. Each module draws its own mask, as PEFT's per-module Dropout does.
//
// The adapters live on the model's device (device/cpu.hpp): their weights
// and scratch in its memory, their products and masks run by it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/random.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/linear_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/transformer.hpp"

namespace ft::adapters {

struct LoraOptions {
  index_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  std::vector<std::string> target_modules;  // PEFT leaf names, or {"all-linear"}
  std::uint64_t seed = 42;
  bool use_rslora = false;  // rank-stabilised LoRA (PEFT's use_rslora)

  double scale() const { return use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r); }
};

// One adapted HF projection: rows [row_offset, row_offset + rows) of a fused slot.
struct LoraTarget {
  std::string module;  // PEFT's module name, e.g. "model.layers.3.self_attn.q_proj"
  index_t layer = 0;
  models::LinearSlot slot = models::LinearSlot::qkv;
  index_t row_offset = 0, rows = 0;
  index_t in = 0, out = 0;  // the slot's input width and fused output width
  models::RowOrder order = models::RowOrder::same;
};

namespace detail {

struct SlotName {
  const char* suffix;
  models::LinearSlot slot;
};
inline constexpr SlotName slot_names[] = {{"qkv.weight", models::LinearSlot::qkv},
                                          {"o.weight", models::LinearSlot::o},
                                          {"mlp_in.weight", models::LinearSlot::mlp_in},
                                          {"mlp_out.weight", models::LinearSlot::mlp_out}};

inline std::pair<index_t, index_t> slot_widths(const models::TransformerConfig& c, models::LinearSlot slot,
                                               index_t layer) {
  const index_t C = c.hidden_size, HD = c.num_heads * c.head_dim;
  switch (slot) {
    case models::LinearSlot::qkv: return {C, c.qkv_width()};
    case models::LinearSlot::o: return {HD, C};
    case models::LinearSlot::mlp_in: return {C, c.mlp_in_width(layer)};
    case models::LinearSlot::mlp_out: return {c.mlp_width(layer), C};
  }
  return {0, 0};
}

}  // namespace detail

// The modules a list of PEFT target names adapts, from a family's weight map.
// "all-linear" is every projection inside the blocks (PEFT leaves the output
// layer out too). A name that matches nothing is an error.
inline std::vector<LoraTarget> lora_targets(const models::ModelSpec& spec, const std::vector<std::string>& names) {
  const bool all = names.size() == 1 && names[0] == "all-linear";
  // PEFT's all-linear also adapts a mixture of experts' routers and routed
  // experts, which ft's LoRA does not: refused rather than silently smaller.
  if (all && spec.config.moe.sparse_layers() > 0)
    throw Error("lora.target_modules = [\"all-linear\"] on " + spec.config.architecture +
                " would, as in PEFT, also adapt the routers and routed experts, which ft's LoRA does not yet; "
                "name the projections instead, e.g. [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]");
  std::vector<LoraTarget> out;
  std::vector<bool> used(names.size(), false);
  for (const models::WeightBinding& w : spec.weights) {
    constexpr std::string_view weight = ".weight", layers = "layers.";
    if (!w.hf_name.ends_with(weight) || !w.param.starts_with(layers)) continue;
    const auto* slot = std::ranges::find_if(detail::slot_names, [&](const detail::SlotName& s) {
      return w.param.ends_with(std::string(".") + s.suffix);
    });
    if (slot == std::end(detail::slot_names)) continue;
    const std::string module = w.hf_name.substr(0, w.hf_name.size() - weight.size());
    const std::string leaf = module.substr(module.rfind('.') + 1);
    bool wanted = all;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == leaf) wanted = used[i] = true;
    if (!wanted) continue;

    LoraTarget t;
    t.module = module;
    t.layer = std::stoll(w.param.substr(layers.size()));
    t.slot = slot->slot;
    t.row_offset = w.row_offset;
    std::tie(t.in, t.out) = detail::slot_widths(spec.config, t.slot, t.layer);
    t.rows = models::binding_rows(spec, w, t.out);
    t.order = w.order;
    out.push_back(std::move(t));
  }
  if (!all)
    for (std::size_t i = 0; i < names.size(); ++i)
      if (!used[i])
        throw Error("lora.target_modules: \"" + names[i] + "\" matches no projection of this " +
                    spec.config.architecture + " model");
  return out;
}

// A module's dropout mask: element i is kept when its hash draws below
// `keep`, and a kept value is scaled by 1 / keep.
template <class A>
struct DropoutMask {
  std::uint64_t key;
  float keep;
  A inv_keep;
  FT_HOST_DEVICE bool kept(index_t i) const { return uniform01(key, std::uint64_t(i)) < keep; }
};

// Index i of x [N, in]: x with the mask applied.
template <class T>
struct DropoutApply {
  T* out;
  const T* x;
  DropoutMask<acc_t<T>> mask;

  FT_HOST_DEVICE void operator()(index_t i) const {
    out[i] = mask.kept(i) ? T(acc_t<T>(x[i]) * mask.inv_keep) : T(0.0f);
  }
};

// Index i: dx += the mask's derivative applied to the gradient in `scratch`.
template <class T>
struct DropoutBackward {
  T* dx;
  const T* scratch;
  DropoutMask<acc_t<T>> mask;

  FT_HOST_DEVICE void operator()(index_t i) const {
    if (mask.kept(i)) dx[i] = T(acc_t<T>(dx[i]) + acc_t<T>(scratch[i]) * mask.inv_keep);
  }
};

// The adapters of one block: one flat buffer holding every module's A and B.
template <element T, class Device = device::Cpu>
class LoraBlock final : public models::LinearAdapter<T, Device> {
public:
  using A_t = acc_t<T>;
  using Memory = typename Device::Memory;

  LoraBlock(std::vector<LoraTarget> targets, const LoraOptions& options)
      : targets_(std::move(targets)), r_(options.r), scale_(options.scale()), dropout_(options.dropout) {
    declare(params_, targets_, r_);
    params_.allocate();
    // PEFT's initialisation: A uniform in +-1/sqrt(in), B zero (as allocated).
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      Rng rng(derive_key(derive_key(options.seed, std::uint64_t(t.layer)), k));
      std::vector<T> a(std::size_t(r_ * t.in));
      const double bound = 1.0 / std::sqrt(double(t.in));
      for (T& v : a) v = T(float((2.0 * rng.uniform() - 1.0) * bound));
      Device::from_host(a_of(k), a.data(), a.size() * sizeof(T));
    }
  }

  // One block's A and B matrices, declared into any buffer (the memory
  // estimate counts them without allocating).
  template <class Buffer>
  static void declare(Buffer& params, const std::vector<LoraTarget>& targets, index_t r) {
    for (const LoraTarget& t : targets) {
      params.declare(path_in_block(t) + ".lora_A", {r, t.in});
      params.declare(path_in_block(t) + ".lora_B", {t.rows, r});
    }
  }

  models::ParameterBuffer<T, Memory>& parameters() { return params_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  T* a_of(std::size_t k) const { return params_.value(name_of(k, ".lora_A")); }
  T* b_of(std::size_t k) const { return params_.value(name_of(k, ".lora_B")); }
  T* da_of(std::size_t k) const { return params_.grad(name_of(k, ".lora_A")); }
  T* db_of(std::size_t k) const { return params_.grad(name_of(k, ".lora_B")); }

  // Dropout is applied only while training; `key` identifies the micro-batch.
  void set_dropout(bool training, std::uint64_t key) {
    training_ = training;
    key_ = key;
  }

  void forward(models::LinearSlot slot, T* y, const T* x, index_t N) override {
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      if (t.slot != slot) continue;
      const T* input = dropped_input(k, x, N);
      const T* down = project_down(k, input, N);
      gemm(Op::none, Op::transpose, N, t.rows, r_, A_t(scale_), down, r_, b_of(k), r_, 1, y + t.row_offset, t.out);
    }
  }

  void backward(models::LinearSlot slot, T* dx, const T* dy, const T* x, index_t N) override {
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      if (t.slot != slot) continue;
      const T* dy_rows = dy + t.row_offset;
      const T* input = dropped_input(k, x, N);
      const T* down = project_down(k, input, N);
      // dB += scale dy^T (A x);  d(A x) = scale dy B
      gemm(Op::transpose, Op::none, t.rows, r_, N, A_t(scale_), dy_rows, t.out, down, r_, 1, db_of(k), r_);
      if (d_down_.size(0) != N) d_down_ = Tensor<T, Memory>(Shape{N, r_});
      gemm(Op::none, Op::none, N, r_, t.rows, A_t(scale_), dy_rows, t.out, b_of(k), r_, 0, d_down_.data(), r_);
      // dA += d(A x)^T dropout(x);  dx += dropout'(d(A x) A)
      gemm(Op::transpose, Op::none, r_, t.in, N, 1, d_down_.data(), r_, input, t.in, 1, da_of(k), t.in);
      if (!dropping()) {
        gemm(Op::none, Op::none, N, t.in, r_, 1, d_down_.data(), r_, a_of(k), t.in, 1, dx, t.in);
        continue;
      }
      gemm(Op::none, Op::none, N, t.in, r_, 1, d_down_.data(), r_, a_of(k), t.in, 0, dropped_.data(), t.in);
      Device::parallel_for(N * t.in, DropoutBackward<T>{dx, dropped_.data(), mask(k)});
    }
  }

private:
  bool dropping() const { return training_ && dropout_ > 0; }
  DropoutMask<A_t> mask(std::size_t k) const {
    return {derive_key(derive_key(key_, std::uint64_t(targets_[k].layer)), k), float(A_t(1.0 - dropout_)),
            A_t(1) / A_t(1.0 - dropout_)};
  }
  static void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, A_t alpha, const T* a, index_t lda, const T* b,
                   index_t ldb, A_t beta, T* c, index_t ldc) {
    Device::template gemm<T>(op_a, op_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  // A dropout(x) [N, r], into scratch. Backward computes it again rather
  // than keep it from forward: the adapter then holds no state between the
  // two, so micro-batches in flight at once (a pipeline) need nothing of it,
  // and the GEMM costs r / out of the base projection's.
  const T* project_down(std::size_t k, const T* input, index_t N) {
    if (down_.size(0) != N) down_ = Tensor<T, Memory>(Shape{N, r_});
    gemm(Op::none, Op::transpose, N, r_, targets_[k].in, 1, input, targets_[k].in, a_of(k), targets_[k].in, 0,
         down_.data(), r_);
    return down_.data();
  }

  // x, or x with this module's dropout mask applied (into scratch).
  const T* dropped_input(std::size_t k, const T* x, index_t N) {
    if (!dropping()) return x;
    const index_t n = N * targets_[k].in;
    if (dropped_.numel() < n) dropped_ = Tensor<T, Memory>(Shape{n});
    Device::parallel_for(n, DropoutApply<T>{dropped_.data(), x, mask(k)});
    return dropped_.data();
  }

  // A module's path below its layer ("self_attn.q_proj", "mlp.c_proj"):
  // unique in its block, where a leaf may name two projections (GPTBigCode's c_proj).
  static std::string path_in_block(const LoraTarget& t) {
    const std::string layer = "." + std::to_string(t.layer) + ".";
    const std::size_t at = t.module.find(layer);
    return at == std::string::npos ? t.module : t.module.substr(at + layer.size());
  }
  std::string name_of(std::size_t k, const char* what) const { return path_in_block(targets_[k]) + what; }

  std::vector<LoraTarget> targets_;
  index_t r_;
  double scale_, dropout_;
  bool training_ = false;
  std::uint64_t key_ = 0;
  models::ParameterBuffer<T, Memory> params_;
  Tensor<T, Memory> down_, d_down_, dropped_;
};

// LoRA over a whole model: one LoraBlock per block that has targets, attached
// to the model's blocks unless `attach` is false (inference applies an
// adapter to some sequences of a batch only, infer/adapter.hpp). The model
// must outlive it and be frozen.
template <element T, class Device = device::Cpu>
class LoraModel {
public:
  LoraModel(models::Transformer<T, Device>& model, const LoraOptions& options, bool attach = true)
      : model_(&model), options_(options), attached_(attach) {
    auto targets = lora_targets(model.spec(), options.target_modules);
    if (targets.empty()) throw Error("lora.target_modules: no projection of this model is adapted");
    for (auto& block : model.blocks()) {
      std::vector<LoraTarget> mine;
      for (const LoraTarget& t : targets)
        if (t.layer == block.layer()) mine.push_back(t);
      if (mine.empty()) continue;
      blocks_.push_back(std::make_unique<LoraBlock<T, Device>>(std::move(mine), options));
      if (attach) block.set_adapter(blocks_.back().get());
    }
  }
  ~LoraModel() {
    if (attached_)
      for (auto& block : model_->blocks()) block.set_adapter(nullptr);
  }
  LoraModel(const LoraModel&) = delete;
  LoraModel& operator=(const LoraModel&) = delete;

  const LoraOptions& options() const { return options_; }
  std::vector<std::unique_ptr<LoraBlock<T, Device>>>& blocks() { return blocks_; }

  void set_dropout(bool training, std::uint64_t key) {
    for (auto& b : blocks_) b->set_dropout(training, key);
  }

  // W += scale * B A on every adapted row range, then the adapters leave the
  // blocks (PEFT's merge_and_unload): the model alone computes what the
  // adapted model did, and nothing adds the update a second time. A and B
  // stay readable here, e.g. to save them.
  void merge_into_model() {
    for (auto& b : blocks_) {
      auto& block = model_->blocks()[std::size_t(b->targets()[0].layer)];
      for (std::size_t k = 0; k < b->targets().size(); ++k) {
        const LoraTarget& t = b->targets()[k];
        const char* suffix = std::ranges::find_if(detail::slot_names, [&](const detail::SlotName& s) {
                               return s.slot == t.slot;
                             })->suffix;
        T* w = block.parameters().value(suffix) + t.row_offset * t.in;
        Device::template gemm<T>(Op::none, Op::none, t.rows, t.in, options_.r, acc_t<T>(options_.scale()),
                                 b->b_of(k), options_.r, b->a_of(k), t.in, 1, w, t.in);
      }
    }
    for (auto& block : model_->blocks()) block.set_adapter(nullptr);
    attached_ = false;
  }

private:
  models::Transformer<T, Device>* model_;
  LoraOptions options_;
  bool attached_;
  std::vector<std::unique_ptr<LoraBlock<T, Device>>> blocks_;
};

}  // namespace ft::adapters
