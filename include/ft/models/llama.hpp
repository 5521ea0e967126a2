#pragma once
// The Llama family: Llama 2 and 3, Mistral (sliding window), Qwen2 (q/k/v
// biases), Qwen3 (per-head q/k norms), Granite 3 (four multipliers), Gemma
// (norms scaled by 1 + w, embeddings by sqrt(hidden_size), GeGLU),
// Gemma 2 (those, with a norm after each branch, soft-capped attention scores
// and logits, and local layers alternating with global ones), Gemma 3's text
// model (Gemma 2's block with (1 + w) q/k norms and a rotary base for each
// kind of layer), TinyLlama, SmolLM2, and the mixtures of experts Mixtral,
// Qwen2-MoE and Qwen3-MoE (a sparse MLP in place of the dense one). They share one block shape (RMSNorm,
// rotary attention with grouped-query heads, a gated MLP) and Llama's module
// names, and differ only in options that config.json carries.
#include <cmath>
#include <array>
#include <string>
#include <string_view>

#include "ft/models/family.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

// The Llama block's shape as config.json states it, which Phi-3 shares:
// grouped-query heads of head_dim (stated, else hidden_size over the heads,
// as HF's attention reads it), RMSNorm, a gated MLP, rotary positions,
// sliding windows, tied tables and the padding row. The families differ in
// the norm's default epsilon.
inline TransformerConfig read_llama_shape(const ConfigReader& json, double default_norm_eps) {
  TransformerConfig c = read_common_shape(json);
  c.num_kv_heads = json.optional_int("num_key_value_heads", c.num_heads);
  c.head_dim = json.optional_int("head_dim", c.hidden_size / c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    json.fail("num_attention_heads (" + std::to_string(c.num_heads) + ") must be a multiple of num_key_value_heads (" +
              std::to_string(c.num_kv_heads) + ")");
  c.norm = nn::NormKind::rms;
  c.norm_eps = json.number("rms_norm_eps", default_norm_eps);
  c.activation = nn::activation_from_hf(json.string("hidden_act", "silu"));
  c.gated_mlp = true;
  c.tie_embeddings = json.flag("tie_word_embeddings", false);
  c.padding_idx = read_padding_idx(json, c.vocab_size);
  c.rope = read_rope(json, c.head_dim, 1.0);
  c.sliding_window = read_sliding_windows(json, c.num_layers);
  c.max_position_embeddings = json.optional_int("max_position_embeddings", 0);
  return c;
}

// Gemma 3's rotary settings: one set for the global layers (rope_theta,
// 1e6 by default, with any scaling) and one for the sliding-window layers
// (rope_local_base_freq, 1e4 by default), as transformers 5 writes them
// (rope_parameters keyed by layer type) or as older configs do.
inline void read_gemma3_rope(const ConfigReader& json, TransformerConfig& c) {
  const nlohmann::json& j = json.json();
  nlohmann::json global = nlohmann::json::object(), local = nlohmann::json::object();
  if (json.has("rope_parameters") && j["rope_parameters"].is_object() &&
      (j["rope_parameters"].contains("full_attention") || j["rope_parameters"].contains("sliding_attention"))) {
    global = j["rope_parameters"].value("full_attention", global);
    local = j["rope_parameters"].value("sliding_attention", local);
  } else if (json.has("rope_parameters")) {
    global = j["rope_parameters"];
  } else if (json.has("rope_scaling")) {
    global = j["rope_scaling"];
  }
  c.rope = read_rope_parameters(json, global, c.head_dim, 1.0, json.number("rope_theta", 1e6));
  const nn::RopeConfig local_rope =
      read_rope_parameters(json, local, c.head_dim, 1.0, json.number("rope_local_base_freq", 1e4));
  c.layer_rope.clear();
  for (index_t window : c.sliding_window) c.layer_rope.push_back(window > 0 ? local_rope : c.rope);
}

// What Gemma 2 and 3 add to Gemma, with their config classes' defaults where
// a key is missing: a norm after each branch, the softmax scale
// 1 / sqrt(query_pre_attn_scalar), soft-capped attention scores and final
// logits (Gemma 2's default; null turns a cap off), and sliding-window layers
// among global ones (every second layer global in Gemma 2, every
// sliding_window_pattern-th in Gemma 3). Gemma 3 adds per-head q/k norms and
// a rotary base for each kind of layer.
inline void read_gemma2_block(const ConfigReader& json, TransformerConfig& c, bool gemma3) {
  c.sandwich_norms = true;
  const double query_scalar = json.number("query_pre_attn_scalar", 256);
  if (!(query_scalar > 0)) json.fail("field \"query_pre_attn_scalar\" must be a positive number");
  c.attention_multiplier = 1 / std::sqrt(query_scalar);
  auto cap = [&](const char* key, double fallback) {  // 0: no cap
    if (json.json().contains(key) && json.json()[key].is_null()) return 0.0;
    if (!json.has(key)) return fallback;
    const double v = json.number(key, fallback);
    if (!(v > 0)) json.fail(std::string("field \"") + key + "\" must be a positive number or null");
    return v;
  };
  c.attention_softcap = cap("attn_logit_softcapping", gemma3 ? 0 : 50);
  c.logit_softcap = cap("final_logit_softcapping", gemma3 ? 0 : 30);
  const index_t global_every = gemma3 ? json.optional_int("sliding_window_pattern", 6) : 2;
  c.sliding_window = read_sliding_windows(json, c.num_layers, 4096, global_every);
  if (!gemma3) return;
  c.qk_norm = true;
  read_gemma3_rope(json, c);
}

// The experts of Mixtral, Qwen2-MoE, Qwen3-MoE, GraniteMoE and
// GraniteMoeShared, with their config classes' defaults where a key is
// missing. Mixtral's and GraniteMoE's every MLP is sparse, their experts
// intermediate_size wide, GraniteMoeShared's shared_mlp beside them
// (shared_intermediate_size, 0 for none) added without a gate;
// Qwen's layer i is sparse unless listed in mlp_only_layers, when (i + 1) is
// a multiple of decoder_sparse_step.
inline void read_moe(const ConfigReader& json, TransformerConfig& c) {
  MoeConfig& m = c.moe;
  const bool granite_shared = c.architecture == "GraniteMoeSharedForCausalLM";
  const bool all_sparse =
      c.architecture == "MixtralForCausalLM" || c.architecture == "GraniteMoeForCausalLM" || granite_shared;
  const bool qwen2 = c.architecture == "Qwen2MoeForCausalLM";
  // Either name, as the config classes' attribute maps allow (Qwen3-MoE's files say num_local_experts).
  m.experts = json.optional_int("num_local_experts", json.optional_int("num_experts", all_sparse ? 8 : qwen2 ? 60 : 128));
  m.top_k = json.optional_int("num_experts_per_tok", all_sparse ? 2 : qwen2 ? 4 : 8);
  if (m.top_k > m.experts)
    json.fail("num_experts_per_tok (" + std::to_string(m.top_k) + ") must not exceed the number of experts (" +
              std::to_string(m.experts) + ")");
  m.expert_size = all_sparse ? c.intermediate_size : json.optional_int("moe_intermediate_size", qwen2 ? 1408 : 768);
  m.normalize_top_k = all_sparse || json.flag("norm_topk_prob", false);
  m.shared_expert_size = qwen2            ? json.optional_int("shared_expert_intermediate_size", 5632)
                         : granite_shared ? json.optional_int("shared_intermediate_size", 0)
                                          : 0;
  m.shared_expert_gate = qwen2;
  if (json.flag("output_router_logits", false)) m.aux_loss_coef = json.number("router_aux_loss_coef", 0.001);
  if (json.number("router_jitter_noise", 0) != 0)
    json.fail("router_jitter_noise (multiplicative noise on the router's input in training) is not supported; set it to 0");
  m.sparse.assign(std::size_t(c.num_layers), 1);
  if (all_sparse) return;
  const index_t step = json.optional_int("decoder_sparse_step", 1);
  for (index_t i = 0; i < c.num_layers; ++i) m.sparse[std::size_t(i)] = (i + 1) % step == 0;
  if (json.has("mlp_only_layers")) {
    const nlohmann::json& dense = json.json()["mlp_only_layers"];
    if (!dense.is_array()) json.fail("\"mlp_only_layers\" must be a list of layer indices");
    for (const auto& i : dense) {
      if (!i.is_number_integer() || i.get<index_t>() < 0 || i.get<index_t>() >= c.num_layers)
        json.fail("\"mlp_only_layers\" must hold layer indices below num_hidden_layers (" +
                  std::to_string(c.num_layers) + ")");
      m.sparse[std::size_t(i.get<index_t>())] = 0;
    }
  }
}

struct Llama : Policy {
  static constexpr std::string_view name = "llama";
  static constexpr std::string_view type_name = "ft::models::Llama";
  static constexpr std::array<std::string_view, 14> hf_architectures{
      "LlamaForCausalLM",  "MistralForCausalLM", "Qwen2ForCausalLM",  "Qwen3ForCausalLM",
      "GraniteForCausalLM", "GemmaForCausalLM",  "Gemma2ForCausalLM", "Gemma3ForCausalLM",
      "Gemma3ForConditionalGeneration", "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
      "GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM"};
  // w1/w2/w3/gate: Mixtral's experts and router under transformers 4, which
  // LoRA converts to the parameters PEFT converts them to (adapters/lora.hpp).
  static constexpr std::array<std::string_view, 14> linear_modules{
      "q_proj",    "k_proj",  "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate",
      "input_linear", "output_linear", "w1", "w2", "w3", "gate"};
  static constexpr std::array<std::string_view, 2> default_lora_targets{"q_proj", "v_proj"};

  static ModelSpec describe(const ConfigReader& json) {
    if (json.architecture() == "Gemma3ForConditionalGeneration") return describe_gemma3_text_tower(json);
    TransformerConfig c = read_llama_shape(json, 1e-6);
    bool qwen2 = c.architecture == "Qwen2ForCausalLM";
    bool attention_bias = json.flag("attention_bias", false);
    c.qkv_bias = qwen2 || attention_bias;  // Qwen2 always has q/k/v biases, never an o bias
    c.o_bias = attention_bias;
    c.mlp_bias = json.flag("mlp_bias", false);
    c.qk_norm = c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
    const bool granite_moe =
        c.architecture == "GraniteMoeForCausalLM" || c.architecture == "GraniteMoeSharedForCausalLM";
    const bool moe = c.architecture == "MixtralForCausalLM" || c.architecture == "Qwen2MoeForCausalLM" ||
                     c.architecture == "Qwen3MoeForCausalLM" || granite_moe;
    if (moe) read_moe(json, c);
    if (c.architecture == "Qwen2MoeForCausalLM") c.qkv_bias = json.flag("qkv_bias", true);
    if (c.architecture == "GraniteForCausalLM" || granite_moe) {
      auto positive = [&](const char* key) {
        const double v = json.number(key, 1.0);
        if (!(v > 0)) json.fail(std::string("field \"") + key + "\" must be a positive number");
        return v;
      };
      c.embedding_multiplier = positive("embedding_multiplier");
      c.residual_multiplier = positive("residual_multiplier");
      c.attention_multiplier = positive("attention_multiplier");  // HF's default is 1, not 1 / sqrt(head_dim)
      c.logits_scaling = positive("logits_scaling");
    }
    const bool gemma3 = c.architecture == "Gemma3ForCausalLM";
    const bool gemma2 = c.architecture == "Gemma2ForCausalLM" || gemma3;  // Gemma 2's block
    if (c.architecture == "GemmaForCausalLM" || gemma2) {
      if (json.flag("use_bidirectional_attention", false))
        json.fail("use_bidirectional_attention = true (an encoder, not a causal LM) is not supported");
      // GemmaConfig's defaults where a key is missing (gemma-7b's shape; gemma-2-2b's for Gemma 2 and 3), not Llama's.
      c.head_dim = json.optional_int("head_dim", 256);
      c.num_kv_heads = json.optional_int("num_key_value_heads", gemma2 ? 4 : 16);
      if (c.num_heads % c.num_kv_heads != 0)
        json.fail("num_attention_heads (" + std::to_string(c.num_heads) +
                  ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) + ")");
      c.rope = read_rope(json, c.head_dim, 1.0);
      // GemmaConfig's pad_token_id defaults to 0; a stated null means no padding row.
      if (!json.json().contains("pad_token_id")) c.padding_idx = 0;
      c.max_position_embeddings = json.optional_int("max_position_embeddings", gemma3 ? 131072 : 8192);
      c.norm = nn::NormKind::rms_unit_offset;
      // HF's scale is sqrt(hidden_size) as a float32 tensor, cast to the weights' type
      // inside the embedding module (inputs_embeds given from outside are not scaled).
      c.embedding_multiplier = double(float(std::sqrt(double(c.hidden_size))));
      c.embedding_scale_in_lookup = true;
      // "gelu" in Gemma's own configs means the tanh approximation, as transformers reads it;
      // Gemma 2's and 3's MLPs read hidden_activation.
      const std::string act = json.string(gemma2 ? "hidden_activation" : "hidden_act", "gelu_pytorch_tanh");
      c.activation = nn::activation_from_hf(act == "gelu" && !gemma2 ? "gelu_pytorch_tanh" : act);
      c.tie_embeddings = json.flag("tie_word_embeddings", true);
    }
    if (gemma2) read_gemma2_block(json, c, gemma3);

    ModelSpec spec{c, {}};
    auto bind = [&](std::string hf, std::string param, index_t row = 0) {
      spec.weights.push_back({std::move(hf), std::move(param), row});
    };
    const index_t q_rows = c.num_heads * c.head_dim, kv_rows = c.num_kv_heads * c.head_dim;
    bind("model.embed_tokens.weight", "embed.weight");
    for (index_t i = 0; i < c.num_layers; ++i) {
      std::string hf = "model.layers." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      bind(hf + "input_layernorm.weight", ft + "attn_norm.weight");
      for (const char* kind : {"weight", "bias"}) {
        if (std::string_view(kind) == "bias" && !c.qkv_bias) continue;
        bind(hf + "self_attn.q_proj." + kind, ft + "qkv." + kind, 0);
        bind(hf + "self_attn.k_proj." + kind, ft + "qkv." + kind, q_rows);
        bind(hf + "self_attn.v_proj." + kind, ft + "qkv." + kind, q_rows + kv_rows);
      }
      if (c.qk_norm) {
        bind(hf + "self_attn.q_norm.weight", ft + "q_norm.weight");
        bind(hf + "self_attn.k_norm.weight", ft + "k_norm.weight");
      }
      bind(hf + "self_attn.o_proj.weight", ft + "o.weight");
      if (c.o_bias) bind(hf + "self_attn.o_proj.bias", ft + "o.bias");
      if (c.sandwich_norms) {
        bind(hf + "post_attention_layernorm.weight", ft + "attn_post_norm.weight");
        bind(hf + "pre_feedforward_layernorm.weight", ft + "mlp_norm.weight");
        bind(hf + "post_feedforward_layernorm.weight", ft + "mlp_post_norm.weight");
      } else {
        bind(hf + "post_attention_layernorm.weight", ft + "mlp_norm.weight");
      }
      if (c.moe.sparse_at(i)) {
        bind_experts(spec, c, i);
        continue;
      }
      for (const char* kind : {"weight", "bias"}) {
        if (std::string_view(kind) == "bias" && !c.mlp_bias) continue;
        bind(hf + "mlp.gate_proj." + kind, ft + "mlp_in." + kind, 0);
        bind(hf + "mlp.up_proj." + kind, ft + "mlp_in." + kind, c.intermediate_size);
        bind(hf + "mlp.down_proj." + kind, ft + "mlp_out." + kind);
      }
    }
    bind("model.norm.weight", "final_norm.weight");
    if (!c.tie_embeddings) bind("lm_head.weight", "lm_head.weight");
    return spec;
  }

  // A sparse layer's tensors as transformers writes them: the router, each
  // expert's gate, up and down projections (Mixtral's w1, w3, w2) as rows of
  // the fused expert weights, and Qwen2-MoE's shared expert and its gate
  // (GraniteMoeShared's shared_mlp, beside the experts' module).
  static void bind_experts(ModelSpec& spec, const TransformerConfig& c, index_t layer) {
    const bool granite = c.architecture == "GraniteMoeForCausalLM" || c.architecture == "GraniteMoeSharedForCausalLM";
    const bool mixtral = c.architecture == "MixtralForCausalLM" || granite;
    const std::string hf = "model.layers." + std::to_string(layer) + (mixtral ? ".block_sparse_moe." : ".mlp."),
                      ft = "layers." + std::to_string(layer) + ".";
    auto bind = [&](std::string name, std::string param, index_t row = 0) {
      spec.weights.push_back({hf + name, ft + param, row});
    };
    const index_t F = c.moe.expert_size, C = c.hidden_size;
    if (granite) {  // the experts stacked in one tensor each, [E, 2F, C] and [E, C, F]
      bind("router.layer.weight", "router.weight");
      bind("input_linear.weight", "experts.gate_up.weight");
      spec.weights.back().stacked = c.moe.experts;
      bind("output_linear.weight", "experts.down.weight");
      spec.weights.back().stacked = c.moe.experts;
      if (c.moe.shared_expert_size == 0) return;
      const std::string shared = "model.layers." + std::to_string(layer) + ".shared_mlp.";
      spec.weights.push_back({shared + "input_linear.weight", ft + "mlp_in.weight", 0});  // gate rows, then up rows
      spec.weights.push_back({shared + "output_linear.weight", ft + "mlp_out.weight", 0});
      return;
    }
    bind("gate.weight", "router.weight");
    for (index_t e = 0; e < c.moe.experts; ++e) {
      const std::string expert = "experts." + std::to_string(e) + ".";
      bind(expert + (mixtral ? "w1" : "gate_proj") + ".weight", "experts.gate_up.weight", 2 * F * e);
      bind(expert + (mixtral ? "w3" : "up_proj") + ".weight", "experts.gate_up.weight", 2 * F * e + F);
      bind(expert + (mixtral ? "w2" : "down_proj") + ".weight", "experts.down.weight", C * e);
    }
    if (c.moe.shared_expert_size == 0) return;
    bind("shared_expert.gate_proj.weight", "mlp_in.weight", 0);
    bind("shared_expert.up_proj.weight", "mlp_in.weight", c.moe.shared_expert_size);
    bind("shared_expert.down_proj.weight", "mlp_out.weight");
    bind("shared_expert_gate.weight", "shared_gate.weight");
  }

  // Gemma 3's multimodal checkpoints (4B and up): the text model, trained
  // and served as Gemma3ForCausalLM, its config under text_config (which
  // transformers writes without the keys at Gemma3TextConfig's defaults),
  // its tensors under language_model.model in files and
  // model.language_model in memory (PEFT's module names). The vision tower
  // is not part of the model; a saved model carries it over unchanged
  // (models/save.hpp).
  static ModelSpec describe_gemma3_text_tower(const ConfigReader& json) {
    if (!json.has("text_config") || !json.json()["text_config"].is_object())
      json.fail("Gemma3ForConditionalGeneration needs \"text_config\", an object");
    nlohmann::json text = {{"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
                           {"num_hidden_layers", 26}, {"num_attention_heads", 8}};
    text.update(json.json()["text_config"]);
    text["architectures"] = {"Gemma3ForCausalLM"};
    if (json.has("tie_word_embeddings")) text["tie_word_embeddings"] = json.json()["tie_word_embeddings"];
    ModelSpec spec = describe(ConfigReader(text, json.file()));
    spec.config.architecture = json.architecture();
    for (WeightBinding& w : spec.weights) {
      const std::string name = w.hf_name;
      if (name.starts_with("model.")) {
        w.hf_name = "model.language_model." + name.substr(6);
        w.alias = "language_model.model." + name.substr(6);
      } else {
        w.alias = "language_model." + name;  // lm_head
      }
    }
    spec.carried = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."};
    return spec;
  }
};
static_assert(model_family<Llama>);

}  // namespace ft::models
