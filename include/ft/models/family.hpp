#pragma once
// A model family is the policy that says what network a Trainer builds: which
// HF `architectures` values it reads from config.json, the names of its
// linear projections (LoRA targets), and `describe`, the piece it hands the
// engine: from config.json to a ModelSpec (the configured stage shapes and
// the map from HF weight names to ft's flat buffers). A family from a plugin
// trains through the same engine as ft's own.
#include <array>
#include <concepts>
#include <ranges>
#include <string_view>

#include "ft/core/policy.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {
struct Policy {};  // base tag of every model family
}

namespace ft {

/// A model family: the HF `architectures` it reads from config.json, its
/// linear projections by PEFT's names, and `describe`, which turns a
/// config.json into the stages and weight names the engine builds.
/// ft's own: models::Llama (Llama, Mistral, Qwen2/3, Granite, Gemma 1-3,
/// mixtures of experts), GptNeox, Phi3, GptBigCode, Bloom. A family of your
/// own, as a plugin brings it:
/// @snippet third_party_plugin/my_plugin.cpp family
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
  // The model a config.json describes; a value the family cannot build is refused through the reader.
  requires requires(const models::ConfigReader& config) {
    { M::describe(config) } -> std::same_as<models::ModelSpec>;
  };
};

}  // namespace ft
