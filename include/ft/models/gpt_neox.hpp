#pragma once
// GPT-NeoX (Pythia, GPT-NeoX-20B): LayerNorm, parallel residual, partial
// rotary embeddings and a GELU MLP.
#include <array>
#include <string>
#include <string_view>

#include "ft/models/family.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

struct GptNeox : Policy {
  static constexpr std::string_view name = "gpt_neox";
  static constexpr std::string_view type_name = "ft::models::GptNeox";
  static constexpr std::array<std::string_view, 1> hf_architectures{"GPTNeoXForCausalLM"};
  static constexpr std::array<std::string_view, 4> linear_modules{
      "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  static constexpr std::array<std::string_view, 1> default_lora_targets{"query_key_value"};

  static ModelSpec describe(const ConfigReader& json) {
    TransformerConfig c = read_common_shape(json);
    c.num_kv_heads = c.num_heads;
    if (c.hidden_size % c.num_heads != 0)
      json.fail("hidden_size (" + std::to_string(c.hidden_size) + ") must be a multiple of num_attention_heads (" +
                std::to_string(c.num_heads) + ")");
    c.head_dim = c.hidden_size / c.num_heads;
    c.norm = nn::NormKind::layer;
    c.norm_eps = json.number("layer_norm_eps", 1e-5);
    c.activation = nn::activation_from_hf(json.string("hidden_act", "gelu"));
    c.gated_mlp = false;
    c.parallel_residual = json.flag("use_parallel_residual", true);
    bool attention_bias = json.flag("attention_bias", true);
    c.qkv_bias = c.o_bias = attention_bias;
    c.mlp_bias = true;
    c.tie_embeddings = json.flag("tie_word_embeddings", false);
    c.rope = read_rope(json, c.head_dim, 0.25);
    c.sliding_window.assign(std::size_t(c.num_layers), 0);
    c.max_position_embeddings = json.optional_int("max_position_embeddings", 0);

    ModelSpec spec{c, {}};
    auto bind = [&](std::string hf, std::string param, RowOrder order = RowOrder::same, std::string alias = {}) {
      spec.weights.push_back({std::move(hf), std::move(param), 0, order, std::move(alias)});
    };
    bind("gpt_neox.embed_in.weight", "embed.weight");
    for (index_t i = 0; i < c.num_layers; ++i) {
      std::string hf = "gpt_neox.layers." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      for (const char* kind : {"weight", "bias"}) {
        bind(hf + "input_layernorm." + kind, ft + "attn_norm." + kind);
        bind(hf + "post_attention_layernorm." + kind, ft + "mlp_norm." + kind);
        if (std::string_view(kind) == "weight" || attention_bias) {
          bind(hf + "attention.query_key_value." + kind, ft + "qkv." + kind, RowOrder::neox_qkv);
          bind(hf + "attention.dense." + kind, ft + "o." + kind);
        }
        bind(hf + "mlp.dense_h_to_4h." + kind, ft + "mlp_in." + kind);
        bind(hf + "mlp.dense_4h_to_h." + kind, ft + "mlp_out." + kind);
      }
    }
    bind("gpt_neox.final_layer_norm.weight", "final_norm.weight");
    bind("gpt_neox.final_layer_norm.bias", "final_norm.bias");
    // Files call the head embed_out; transformers 5 names the module lm_head.
    if (!c.tie_embeddings) bind("embed_out.weight", "lm_head.weight", RowOrder::same, "lm_head.weight");
    return spec;
  }
};
static_assert(model_family<GptNeox>);

}  // namespace ft::models
