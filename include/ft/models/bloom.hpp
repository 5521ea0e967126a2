#pragma once
// Bloom (BigScience's BLOOM and BLOOMZ, 560M to 176B): GPT-NeoX's fused
// query_key_value (each head's query, key and value side by side), LayerNorm
// with biases, a tanh-GELU MLP four times as wide as the model, sequential
// residuals, no rotary or learned positions but ALiBi's distance penalty on
// the scores, a LayerNorm right after the word embeddings, and tied tables.
#include <array>
#include <string>
#include <string_view>

#include "ft/models/family.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

struct Bloom : Policy {
  static constexpr std::string_view name = "bloom";
  static constexpr std::string_view type_name = "ft::models::Bloom";
  static constexpr std::array<std::string_view, 1> hf_architectures{"BloomForCausalLM"};
  static constexpr std::array<std::string_view, 4> linear_modules{
      "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"};
  static constexpr std::array<std::string_view, 1> default_lora_targets{"query_key_value"};  // PEFT's default

  static ModelSpec describe(const ConfigReader& json) {
    TransformerConfig c;
    c.architecture = json.architecture();
    c.vocab_size = json.required_int("vocab_size");
    // Older configs name the width n_embed, which BloomConfig reads in place of hidden_size.
    c.hidden_size = json.required_int(json.has("n_embed") ? "n_embed" : "hidden_size");
    c.num_layers = json.required_int(json.has("num_hidden_layers") && !json.has("n_layer") ? "num_hidden_layers" : "n_layer");
    c.num_heads = json.required_int(json.has("num_attention_heads") && !json.has("n_head") ? "num_attention_heads" : "n_head");
    if (c.hidden_size % c.num_heads != 0)
      json.fail("hidden_size (" + std::to_string(c.hidden_size) + ") must be a multiple of n_head (" +
                std::to_string(c.num_heads) + ")");
    if (json.flag("apply_residual_connection_post_layernorm", false))
      json.fail("apply_residual_connection_post_layernorm = true (residuals taken after the norms) is not supported");
    c.num_kv_heads = c.num_heads;
    c.head_dim = c.hidden_size / c.num_heads;
    c.intermediate_size = 4 * c.hidden_size;  // BloomMLP's width, whatever n_inner says
    c.norm = nn::NormKind::layer;
    c.norm_eps = json.number("layer_norm_epsilon", 1e-5);
    c.activation = nn::Activation::gelu_tanh;  // bloom_gelu: tanh's approximation
    c.gated_mlp = false;
    c.parallel_residual = false;
    c.qkv_bias = c.o_bias = c.mlp_bias = true;
    c.alibi = true;
    c.embedding_norm = true;
    c.tie_embeddings = json.flag("tie_word_embeddings", true);
    c.sliding_window.assign(std::size_t(c.num_layers), 0);
    c.max_position_embeddings = json.optional_int("seq_length", 0);  // the training length where stated; ALiBi sets no limit

    // BigScience's files were saved from BloomModel and lack the
    // "transformer." prefix that BloomForCausalLM's own saves carry.
    ModelSpec spec{c, {}};
    auto bind = [&](const std::string& hf, std::string param, RowOrder order = RowOrder::same) {
      spec.weights.push_back({"transformer." + hf, std::move(param), 0, order, hf});
    };
    for (const char* kind : {"weight", "bias"}) {
      bind(std::string("word_embeddings_layernorm.") + kind, std::string("embed.norm.") + kind);
      bind(std::string("ln_f.") + kind, std::string("final_norm.") + kind);
    }
    bind("word_embeddings.weight", "embed.weight");
    for (index_t i = 0; i < c.num_layers; ++i) {
      std::string hf = "h." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      for (const char* kind : {"weight", "bias"}) {
        bind(hf + "input_layernorm." + kind, ft + "attn_norm." + kind);
        bind(hf + "self_attention.query_key_value." + kind, ft + "qkv." + kind, RowOrder::neox_qkv);
        bind(hf + "self_attention.dense." + kind, ft + "o." + kind);
        bind(hf + "post_attention_layernorm." + kind, ft + "mlp_norm." + kind);
        bind(hf + "mlp.dense_h_to_4h." + kind, ft + "mlp_in." + kind);
        bind(hf + "mlp.dense_4h_to_h." + kind, ft + "mlp_out." + kind);
      }
    }
    if (!c.tie_embeddings) spec.weights.push_back({"lm_head.weight", "lm_head.weight"});
    return spec;
  }
};
static_assert(model_family<Bloom>);

}  // namespace ft::models
