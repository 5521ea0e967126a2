#pragma once
// An adapter policy decides which parameters train and how a linear layer
// computes: Full trains the base weights; LoRA freezes them and trains a
// low-rank update beside chosen projections; Prompt freezes everything and
// trains a few virtual token embeddings placed before the input.
//
// A policy owns three things:
//   resolve(recipe, family)  fills its recipe defaults and refuses what it
//                            cannot do, with a sentence, before anything is
//                            allocated
//   describe(recipe)         one line for the run's header
//   runtime<T>               the class that does it at run time
//                            (adapters/runtime.hpp)
// so a third-party adapter trains through ft's engine like these three.
#include <algorithm>
#include <concepts>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "ft/core/error.hpp"
#include "ft/core/numeric.hpp"
#include "ft/core/policy.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::device {
struct Cpu;
}

namespace ft::adapters {
struct Policy {};  // base tag of every adapter policy

// An adapter whose runtime also takes a device, runtime<T, Device>, runs on
// devices other than the CPU.
template <element T, class Device = device::Cpu>
class FullRuntime;
template <element T, class Device = device::Cpu>
class LoraRuntime;
template <element T, class Device = device::Cpu>
class PromptRuntime;

// What an adapter may check a recipe against: the model family's linear
// projections, by the names PEFT's target_modules uses.
struct FamilyModules {
  std::string_view family;
  std::span<const std::string_view> linear_modules, default_lora_targets;
};
}  // namespace ft::adapters

namespace ft {

/// An adapter: whether the base weights train, how it completes a recipe
/// against the family's modules (`resolve`), how it describes itself, and
/// the runtime that holds what trains. ft's own: adapters::Full, LoRA,
/// Prompt (prompt tuning), named as the fifth policy of a Trainer:
/// @snippet custom_trainer/main.cpp trainer
template <class A>
concept adapter_policy = named_policy<A> && std::derived_from<A, adapters::Policy> &&
                         requires(recipe::Recipe& r, const adapters::FamilyModules& f) {
                           { A::trains_base_weights } -> std::convertible_to<bool>;
                           A::resolve(r, f);
                           { A::describe(std::as_const(r)) } -> std::convertible_to<std::string>;
                           typename A::template runtime<float>;
                         };

}  // namespace ft

namespace ft::adapters {

struct Full : Policy {
  static constexpr std::string_view name = "full";
  static constexpr std::string_view type_name = "ft::adapters::Full";
  static constexpr bool trains_base_weights = true;
  template <element T, class Device = device::Cpu>
  using runtime = FullRuntime<T, Device>;

  static void resolve(recipe::Recipe&, const FamilyModules&) {}
  static std::string describe(const recipe::Recipe&) { return "full: every weight trains"; }
};

struct LoRA : Policy {
  static constexpr std::string_view name = "lora";
  static constexpr std::string_view type_name = "ft::adapters::LoRA";
  static constexpr bool trains_base_weights = false;
  template <element T, class Device = device::Cpu>
  using runtime = LoraRuntime<T, Device>;

  // No targets means the family's default (PEFT's); every target must name
  // one of the family's projections, so a typo cannot leave a run training nothing.
  static void resolve(recipe::Recipe& r, const FamilyModules& f) {
    auto& targets = r.lora.target_modules;
    if (targets.empty()) targets.assign(f.default_lora_targets.begin(), f.default_lora_targets.end());
    if (targets.size() == 1 && targets[0] == "all-linear") return;
    for (const std::string& t : targets) {
      // A full module name ("model.layers.0.self_attn.q_proj", as PEFT may write it) is checked by its last part.
      const std::string_view leaf = std::string_view(t).substr(t.rfind('.') + 1);
      if (std::ranges::find(f.linear_modules, leaf) != f.linear_modules.end()) continue;
      std::string allowed;
      for (std::string_view m : f.linear_modules) allowed += (allowed.empty() ? "" : ", ") + std::string(m);
      throw Error("lora.target_modules: \"" + t + "\" matches no module of the " + std::string(f.family) +
                  " family; allowed: " + allowed + ", or \"all-linear\"");
    }
  }
  static std::string describe(const recipe::Recipe& r) {
    std::ostringstream os;
    os << "lora: r " << r.lora.r << ", alpha " << r.lora.alpha << (r.lora.use_rslora ? " (rsLoRA: alpha / sqrt(r))" : "")
       << ", dropout " << r.lora.dropout << " on";
    for (const auto& t : r.lora.target_modules) os << ' ' << t;
    for (const auto& t : r.lora.target_parameters) os << ' ' << t;
    if (!r.lora.init_from.empty()) os << ", from " << r.lora.init_from;
    return os.str();
  }
};

struct Prompt : Policy {
  static constexpr std::string_view name = "prompt";
  static constexpr std::string_view type_name = "ft::adapters::Prompt";
  static constexpr bool trains_base_weights = false;
  template <element T, class Device = device::Cpu>
  using runtime = PromptRuntime<T, Device>;

  static void resolve(recipe::Recipe& r, const FamilyModules&) {
    if (r.data.packing)
      throw Error("strategy.adapter = \"prompt\" puts virtual tokens before every row, and data.packing puts "
                  "several documents in one row; set data.packing = false");
  }
  static std::string describe(const recipe::Recipe& r) {
    std::string s = "prompt: " + std::to_string(r.prompt_tuning.num_virtual_tokens) + " virtual tokens";
    if (!r.prompt_tuning.init_text.empty()) s += " from \"" + r.prompt_tuning.init_text + "\"";
    if (!r.prompt_tuning.init_from.empty()) s += ", from " + r.prompt_tuning.init_from;
    return s;
  }
};

static_assert(adapter_policy<Full> && adapter_policy<LoRA> && adapter_policy<Prompt>);

}  // namespace ft::adapters
