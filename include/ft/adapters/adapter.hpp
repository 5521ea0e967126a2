#pragma once
// An adapter policy decides which parameters train and how a linear layer
// computes: Full trains the base weights; LoRA freezes them and trains a
// low-rank update beside chosen projections; Prompt freezes everything and
// trains a few virtual token embeddings placed before the input.
#include <concepts>
#include <string_view>

#include "ft/core/policy.hpp"

namespace ft::adapters {
struct Policy {};  // base tag of every adapter policy
}

namespace ft {

template <class A>
concept adapter_policy = named_policy<A> && std::derived_from<A, adapters::Policy> && requires {
  { A::trains_base_weights } -> std::convertible_to<bool>;
};

}  // namespace ft

namespace ft::adapters {

struct Full : Policy {
  static constexpr std::string_view name = "full";
  static constexpr std::string_view type_name = "ft::adapters::Full";
  static constexpr bool trains_base_weights = true;
};

struct LoRA : Policy {
  static constexpr std::string_view name = "lora";
  static constexpr std::string_view type_name = "ft::adapters::LoRA";
  static constexpr bool trains_base_weights = false;
};

struct Prompt : Policy {
  static constexpr std::string_view name = "prompt";
  static constexpr std::string_view type_name = "ft::adapters::Prompt";
  static constexpr bool trains_base_weights = false;
};

static_assert(adapter_policy<Full> && adapter_policy<LoRA> && adapter_policy<Prompt>);

}  // namespace ft::adapters
