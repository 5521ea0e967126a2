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
// A mixture of experts' stacked expert weights and routers are adapted as
// PEFT 0.21 adapts an nn.Parameter (`target_parameters`, its ParamWrapper):
// expert e of a stacked [E, out, in] weight has its own A_e [r, in] and
// B_e [out, r]; PEFT keeps them as one lora_A [E r, in] (expert-major rows)
// and one lora_B [out, r E] whose columns are interleaved, column j E + e
// holding expert e's column j. ft keeps B expert-major too ([E out, r]) so
// each expert's update is one GEMM over its run of sorted rows, and
// converts at the file (lora_files.hpp). PEFT refuses dropout there, as ft does.
//
// The adapters live on the model's device (device/cpu.hpp): their weights
// and scratch in its memory, their products and masks run by it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "ft/core/compiled_dtypes.hpp"
#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/random.hpp"
#include "ft/device/cpu.hpp"
#include "ft/io/peft.hpp"
#include "ft/models/linear_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/transformer.hpp"

namespace ft::adapters {

struct LoraOptions {
  index_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  // PEFT's target_modules: names or ends of names after a dot ("q_proj",
  // "model.layers.0.self_attn.q_proj"), or {"all-linear"}.
  std::vector<std::string> target_modules;
  // PEFT's target_parameters: a mixture of experts' stacked expert weights
  // ("gate_up_proj", "down_proj") and routers ("gate.weight"), by the end of their names.
  std::vector<std::string> target_parameters;
  std::uint64_t seed = 42;
  bool use_rslora = false;  // rank-stabilised LoRA (PEFT's use_rslora)
  // PEFT's rank_pattern and alpha_pattern: a module's or parameter's own rank
  // or alpha, from the first key that names it (io::peft_pattern_names).
  std::vector<std::pair<std::string, index_t>> rank_pattern = {};
  std::vector<std::pair<std::string, double>> alpha_pattern = {};

  double scale() const { return scale_of(r, alpha); }
  double scale_of(index_t rank, double a) const { return use_rslora ? a / std::sqrt(double(rank)) : a / double(rank); }
};

// One adapted HF projection: rows [row_offset, row_offset + rows) of a fused
// slot, or a stacked expert weight, each expert's rows [0, rows).
struct LoraTarget {
  std::string module;     // PEFT's module name, e.g. "model.layers.3.self_attn.q_proj"
  std::string parameter;  // for a PEFT target parameter, its name ("model.layers.3.mlp.experts.gate_up_proj")
  index_t layer = 0;
  models::LinearSlot slot = models::LinearSlot::qkv;
  index_t row_offset = 0, rows = 0;
  index_t in = 0, out = 0;  // the slot's input width and fused output width
  models::RowOrder order = models::RowOrder::same;
  index_t experts = 1;  // a stacked weight's experts, each with its own A and B
  // With expert parallelism, the run of them this rank holds (all of them otherwise).
  index_t first_expert = 0, local_experts = 1;
  index_t rank = 8;     // the options' r and alpha, or this module's from rank_pattern / alpha_pattern
  double alpha = 16;

  // The name rank_pattern and alpha_pattern keys match: the parameter's, or the module's.
  const std::string& pattern_name() const { return parameter.empty() ? module : parameter; }
  double scale(const LoraOptions& o) const { return o.scale_of(rank, alpha); }
  bool stacked() const {
    return slot == models::LinearSlot::experts_gate_up || slot == models::LinearSlot::experts_down;
  }
};

namespace detail {

struct SlotName {
  const char* suffix;
  models::LinearSlot slot;
};
inline constexpr SlotName slot_names[] = {{"qkv.weight", models::LinearSlot::qkv},
                                          {"o.weight", models::LinearSlot::o},
                                          {"mlp_in.weight", models::LinearSlot::mlp_in},
                                          {"mlp_out.weight", models::LinearSlot::mlp_out},
                                          {"shared_gate.weight", models::LinearSlot::shared_gate},
                                          {"router.weight", models::LinearSlot::router},
                                          {"experts.gate_up.weight", models::LinearSlot::experts_gate_up},
                                          {"experts.down.weight", models::LinearSlot::experts_down}};
// The first five are nn.Linear modules in HF's models (target_modules); the
// router and the stacked experts are PEFT's target_parameters.
inline constexpr std::size_t module_slots = 5;

inline std::pair<index_t, index_t> slot_widths(const models::TransformerConfig& c, models::LinearSlot slot,
                                               index_t layer) {
  const index_t C = c.hidden_size, HD = c.num_heads * c.head_dim;
  switch (slot) {
    case models::LinearSlot::qkv: return {C, c.qkv_width()};
    case models::LinearSlot::o: return {HD, C};
    case models::LinearSlot::mlp_in: return {C, c.mlp_in_width(layer)};
    case models::LinearSlot::mlp_out: return {c.mlp_width(layer), C};
    case models::LinearSlot::router: return {C, c.moe.experts};
    case models::LinearSlot::shared_gate: return {C, 1};
    case models::LinearSlot::experts_gate_up: return {C, 2 * c.moe.expert_size};
    case models::LinearSlot::experts_down: return {c.moe.expert_size, C};
  }
  return {0, 0};
}

// Whether PEFT's all-linear adapts this architecture's routers and routed
// experts. Transformers 5 stores them as parameters, no longer nn.Linear;
// PEFT 0.21 converts the module names of transformers 4 (w1/w3 or
// gate_proj/up_proj into gate_up_proj, at twice the rank and alpha; w2 or
// down_proj; gate) for Mixtral and the families it converts as Qwen2-MoE
// (Qwen3-MoE among them), but not for Qwen2-MoE itself nor GraniteMoE,
// whose all-linear stays on the nn.Linear modules. ft follows it, so that
// "all-linear" means what it means in PEFT on the same model.
inline bool all_linear_adapts_experts(const models::TransformerConfig& c) {
  return c.architecture == "MixtralForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
}

// PEFT's conversion of transformers 4's names in a target_modules list, on
// those architectures: an entry that is (or ends in ".") a router's or an
// expert projection's old name becomes the parameter transformers 5 holds it
// in, and the gate and up projections, fused into gate_up_proj, only
// together; gate_up_proj then takes twice the rank and alpha. Returns
// whether that pair was converted; the other names stay modules.
struct ExpertName {
  const char* old_name;
  const char* parameter;
};
inline bool convert_expert_names(const models::TransformerConfig& c, std::vector<std::string>& names,
                                 std::vector<std::string>& parameters) {
  if (!all_linear_adapts_experts(c)) return false;
  const bool mixtral = c.architecture == "MixtralForCausalLM";
  const ExpertName renamed[] = {{"gate", "gate.weight"},
                                {mixtral ? "w1" : "gate_proj", "gate_up_proj"},
                                {mixtral ? "w3" : "up_proj", "gate_up_proj"},
                                {mixtral ? "w2" : "down_proj", "down_proj"}};
  std::vector<std::string> modules;
  bool fused[2] = {false, false};
  for (const std::string& name : names) {
    const auto* r = std::ranges::find_if(renamed, [&](const ExpertName& e) { return io::peft_names(name, e.old_name); });
    if (r == std::end(renamed)) {
      modules.push_back(name);
      continue;
    }
    if (r == renamed + 1 || r == renamed + 2) fused[r - renamed - 1] = true;
    if (std::ranges::find(parameters, r->parameter) == parameters.end()) parameters.push_back(r->parameter);
  }
  if (fused[0] != fused[1])
    throw Error(std::string("lora.target_modules: \"") + renamed[fused[0] ? 1 : 2].old_name + "\" without \"" +
                renamed[fused[0] ? 2 : 1].old_name + "\": transformers 5 fuses both into the experts' gate_up_proj "
                "(PEFT refuses this too); name both, or set lora.target_parameters = [\"gate_up_proj\"]");
  names = std::move(modules);
  return fused[0];
}

// A sparse layer's module as transformers 5 names it ("model.layers.3.mlp",
// GraniteMoE's "model.layers.3.block_sparse_moe"), found from its router's
// binding in the files, and the router's name in it. Mixtral's files keep
// transformers 4's "block_sparse_moe", which transformers 5 loads as "mlp".
struct SparseModule {
  std::string path, router;
};
inline SparseModule sparse_module(const std::string& router_hf_name) {
  for (const std::string_view leaf : {".gate.weight", ".router.layer.weight"})
    if (router_hf_name.ends_with(leaf)) {
      std::string path = router_hf_name.substr(0, router_hf_name.size() - leaf.size());
      const bool gate = leaf == ".gate.weight";
      constexpr std::string_view mixtral = ".block_sparse_moe";
      if (gate && path.ends_with(mixtral)) path.replace(path.size() - mixtral.size(), mixtral.size(), ".mlp");
      return {path, gate ? "gate" : "router"};
    }
  throw Error("internal: a router bound as \"" + router_hf_name + "\", which LoRA cannot name");
}

// The one of PEFT's rank_pattern or alpha_pattern (`key`) entries that
// names `name`, or null. PEFT takes the first key in the order it was given;
// a TOML table or a JSON object keeps no order, so two keys that name one
// module with different values are refused rather than picked between.
template <class V>
const std::pair<std::string, V>* pattern_of(const std::vector<std::pair<std::string, V>>& patterns,
                                            const std::string& name, const char* key) {
  const std::pair<std::string, V>* found = nullptr;
  for (const auto& entry : patterns) {
    bool names = false;
    try {
      names = io::peft_pattern_names(name, entry.first);
    } catch (const std::regex_error&) {
      throw Error(std::string("lora.") + key + ": \"" + entry.first + "\" is not a regular expression");
    }
    if (!names) continue;
    if (found && found->second != entry.second)
      throw Error(std::string("lora.") + key + ": \"" + found->first + "\" and \"" + entry.first + "\" both name \"" +
                  name + "\" with different values; make one of them name it alone");
    if (!found) found = &entry;
  }
  return found;
}
template <class V>
V pattern_value(const std::vector<std::pair<std::string, V>>& patterns, const std::string& name, V fallback,
                const char* key) {
  const auto* entry = pattern_of(patterns, name, key);
  return entry ? entry->second : fallback;
}

}  // namespace detail

// The modules a list of PEFT target names adapts, from a family's weight
// map, and the parameters a list of PEFT target_parameters names adapts.
// "all-linear" is every nn.Linear inside the blocks (PEFT leaves the output
// layer out too), and where PEFT converts them, the routers and routed
// experts (detail::all_linear_adapts_experts); there, transformers 4's
// names of routers and experts in a list become the parameters PEFT makes
// them (detail::convert_expert_names). A name that matches nothing is an
// error. Each target takes its rank and alpha from the options: r and
// alpha, twice both for the fused gate_up experts that PEFT's all-linear or
// its conversion adapts (it writes that rank_pattern itself), or the
// rank_pattern / alpha_pattern key that names it.
inline std::vector<LoraTarget> lora_targets(const models::ModelSpec& spec, const LoraOptions& options) {
  std::vector<std::string> names = options.target_modules;
  std::vector<std::string> parameters = options.target_parameters;
  const models::TransformerConfig& c = spec.config;
  const bool all = names.size() == 1 && names[0] == "all-linear";
  const bool all_experts = all && detail::all_linear_adapts_experts(c);
  const bool fused_by_name = !all && detail::convert_expert_names(c, names, parameters);
  std::vector<LoraTarget> out;
  std::vector<bool> used(names.size(), false);
  for (const models::WeightBinding& w : spec.weights) {
    constexpr std::string_view weight = ".weight", layers = "layers.";
    if (!w.hf_name.ends_with(weight) || !w.param.starts_with(layers)) continue;
    const auto* modules_end = std::begin(detail::slot_names) + detail::module_slots;
    const auto* slot = std::find_if(std::begin(detail::slot_names), modules_end, [&](const detail::SlotName& s) {
      return w.param.ends_with(std::string(".") + s.suffix);
    });
    if (slot == modules_end) continue;
    const std::string module = w.hf_name.substr(0, w.hf_name.size() - weight.size());
    // PEFT's conversion moves the MLP names to the experts' parameters, dense layers' included.
    const bool mlp = slot->slot == models::LinearSlot::mlp_in || slot->slot == models::LinearSlot::mlp_out;
    bool wanted = all && !(all_experts && mlp);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (io::peft_names(module, names[i])) wanted = used[i] = true;
    if (!wanted) continue;

    LoraTarget t;
    t.module = module;
    t.layer = std::stoll(w.param.substr(layers.size()));
    t.slot = slot->slot;
    t.row_offset = w.row_offset;
    std::tie(t.in, t.out) = detail::slot_widths(c, t.slot, t.layer);
    t.rows = models::binding_rows(spec, w, t.out);
    t.order = w.order;
    out.push_back(std::move(t));
  }
  if (!all)
    for (std::size_t i = 0; i < names.size(); ++i)
      if (!used[i])
        throw Error("lora.target_modules: \"" + names[i] + "\" matches no projection of this " + c.architecture +
                    " model");

  const std::vector<std::string> wanted_parameters =
      all_experts ? std::vector<std::string>{"gate_up_proj", "down_proj", "gate.weight"} : parameters;
  std::vector<bool> parameter_used(wanted_parameters.size(), false);
  std::string router_name = "gate.weight";
  for (index_t layer = 0; layer < c.num_layers; ++layer) {
    if (!c.moe.sparse_at(layer)) continue;
    const std::string router_param = "layers." + std::to_string(layer) + ".router.weight";
    const auto router = std::ranges::find(spec.weights, router_param, &models::WeightBinding::param);
    if (router == spec.weights.end()) throw Error("internal: sparse layer " + std::to_string(layer) + " has no router");
    const detail::SparseModule m = detail::sparse_module(router->hf_name);
    router_name = m.router + ".weight";
    const std::string experts = m.path + ".experts";
    struct Candidate {
      std::string name;
      models::LinearSlot slot;
    };
    const Candidate candidates[] = {{experts + ".gate_up_proj", models::LinearSlot::experts_gate_up},
                                    {experts + ".down_proj", models::LinearSlot::experts_down},
                                    {m.path + "." + router_name, models::LinearSlot::router}};
    bool matched[3] = {false, false, false};
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t i = 0; i < wanted_parameters.size(); ++i)
        if (io::peft_names(candidates[k].name, wanted_parameters[i])) matched[k] = parameter_used[i] = true;
    for (std::size_t k = 0; k < 3; ++k) {
      if (!matched[k]) continue;
      LoraTarget t;
      t.parameter = candidates[k].name;
      t.layer = layer;
      t.slot = candidates[k].slot;
      std::tie(t.in, t.out) = detail::slot_widths(c, t.slot, layer);
      t.rows = t.out;
      if (t.stacked()) {
        t.experts = c.moe.experts;
        t.first_expert = c.moe.first_local_expert();
        t.local_experts = c.moe.local_experts();
      }
      // PEFT wraps one module's parameters one inside the other, in the
      // order the module declares them: gate_up_proj inside down_proj's wrapper.
      if (t.slot == models::LinearSlot::router) t.module = m.path + "." + m.router;
      else t.module = experts + (k == 0 && matched[1] ? ".base_layer" : "");
      out.push_back(std::move(t));
    }
  }
  for (std::size_t i = 0; i < wanted_parameters.size(); ++i)
    if (!parameter_used[i])
      throw Error("lora.target_parameters: \"" + wanted_parameters[i] + "\" matches no parameter of this " +
                  c.architecture + " model; allowed: " +
                  (c.moe.sparse_layers() > 0 ? "gate_up_proj, down_proj, " + router_name
                                             : std::string("none (its layers have no experts)")));
  for (LoraTarget& t : out) {
    const index_t factor = (all_experts || fused_by_name) && t.slot == models::LinearSlot::experts_gate_up ? 2 : 1;
    t.rank = detail::pattern_value(options.rank_pattern, t.pattern_name(), factor * options.r, "rank_pattern");
    t.alpha = detail::pattern_value(options.alpha_pattern, t.pattern_name(), double(factor) * options.alpha,
                                    "alpha_pattern");
  }
  return out;
}

// The targets of these names and parameters at the default rank and alpha.
inline std::vector<LoraTarget> lora_targets(const models::ModelSpec& spec, const std::vector<std::string>& names,
                                            const std::vector<std::string>& parameters = {}) {
  LoraOptions options;
  options.target_modules = names;
  options.target_parameters = parameters;
  return lora_targets(spec, options);
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
      : targets_(std::move(targets)), options_(options) {
    declare(params_, targets_);
    params_.allocate();
    for (std::size_t k = 0; k < targets_.size(); ++k)  // found by name once; the hot path reads the slots
      slots_.push_back({params_.slot(name_of(k, ".lora_A")), params_.slot(name_of(k, ".lora_B"))});
    // PEFT's initialisation: A uniform in +-1/sqrt(in), B zero (as allocated).
    // Every expert's A is drawn and this rank's run kept, so that experts
    // spread over ranks start where one process starts.
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      Rng rng(derive_key(derive_key(options.seed, std::uint64_t(t.layer)), k));
      std::vector<T> a(std::size_t(t.experts * t.rank * t.in));
      const double bound = 1.0 / std::sqrt(double(t.in));
      for (T& v : a) v = T(float((2.0 * rng.uniform() - 1.0) * bound));
      const std::size_t per_expert = std::size_t(t.rank * t.in);
      Device::from_host(a_of(k), a.data() + std::size_t(t.first_expert) * per_expert,
                        std::size_t(t.local_experts) * per_expert * sizeof(T));
    }
  }

  // One block's A and B matrices, declared into any buffer (the memory
  // estimate counts them without allocating). A stacked weight's are its
  // experts', expert by expert, declared last as windows of every expert's
  // (ParameterBuffer::declare_rows): with expert parallelism this rank's run.
  template <class Buffer>
  static void declare(Buffer& params, const std::vector<LoraTarget>& targets) {
    for (const bool stacked : {false, true})
      for (const LoraTarget& t : targets) {
        if (t.stacked() != stacked) continue;
        const index_t r = t.rank, E = stacked ? t.experts : 0, first = t.first_expert, El = t.local_experts;
        params.declare_rows(path_in_block(t) + ".lora_A", {El * r, t.in}, first * r, E * r);
        params.declare_rows(path_in_block(t) + ".lora_B", {El * t.rows, r}, first * t.rows, E * t.rows);
      }
  }

  models::ParameterBuffer<T, Memory>& parameters() { return params_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  T* a_of(std::size_t k) const { return params_.value(slots_[k].a); }
  T* b_of(std::size_t k) const { return params_.value(slots_[k].b); }
  T* da_of(std::size_t k) const { return params_.grad(slots_[k].a); }
  T* db_of(std::size_t k) const { return params_.grad(slots_[k].b); }
  // Module k's A or B of every expert: the buffer's own, or where this rank
  // holds a run of a stacked weight's experts, the whole matrix put together
  // for a save or a merge (models/gather_windows.hpp); null before that.
  const T* every_expert_of(std::size_t k, bool a) {
    const LoraTarget& t = targets_[k];
    if (t.local_experts == t.experts) return a ? a_of(k) : b_of(k);
    const auto* whole = params_.whole(name_of(k, a ? ".lora_A" : ".lora_B"));
    return whole ? whole->data() : nullptr;
  }

  // Dropout is applied only while training; `key` identifies the micro-batch.
  void set_dropout(bool training, std::uint64_t key) {
    training_ = training;
    key_ = key;
  }

  // Module k's rank and scale (a fused expert weight's may be twice the options', as in PEFT).
  index_t rank_of(std::size_t k) const { return targets_[k].rank; }
  double scale_of(std::size_t k) const { return targets_[k].scale(options_); }

  void forward(models::LinearSlot slot, index_t expert, T* y, const T* x, index_t N) override {
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      if (t.slot != slot) continue;
      const index_t r = rank_of(k);
      const T* input = dropped_input(k, x, N);
      const T* down = project_down(k, expert, input, N);
      gemm(Op::none, Op::transpose, N, t.rows, r, A_t(scale_of(k)), down, r, matrix(b_of(k), k, expert), r, 1,
           y + t.row_offset, t.out);
    }
  }

  void backward(models::LinearSlot slot, index_t expert, T* dx, const T* dy, const T* x, index_t N) override {
    for (std::size_t k = 0; k < targets_.size(); ++k) {
      const LoraTarget& t = targets_[k];
      if (t.slot != slot) continue;
      const index_t r = rank_of(k);
      const A_t scale = A_t(scale_of(k));
      const T *a = matrix(a_of(k), k, expert, true), *b = matrix(b_of(k), k, expert);
      T *da = matrix(da_of(k), k, expert, true), *db = matrix(db_of(k), k, expert);
      const T* dy_rows = dy + t.row_offset;
      const T* input = dropped_input(k, x, N);
      const T* down = project_down(k, expert, input, N);
      // dB += scale dy^T (A x);  d(A x) = scale dy B
      gemm(Op::transpose, Op::none, t.rows, r, N, scale, dy_rows, t.out, down, r, 1, db, r);
      if (d_down_.numel() < N * r) d_down_ = Tensor<T, Memory>(Shape{N * r});
      gemm(Op::none, Op::none, N, r, t.rows, scale, dy_rows, t.out, b, r, 0, d_down_.data(), r);
      // dA += d(A x)^T dropout(x);  dx += dropout'(d(A x) A)
      gemm(Op::transpose, Op::none, r, t.in, N, 1, d_down_.data(), r, input, t.in, 1, da, t.in);
      if (!dropping()) {
        gemm(Op::none, Op::none, N, t.in, r, 1, d_down_.data(), r, a, t.in, 1, dx, t.in);
        continue;
      }
      gemm(Op::none, Op::none, N, t.in, r, 1, d_down_.data(), r, a, t.in, 0, dropped_.data(), t.in);
      Device::parallel_for(N * t.in, DropoutBackward<T>{dx, dropped_.data(), mask(k)});
    }
  }

private:
  bool dropping() const { return training_ && options_.dropout > 0; }
  DropoutMask<A_t> mask(std::size_t k) const {
    const double dropout = options_.dropout;
    return {derive_key(derive_key(key_, std::uint64_t(targets_[k].layer)), k), float(A_t(1.0 - dropout)),
            A_t(1) / A_t(1.0 - dropout)};
  }
  static void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, A_t alpha, const T* a, index_t lda, const T* b,
                   index_t ldb, A_t beta, T* c, index_t ldc) {
    Device::template gemm<T>(op_a, op_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  // Expert e's A [r, in] or B [rows, r] in a module's matrix of this
  // rank's run of experts (the matrix itself when it is not stacked).
  T* matrix(T* run, std::size_t k, index_t expert, bool a = false) const {
    const LoraTarget& t = targets_[k];
    return t.stacked() ? run + (expert - t.first_expert) * rank_of(k) * (a ? t.in : t.rows) : run;
  }

  // A dropout(x) [N, r], into scratch. Backward computes it again rather
  // than keep it from forward: the adapter then holds no state between the
  // two, so micro-batches in flight at once (a pipeline) need nothing of it,
  // and the GEMM costs r / out of the base projection's.
  const T* project_down(std::size_t k, index_t expert, const T* input, index_t N) {
    const LoraTarget& t = targets_[k];
    const index_t r = rank_of(k);
    if (down_.numel() < N * r) down_ = Tensor<T, Memory>(Shape{N * r});
    gemm(Op::none, Op::transpose, N, r, t.in, 1, input, t.in, matrix(a_of(k), k, expert, true), t.in, 0, down_.data(),
         r);
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
    std::string layer = std::to_string(t.layer);  // ".N.", built in place: GCC 12 misreads "." + ... as overlapping
    layer.insert(layer.begin(), '.');
    layer.push_back('.');
    const std::size_t at = t.module.find(layer);
    return at == std::string::npos ? t.module : t.module.substr(at + layer.size());
  }
  std::string name_of(std::size_t k, const char* what) const { return path_in_block(targets_[k]) + what; }

  struct Slots {
    models::ParameterSlot a, b;
  };
  std::vector<LoraTarget> targets_;
  std::vector<Slots> slots_;  // module k's A and B in params_
  LoraOptions options_;
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
    auto targets = lora_targets(model.spec(), options);
    if (targets.empty()) throw Error("lora.target_modules: no projection of this model is adapted");
    if (options.dropout > 0)
      for (const LoraTarget& t : targets)
        if (!t.parameter.empty())
          throw Error("lora.dropout = " + std::to_string(options.dropout) + " with LoRA on \"" + t.parameter +
                      "\": a router's or experts' input cannot be dropped apart from their own product (PEFT "
                      "refuses it too); set lora.dropout = 0, or adapt named projections only");
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
  // stay readable here, e.g. to save them. With expert parallelism, a
  // stacked weight's run of experts merges with this rank's A and B, or,
  // where the model's experts are put together whole (a save of the whole
  // model), every expert with the adapter's put together too.
  void merge_into_model() {
    for (auto& b : blocks_) {
      auto& block = model_->blocks()[std::size_t(b->targets()[0].layer)];
      for (std::size_t k = 0; k < b->targets().size(); ++k) {
        const LoraTarget& t = b->targets()[k];
        const char* suffix = std::ranges::find_if(detail::slot_names, [&](const detail::SlotName& s) {
                               return s.slot == t.slot;
                             })->suffix;
        const index_t r = b->rank_of(k);
        auto* whole = block.parameters().whole(suffix);
        T* weight = whole ? whole->data() : block.parameters().value(suffix);
        const T *lora_a = whole ? b->every_expert_of(k, true) : b->a_of(k),
                *lora_b = whole ? b->every_expert_of(k, false) : b->b_of(k);
        if (!lora_a || !lora_b) throw Error("internal: the adapter's experts are not put together for a merge");
        const index_t experts = whole ? t.experts : t.local_experts;
        for (index_t e = 0; e < experts; ++e)  // a stacked weight's experts, each [rows, in]
          Device::template gemm<T>(Op::none, Op::none, t.rows, t.in, r, acc_t<T>(b->scale_of(k)),
                                   lora_b + e * t.rows * r, r, lora_a + e * r * t.in, t.in, 1,
                                   weight + (e * t.rows + t.row_offset) * t.in, t.in);
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

// Every member of LoRA over the CPU's model of storage T, compiled once
// (core/compiled_dtypes.hpp).
#define FT_COMPILED_CPU_LORA(EXTERN, T)                      \
  EXTERN template class adapters::LoraBlock<T, device::Cpu>; \
  EXTERN template class adapters::LoraModel<T, device::Cpu>;

FT_EXTERN_COMPILED_CPU(FT_COMPILED_CPU_LORA)
