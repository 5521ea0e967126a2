#pragma once
// Phi-3 and Phi-4-mini: the Llama block (RMSNorm, rotary attention with
// grouped-query heads, SwiGLU MLP) with HF's projections already fused, as
// ft fuses them: `qkv_proj` holds q, k and v rows in ft's order and
// `gate_up_proj` the gate then the up rows, so each is one tensor of ft's
// qkv and mlp_in. Partial rotary (`partial_rotary_factor`) and a sliding
// window come from config.json, and LongRoPE below
// original_max_position_embeddings (read_rope).
// A family of its own because PEFT names its modules by the fused
// projections.
#include <array>
#include <string>
#include <string_view>

#include "ft/models/family.hpp"
#include "ft/models/llama.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

struct Phi3 : Policy {
  static constexpr std::string_view name = "phi3";
  static constexpr std::string_view type_name = "ft::models::Phi3";
  static constexpr std::array<std::string_view, 1> hf_architectures{"Phi3ForCausalLM"};
  static constexpr std::array<std::string_view, 4> linear_modules{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  // PEFT names no default for Phi-3; the fused attention projection is its
  // nearest to the q/v default of the Llama family.
  static constexpr std::array<std::string_view, 1> default_lora_targets{"qkv_proj"};

  static ModelSpec describe(const ConfigReader& json) {
    const TransformerConfig c = read_llama_shape(json, 1e-5);
    ModelSpec spec{c, {}};
    auto bind = [&](std::string hf, std::string param) { spec.weights.push_back({std::move(hf), std::move(param), 0}); };
    bind("model.embed_tokens.weight", "embed.weight");
    for (index_t i = 0; i < c.num_layers; ++i) {
      std::string hf = "model.layers." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      bind(hf + "input_layernorm.weight", ft + "attn_norm.weight");
      bind(hf + "self_attn.qkv_proj.weight", ft + "qkv.weight");
      bind(hf + "self_attn.o_proj.weight", ft + "o.weight");
      bind(hf + "post_attention_layernorm.weight", ft + "mlp_norm.weight");
      bind(hf + "mlp.gate_up_proj.weight", ft + "mlp_in.weight");
      bind(hf + "mlp.down_proj.weight", ft + "mlp_out.weight");
    }
    bind("model.norm.weight", "final_norm.weight");
    if (!c.tie_embeddings) bind("lm_head.weight", "lm_head.weight");
    return spec;
  }
};
static_assert(model_family<Phi3>);

}  // namespace ft::models
