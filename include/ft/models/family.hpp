#pragma once
// A model family is the policy that says what network a Trainer builds: which
// HF `architectures` values it reads from config.json, the names of its
// linear projections (LoRA targets), and (as the model issue
// lands) its stage list, weight-name map and FLOPs per token.
#include <array>
#include <concepts>
#include <ranges>
#include <string_view>

#include "ft/core/policy.hpp"

namespace ft::models {
struct Policy {};  // base tag of every model family
}

namespace ft {

template <class M>
concept model_family = named_policy<M> && std::derived_from<M, models::Policy> && requires {
  // The HF `architectures` values this family loads, e.g. "LlamaForCausalLM".
  { M::hf_architectures } -> std::ranges::range;
  requires std::convertible_to<std::ranges::range_value_t<decltype(M::hf_architectures)>,
                               std::string_view>;
  // Names of its linear projections, as PEFT's target_modules spells them.
  { M::linear_modules } -> std::ranges::range;
  // What LoRA adapts when a recipe names no target_modules (PEFT's defaults).
  { M::default_lora_targets } -> std::ranges::range;
};

}  // namespace ft
