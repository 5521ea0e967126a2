#pragma once
// PEFT LoRA adapters, in PEFT's own directory layout, so PEFT loads ft's
// adapters and ft loads PEFT's:
//
//   adapter_config.json        {"peft_type": "LORA", "r", "lora_alpha", "use_rslora",
//                               "target_modules", "fan_in_fan_out", "rank_pattern",
//                               "alpha_pattern", "base_model_name_or_path", ...}
//   adapter_model.safetensors  base_model.model.<module>.lora_A.weight  [r, in]
//                              base_model.model.<module>.lora_B.weight  [out, r]
//                              base_model.model.<module>.lora_embedding_A  [r, rows]
//                              base_model.model.<module>.lora_embedding_B  [cols, r]
//                              base_model.model.<module>.base_layer.weight or
//                              <module>.weight (modules saved whole)
//
// A module may wrap a parameter rather than be a layer (PEFT's
// target_parameters, its ParamWrapper): a stacked expert weight [E, out, in]
// has lora_A [E r, in] and lora_B [out, r E], and two wrapped parameters of
// one module nest, the first the module declares innermost, named
// <module>.base_layer (gate_up_proj inside down_proj's wrapper).
//
// The adapted weight is W + scale * B A with scale = alpha / r, or
// alpha / sqrt(r) with rsLoRA (for embeddings: W + scale * (B A)^T).
// Variants ft does not implement (DoRA, other PEFT types, fan-in-fan-out
// layers) are refused by name, never merged wrongly.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/io/hf_config.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/io/safetensors.hpp"
#include "ft/device/cpu/gemm.hpp"
#include "ft/version.hpp"

namespace ft::io {

// An adapter's weights: adapter_model.safetensors, or adapter_model.bin as
// PEFT writes it with safe_serialization=False.
inline SafetensorsFile open_adapter_weights(const std::filesystem::path& dir) {
  const std::filesystem::path bin = dir / "adapter_model.bin";
  if (!std::filesystem::exists(dir / "adapter_model.safetensors") && std::filesystem::exists(bin))
    return ModelWeights::open_weight_file(bin);
  return SafetensorsFile::open(dir / "adapter_model.safetensors");
}

// Whether a target_modules or target_parameters entry names a module or
// parameter: all of its name, or the name's end after a dot, as PEFT matches a list.
inline bool peft_names(const std::string& name, const std::string& key) {
  return name == key || (name.size() > key.size() && name.ends_with(key) && name[name.size() - key.size() - 1] == '.');
}

// Whether a rank_pattern / alpha_pattern key names a module or parameter: PEFT
// matches the key as a regular expression on the whole name, or on its end
// after a dot. A key that is not a regular expression throws std::regex_error.
inline bool peft_pattern_names(const std::string& name, const std::string& pattern) {
  return std::regex_match(name, std::regex("(.*\\.)?(" + pattern + ")"));
}

struct LoraModule {
  std::string weight;  // HF name of the base weight, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::string module;  // PEFT's module name, e.g. "model.layers.0.mlp.experts.base_layer"
  bool wraps_parameter = false;  // a target_parameters module: `weight` is the parameter it wraps
  std::int64_t experts = 1;      // a stacked expert weight's experts, each with its own A and B
  bool embedding = false;
  const TensorView* A = nullptr;
  const TensorView* B = nullptr;
  double scale = 0;
};

class PeftAdapter {
public:
  static PeftAdapter open(const std::filesystem::path& dir) {
    PeftAdapter a;
    a.dir_ = dir;
    const std::filesystem::path config_file = dir / "adapter_config.json";
    if (!std::filesystem::exists(config_file))
      throw Error(dir.string() + ": not a PEFT adapter directory (no adapter_config.json)");
    a.config_ = read_json_file(config_file);
    const std::string where = config_file.string() + ": ";
    auto text = [&](const char* key, const char* fallback) {
      return a.config_.contains(key) && a.config_[key].is_string() ? a.config_[key].get<std::string>()
                                                                   : std::string(fallback);
    };
    auto flag = [&](const char* key) { return a.config_.contains(key) && a.config_[key].is_boolean() && a.config_[key].get<bool>(); };
    if (text("peft_type", "") != "LORA")
      throw Error(where + "peft_type \"" + text("peft_type", "") + "\" is not supported; allowed: LORA");
    if (flag("use_dora")) throw Error(where + "DoRA adapters (use_dora) are not supported");
    if (flag("fan_in_fan_out")) throw Error(where + "fan_in_fan_out adapters (GPT-2 Conv1D layers) are not supported");
    if (!a.config_.contains("r") || !a.config_["r"].is_number_integer() || a.config_["r"].get<int>() <= 0)
      throw Error(where + "\"r\" must be a positive integer");
    if (!a.config_.contains("lora_alpha") || !a.config_["lora_alpha"].is_number())
      throw Error(where + "\"lora_alpha\" must be a number");
    a.rslora_ = flag("use_rslora");

    a.weights_ = std::make_shared<SafetensorsFile>(open_adapter_weights(dir));
    a.collect();
    return a;
  }

  const nlohmann::json& config() const { return config_; }
  bool rslora() const { return rslora_; }
  const SafetensorsFile& file() const { return *weights_; }
  const std::vector<LoraModule>& modules() const { return modules_; }
  // Whole weights the adapter carries (modules_to_save, saved embedding layers), by HF name.
  const std::vector<std::pair<std::string, const TensorView*>>& whole_weights() const { return whole_; }

private:
  // "base_model.model.model.layers.0.q_proj.lora_A.weight" -> "model.layers.0.q_proj"
  static std::string module_of(std::string name, const std::string& suffix) {
    const std::string prefix = "base_model.model.";
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    name = name.substr(0, name.size() - suffix.size());
    const std::string named = ".default";  // adapters saved with their adapter name
    if (name.size() > named.size() && name.compare(name.size() - named.size(), named.size(), named) == 0)
      name.resize(name.size() - named.size());
    return name;
  }
  static bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  // PEFT matches rank_pattern / alpha_pattern keys as regexes on the module's full name, anchored at the end.
  double pattern_value(const char* key, const std::string& module, double fallback) const {
    if (!config_.contains(key) || !config_[key].is_object()) return fallback;
    for (const auto& [pattern, value] : config_[key].items()) {
      if (!value.is_number()) continue;
      try {
        if (peft_pattern_names(module, pattern)) return value.get<double>();
      } catch (const std::regex_error&) {
        throw Error((dir_ / "adapter_config.json").string() + ": " + key + " key \"" + pattern +
                    "\" is not a valid regular expression");
      }
    }
    return fallback;
  }

  // The parameter a module wraps (PEFT's target_parameters), or "" for a
  // layer. Stacked expert weights are the experts module's gate_up_proj and
  // down_proj, in that order; a router is its module's weight.
  std::string parameter_of(const std::string& module_name) const {
    const auto list = config_.find("target_parameters");
    if (list == config_.end() || !list->is_array()) return "";
    std::string layer = module_name;
    std::size_t depth = 0;
    for (const std::string inner = ".base_layer"; layer.ends_with(inner); ++depth) layer.resize(layer.size() - inner.size());
    std::vector<std::string> candidates{layer + ".weight"};
    if (layer.ends_with(".experts")) candidates = {layer + ".gate_up_proj", layer + ".down_proj"};
    std::vector<std::string> wrapped;
    for (const std::string& c : candidates)
      if (std::ranges::any_of(*list, [&](const nlohmann::json& key) {
            return key.is_string() && peft_names(c, key.get<std::string>());
          }))
        wrapped.push_back(c);
    return depth < wrapped.size() ? wrapped[wrapped.size() - 1 - depth] : "";
  }

  void collect() {
    const std::string where = weights_->path().string() + ": ";
    std::map<std::string, LoraModule> found;
    for (const TensorView& t : weights_->tensors()) {
      std::string module_name;
      if (ends_with(t.name, ".lora_A.weight") || ends_with(t.name, ".lora_embedding_A")) {
        bool embedding = ends_with(t.name, ".lora_embedding_A");
        module_name = module_of(t.name, embedding ? ".lora_embedding_A" : ".lora_A.weight");
        found[module_name].A = &t;
        found[module_name].embedding = embedding;
      } else if (ends_with(t.name, ".lora_B.weight") || ends_with(t.name, ".lora_embedding_B")) {
        module_name = module_of(t.name, ends_with(t.name, ".lora_B.weight") ? ".lora_B.weight" : ".lora_embedding_B");
        found[module_name].B = &t;
      } else if (ends_with(t.name, ".base_layer.weight")) {
        whole_.emplace_back(module_of(t.name, ".base_layer.weight") + ".weight", &t);
      } else if (ends_with(t.name, ".weight") || ends_with(t.name, ".bias")) {
        whole_.emplace_back(module_of(t.name, ""), &t);
      } else {
        throw Error(where + "tensor \"" + t.name + "\" is not a LoRA weight ft knows (lora_A, lora_B, lora_embedding_A/B)");
      }
    }
    const double default_r = config_["r"].get<double>(), default_alpha = config_["lora_alpha"].get<double>();
    for (auto& [module, m] : found) {
      if (!m.A || !m.B) throw Error(where + "module \"" + module + "\" has lora_" + (m.A ? "A" : "B") + " without its pair");
      if (m.A->shape.size() != 2 || m.B->shape.size() != 2 || m.A->shape[0] != m.B->shape[1])
        throw Error(where + "module \"" + module + "\": lora_A and lora_B shapes do not chain (A [r, in], B [out, r])");
      const std::string parameter = parameter_of(module);
      const std::string key = parameter.empty() ? module : parameter;
      double r = pattern_value("rank_pattern", key, default_r);
      double alpha = pattern_value("alpha_pattern", key, default_alpha);
      const std::int64_t rows = m.A->shape[0];
      // A stacked weight's A holds every expert's r rows.
      if (parameter.empty() ? double(rows) != r : std::fmod(double(rows), r) != 0)
        throw Error(where + "module \"" + module + "\" has rank " + std::to_string(rows) +
                    ", adapter_config.json says " + std::to_string(int(r)));
      m.module = module;
      m.wraps_parameter = !parameter.empty();
      m.experts = rows / std::int64_t(r);
      m.weight = parameter.empty() ? module + ".weight" : parameter;
      m.scale = rslora_ ? alpha / std::sqrt(r) : alpha / r;
      modules_.push_back(m);
    }
  }

  std::filesystem::path dir_;
  nlohmann::json config_;
  bool rslora_ = false;
  std::shared_ptr<SafetensorsFile> weights_;
  std::vector<LoraModule> modules_;
  std::vector<std::pair<std::string, const TensorView*>> whole_;
};

// Writes <dir>/adapter_config.json: the adapter type's own keys in `config`,
// then the keys every PEFT config has, as an inference-mode adapter by ft.
inline void write_peft_config(const std::filesystem::path& dir, nlohmann::ordered_json config) {
  config["inference_mode"] = true;
  config["modules_to_save"] = nullptr;
  config["revision"] = nullptr;
  config["auto_mapping"] = nullptr;
  config["peft_version"] = std::string("ft-") + FT_VERSION_STRING;
  std::ofstream out(dir / "adapter_config.json");
  out << config.dump(2) << "\n";
  if (!out) throw Error((dir / "adapter_config.json").string() + ": cannot be written");
}

// W [rows, cols] (float) += scale * B A, or its transpose for an embedding.
inline void merge_lora_module(const PeftAdapter& adapter, const LoraModule& m, float* weight, std::int64_t rows,
                              std::int64_t cols) {
  const std::int64_t r = m.A->shape[0];
  std::vector<float> A(std::size_t(m.A->numel())), B(std::size_t(m.B->numel()));
  copy_elements(adapter.file(), *m.A, A.data(), m.A->numel());
  copy_elements(adapter.file(), *m.B, B.data(), m.B->numel());
  bool fits = m.embedding ? m.A->shape[1] == rows && m.B->shape[0] == cols
                          : m.B->shape[0] == rows && m.A->shape[1] == cols;
  if (!fits)
    throw Error(adapter.file().path().string() + ": LoRA for \"" + m.weight + "\" does not fit its base weight [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  if (m.embedding)  // A [r, rows], B [cols, r]: W += scale * A^T B^T
    gemm<float>(Op::transpose, Op::transpose, rows, cols, r, float(m.scale), A.data(), rows, B.data(), r, 1, weight,
                cols);
  else  // B [rows, r], A [r, cols]
    gemm<float>(Op::none, Op::none, rows, cols, r, float(m.scale), B.data(), r, A.data(), cols, 1, weight, cols);
}

}  // namespace ft::io
