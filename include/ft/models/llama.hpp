#pragma once
// The Llama family: Llama 2 and 3, Mistral (sliding window), Qwen2 (q/k/v
// biases), TinyLlama, SmolLM2. They share one block shape (RMSNorm, rotary
// attention with grouped-query heads, SwiGLU MLP) and differ only in options
// that config.json carries.
#include <array>
#include <string_view>

#include "ft/models/family.hpp"

namespace ft::models {

struct Llama : Policy {
  static constexpr std::string_view name = "llama";
  static constexpr std::string_view type_name = "ft::models::Llama";
  static constexpr std::array<std::string_view, 3> hf_architectures{
      "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
  static constexpr std::array<std::string_view, 7> linear_modules{
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  static constexpr std::array<std::string_view, 2> default_lora_targets{"q_proj", "v_proj"};
};
static_assert(model_family<Llama>);

}  // namespace ft::models
