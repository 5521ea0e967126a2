#pragma once
// GPTBigCode (StarCoder, SantaCoder, granite-code 3b-34b, WizardCoder):
// GPT-2's block (LayerNorm with biases, a GELU MLP, learned absolute
// positions, biases on every projection) with multi-query attention: one key
// and value head shared by every query head (`multi_query`, the default),
// else one per head. `c_attn` is one tensor: under multi-query the queries,
// then the key and the value, which is ft's fused order; otherwise each
// head's query, key and value side by side, GPT-NeoX's layout.
#include <array>
#include <string>
#include <string_view>

#include "ft/models/family.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

struct GptBigCode : Policy {
  static constexpr std::string_view name = "gpt_bigcode";
  static constexpr std::string_view type_name = "ft::models::GptBigCode";
  static constexpr std::array<std::string_view, 1> hf_architectures{"GPTBigCodeForCausalLM"};
  // PEFT's target names: "c_proj" is both the attention's output and the MLP's down projection.
  static constexpr std::array<std::string_view, 3> linear_modules{"c_attn", "c_proj", "c_fc"};
  static constexpr std::array<std::string_view, 1> default_lora_targets{"c_attn"};  // PEFT's default

  static ModelSpec describe(const ConfigReader& json) {
    // config.json carries GPT-2's names; transformers maps HF's common ones
    // onto them. A field under neither is missing under its own name.
    auto either = [&](const char* own, const char* common) {
      return json.has(common) && !json.has(own) ? common : own;
    };
    TransformerConfig c;
    c.architecture = json.architecture();
    c.vocab_size = json.required_int("vocab_size");
    c.hidden_size = json.required_int(either("n_embd", "hidden_size"));
    c.num_layers = json.required_int(either("n_layer", "num_hidden_layers"));
    c.num_heads = json.required_int(either("n_head", "num_attention_heads"));
    c.intermediate_size = json.optional_int("n_inner", 4 * c.hidden_size);
    if (c.hidden_size % c.num_heads != 0)
      json.fail("n_embd (" + std::to_string(c.hidden_size) + ") must be a multiple of n_head (" +
                std::to_string(c.num_heads) + ")");
    c.head_dim = c.hidden_size / c.num_heads;
    const bool multi_query = json.flag("multi_query", true);
    c.num_kv_heads = multi_query ? 1 : c.num_heads;
    c.norm = nn::NormKind::layer;
    c.norm_eps = json.number("layer_norm_epsilon", 1e-5);
    c.activation = nn::activation_from_hf(json.string("activation_function", "gelu_pytorch_tanh"));
    c.gated_mlp = false;
    c.parallel_residual = false;
    c.qkv_bias = c.o_bias = c.mlp_bias = true;
    // Without scale_attn_weights the scores are not divided by sqrt(head_dim).
    c.attention_multiplier = json.flag("scale_attn_weights", true) ? 0.0 : 1.0;
    c.tie_embeddings = json.flag("tie_word_embeddings", true);
    c.position_embeddings = json.required_int(either("n_positions", "max_position_embeddings"));
    c.max_position_embeddings = c.position_embeddings;
    c.sliding_window.assign(std::size_t(c.num_layers), 0);

    ModelSpec spec{c, {}};
    auto bind = [&](std::string hf, std::string param, RowOrder order = RowOrder::same) {
      spec.weights.push_back({std::move(hf), std::move(param), 0, order});
    };
    bind("transformer.wte.weight", "embed.weight");
    bind("transformer.wpe.weight", "embed.positions");
    for (index_t i = 0; i < c.num_layers; ++i) {
      std::string hf = "transformer.h." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      for (const char* kind : {"weight", "bias"}) {
        bind(hf + "ln_1." + kind, ft + "attn_norm." + kind);
        bind(hf + "attn.c_attn." + kind, ft + "qkv." + kind, multi_query ? RowOrder::same : RowOrder::neox_qkv);
        bind(hf + "attn.c_proj." + kind, ft + "o." + kind);
        bind(hf + "ln_2." + kind, ft + "mlp_norm." + kind);
        bind(hf + "mlp.c_fc." + kind, ft + "mlp_in." + kind);
        bind(hf + "mlp.c_proj." + kind, ft + "mlp_out." + kind);
      }
    }
    bind("transformer.ln_f.weight", "final_norm.weight");
    bind("transformer.ln_f.bias", "final_norm.bias");
    if (!c.tie_embeddings) bind("lm_head.weight", "lm_head.weight");
    return spec;
  }
};
static_assert(model_family<GptBigCode>);

}  // namespace ft::models
