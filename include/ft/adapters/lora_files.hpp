#pragma once
// ft's LoRA adapters in PEFT's files (layout in ft/io/peft.hpp), so that
// `PeftModel.from_pretrained(base, dir)` loads what ft trained, and ft resumes
// from what it saved. B's rows are written in HF's row order (GPT-NeoX's
// query_key_value interleaves heads; ft does not).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/adapters/lora.hpp"
#include "ft/io/model_files.hpp"
#include "ft/io/peft.hpp"

namespace ft::adapters {

namespace detail {
// ft's B <-> PEFT's lora_B for one module. ft's is [E rows, r], expert by
// expert in ft's row order; PEFT's is [rows, r E] in HF's row order, column
// j E + e holding expert e's column j (E = 1 for a layer).
template <class T>
void permute_b(const LoraTarget& t, index_t heads, index_t r, const T* from, T* to, bool to_hf) {
  const index_t E = t.experts;
  for (index_t e = 0; e < E; ++e)
    for (index_t row = 0; row < t.rows; ++row) {
      const index_t hf = models::hf_row(t.order, row, t.rows, heads);
      for (index_t j = 0; j < r; ++j) {
        const index_t ft_at = (e * t.rows + row) * r + j, hf_at = hf * r * E + j * E + e;
        to[to_hf ? hf_at : ft_at] = from[to_hf ? ft_at : hf_at];
      }
    }
}

// How adapter_config.json names a wrapped parameter in target_parameters:
// its name past the layer's module ("gate_up_proj", "gate.weight").
inline std::string parameter_key(const std::string& parameter) {
  const std::size_t last = parameter.rfind('.');
  if (!parameter.ends_with(".weight")) return parameter.substr(last + 1);
  return parameter.substr(parameter.rfind('.', last - 1) + 1);
}
}  // namespace detail

// Writes adapter_config.json and adapter_model.safetensors (dtype "F32", "BF16" or "F16") into dir.
// The matrices are read through the host; a stacked weight's of every
// expert, put together first where ranks hold runs of them (expert parallelism).
template <element T, class Device>
void save_peft_adapter(LoraModel<T, Device>& lora, const models::TransformerConfig& config, const std::string& base_model,
                       const std::filesystem::path& dir, const std::string& dtype) {
  const LoraOptions& o = lora.options();
  std::vector<std::vector<std::byte>> bytes;
  std::vector<io::TensorToWrite> tensors;
  std::vector<std::string> leaves, parameters;
  // The options' patterns as given, then those PEFT's all-linear adds for fused experts.
  nlohmann::ordered_json rank_pattern = nlohmann::ordered_json::object(),
                         alpha_pattern = nlohmann::ordered_json::object();
  for (const auto& [pattern, r] : o.rank_pattern) rank_pattern[pattern] = r;
  for (const auto& [pattern, alpha] : o.alpha_pattern) alpha_pattern[pattern] = alpha;
  auto add = [](std::vector<std::string>& list, const std::string& name) {
    if (std::ranges::find(list, name) == list.end()) list.push_back(name);
  };
  for (auto& block : lora.blocks())
    for (std::size_t k = 0; k < block->targets().size(); ++k) {
      const LoraTarget& t = block->targets()[k];
      const index_t r = block->rank_of(k), rows = t.experts * r;
      const std::string prefix = "base_model.model." + t.module;
      std::vector<T> a_ft(std::size_t(rows * t.in)), b_ft(std::size_t(t.experts * t.rows * r));
      const T *a_all = block->every_expert_of(k, true), *b_all = block->every_expert_of(k, false);
      if (!a_all || !b_all) throw Error("internal: the adapter's experts are not put together for saving");
      Device::to_host(a_ft.data(), a_all, a_ft.size() * sizeof(T));
      Device::to_host(b_ft.data(), b_all, b_ft.size() * sizeof(T));
      std::vector<float> a(a_ft.begin(), a_ft.end());
      std::vector<T> b_hf(b_ft.size());
      detail::permute_b(t, config.num_heads, r, b_ft.data(), b_hf.data(), true);
      std::vector<float> b(b_hf.begin(), b_hf.end());
      bytes.push_back(io::encode_floats(a, dtype));
      tensors.push_back({prefix + ".lora_A.weight", dtype, {rows, t.in}, {}, {}});
      bytes.push_back(io::encode_floats(b, dtype));
      tensors.push_back({prefix + ".lora_B.weight", dtype, {t.rows, rows}, {}, {}});
      if (t.parameter.empty()) {
        add(leaves, t.module.substr(t.module.rfind('.') + 1));
        continue;
      }
      const std::string key = detail::parameter_key(t.parameter);
      add(parameters, key);
      // PEFT's pattern for it, a regex over the parameter's name: the whole
      // kind's (as PEFT writes it), or this parameter's alone where the
      // options name others of its kind (so no module is named twice).
      auto kind_named = [&](const auto& patterns, const char* what) {
        return std::ranges::any_of(lora.blocks(), [&](const auto& b) {
          return std::ranges::any_of(b->targets(), [&](const LoraTarget& other) {
            return other.parameter.ends_with("." + key) && detail::pattern_of(patterns, other.parameter, what);
          });
        });
      };
      const std::string own = std::regex_replace(t.parameter, std::regex("\\."), "\\.");
      if (t.rank != o.r && !detail::pattern_of(o.rank_pattern, t.parameter, "rank_pattern"))
        rank_pattern[kind_named(o.rank_pattern, "rank_pattern") ? own : ".*\\." + key] = t.rank;
      if (t.alpha != o.alpha && !detail::pattern_of(o.alpha_pattern, t.parameter, "alpha_pattern"))
        alpha_pattern[kind_named(o.alpha_pattern, "alpha_pattern") ? own : ".*\\." + key] = t.alpha;
    }
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = bytes[i];
  io::write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});

  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["base_model_name_or_path"] = base_model;
  c["r"] = o.r;
  c["lora_alpha"] = o.alpha;
  c["lora_dropout"] = o.dropout;
  c["target_modules"] = leaves;
  c["target_parameters"] = parameters.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(parameters);
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["use_rslora"] = o.use_rslora;
  c["use_dora"] = false;
  c["init_lora_weights"] = true;
  c["rank_pattern"] = rank_pattern;
  c["alpha_pattern"] = alpha_pattern;
  io::write_peft_config(dir, std::move(c));
}

// The options a PEFT adapter was trained with, so that a LoraModel built
// from them has its modules, each at the rank and alpha it has there
// (rank_pattern and alpha_pattern resolve as in PEFT).
inline LoraOptions lora_options_of(const io::PeftAdapter& peft) {
  const nlohmann::json& c = peft.config();
  LoraOptions options;
  options.r = c["r"].get<index_t>();
  options.alpha = c["lora_alpha"].get<double>();
  options.use_rslora = peft.rslora();
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& ranks = c.contains("rank_pattern") && c["rank_pattern"].is_object() ? c["rank_pattern"] : none;
  const nlohmann::json& alphas = c.contains("alpha_pattern") && c["alpha_pattern"].is_object() ? c["alpha_pattern"] : none;
  for (const auto& [pattern, value] : ranks.items())
    if (value.is_number_integer()) options.rank_pattern.emplace_back(pattern, value.get<index_t>());
  for (const auto& [pattern, value] : alphas.items())
    if (value.is_number()) options.alpha_pattern.emplace_back(pattern, value.get<double>());
  // Each module by its whole name: an adapter of some layers, or of one of two
  // modules with the same last name, adapts exactly those.
  std::set<std::string> modules, parameters;
  for (const io::LoraModule& m : peft.modules())
    (m.wraps_parameter ? parameters : modules).insert(m.wraps_parameter ? m.weight : m.weight.substr(0, m.weight.rfind('.')));
  options.target_modules.assign(modules.begin(), modules.end());
  options.target_parameters.assign(parameters.begin(), parameters.end());
  return options;
}

// Loads A and B of every module from a PEFT adapter directory into `lora`;
// the adapter must have exactly this LoRA's modules, rank and scale. Of a
// stacked weight, this rank's run of experts (expert parallelism).
template <element T, class Device>
void load_peft_adapter(LoraModel<T, Device>& lora, const models::TransformerConfig& config, const std::filesystem::path& dir) {
  const io::PeftAdapter adapter = io::PeftAdapter::open(dir);
  const std::string where = adapter.file().path().string() + ": ";
  std::size_t expected = 0;
  for (auto& block : lora.blocks())
    for (std::size_t k = 0; k < block->targets().size(); ++k, ++expected) {
      const LoraTarget& t = block->targets()[k];
      const index_t r = block->rank_of(k);
      const double scale = block->scale_of(k);
      const std::string prefix = "base_model.model." + t.module;
      const io::TensorView* a = adapter.file().find(prefix + ".lora_A.weight");
      const io::TensorView* b = adapter.file().find(prefix + ".lora_B.weight");
      if (!a || !b)
        throw Error(where + "has no LoRA weights for module \"" + t.module +
                    "\": an adapter of other target_modules, or for another base model");
      const std::vector<std::int64_t> a_shape{t.experts * r, t.in}, b_shape{t.rows, t.experts * r};
      if (a->shape != a_shape || b->shape != b_shape)
        throw Error(where + "module \"" + t.module + "\" has shapes that do not match rank " + std::to_string(r) +
                    " of this model (lora_A " + nlohmann::json(a->shape).dump() + " and lora_B " +
                    nlohmann::json(b->shape).dump() + ", where it takes " + nlohmann::json(a_shape).dump() + " and " +
                    nlohmann::json(b_shape).dump() + "): an adapter for another base model, or of another rank");
      // The same A and B under another lora_alpha (or rsLoRA) would be another model.
      const auto m = std::ranges::find(adapter.modules(), t.module, &io::LoraModule::module);
      if (m != adapter.modules().end() && std::abs(m->scale - scale) > 1e-12 * scale)
        throw Error((dir / "adapter_config.json").string() + ": module \"" + t.module + "\" has scale " +
                    nlohmann::json(m->scale).dump() + ", this run's LoRA has scale " + nlohmann::json(scale).dump() +
                    " (alpha " + nlohmann::json(lora.options().alpha).dump() +
                    (lora.options().use_rslora ? " / sqrt(r " : " / r ") + std::to_string(r) +
                    (lora.options().use_rslora ? "))" : ")"));
      std::vector<T> a_ft(std::size_t(a->numel())), b_hf(std::size_t(b->numel())), b_ft(b_hf.size());
      io::copy_elements(adapter.file(), *a, a_ft.data(), a->numel());
      io::copy_elements(adapter.file(), *b, b_hf.data(), b->numel());
      detail::permute_b(t, config.num_heads, r, b_hf.data(), b_ft.data(), false);
      const std::size_t a_per_expert = std::size_t(r * t.in), b_per_expert = std::size_t(t.rows * r),
                        run = std::size_t(t.local_experts), first = std::size_t(t.first_expert);
      Device::from_host(block->a_of(k), a_ft.data() + first * a_per_expert, run * a_per_expert * sizeof(T));
      Device::from_host(block->b_of(k), b_ft.data() + first * b_per_expert, run * b_per_expert * sizeof(T));
    }
  if (adapter.modules().size() != expected)
    throw Error(where + "has " + std::to_string(adapter.modules().size()) + " LoRA modules, this run adapts " +
                std::to_string(expected) + ": an adapter of other target_modules, or for another base model");
}

}  // namespace ft::adapters
