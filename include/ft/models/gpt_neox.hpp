#pragma once
// GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorm, parallel residual, partial
// rotary embeddings and a GELU MLP.
#include <array>
#include <string_view>

#include "ft/models/family.hpp"

namespace ft::models {

struct GptNeox : Policy {
  static constexpr std::string_view name = "gpt_neox";
  static constexpr std::string_view type_name = "ft::models::GptNeox";
  static constexpr std::array<std::string_view, 1> hf_architectures{"GPTNeoXForCausalLM"};
  static constexpr std::array<std::string_view, 4> linear_modules{
      "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  static constexpr std::array<std::string_view, 1> default_lora_targets{"query_key_value"};
};
static_assert(model_family<GptNeox>);

}  // namespace ft::models
