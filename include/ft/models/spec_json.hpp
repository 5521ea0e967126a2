#pragma once
// A ModelSpec as JSON: how a family compiled into a plugin hands ftrun its
// reading of a config.json across the plugin boundary (plugin/abi.h's
// ft_model_family.describe), so that ftrun's own commands (init, convert,
// schedule, estimate) work on a plugin's family as on a stock one.
//
// Every field of TransformerConfig, RopeConfig and WeightBinding is listed
// here; a field added there is added here, and tests/models/test_config.cpp
// round-trips every stock family's fixtures to hold the two together.
#include <string>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::nn {
NLOHMANN_JSON_SERIALIZE_ENUM(NormKind, {{NormKind::rms, "rms"},
                                        {NormKind::layer, "layer"},
                                        {NormKind::rms_unit_offset, "rms_unit_offset"}})
NLOHMANN_JSON_SERIALIZE_ENUM(Activation, {{Activation::silu, "silu"},
                                          {Activation::gelu, "gelu"},
                                          {Activation::gelu_tanh, "gelu_tanh"}})
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Llama3Scaling, factor, low_freq_factor, high_freq_factor,
                                   original_max_position_embeddings)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RopeConfig, theta, rotary_dim, llama3, scaling, short_factors, long_factors, attention_factor,
                                   position_limit, linear_factor)
}  // namespace ft::nn

namespace ft::models {
NLOHMANN_JSON_SERIALIZE_ENUM(RowOrder, {{RowOrder::same, "same"}, {RowOrder::neox_qkv, "neox_qkv"}})
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MoeConfig, experts, top_k, expert_size, normalize_top_k, shared_expert_size,
                                   shared_expert_gate, aux_loss_coef, sparse)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TransformerConfig, architecture, vocab_size, hidden_size, num_layers, num_heads,
                                   num_kv_heads, head_dim, intermediate_size, norm, norm_eps, activation, gated_mlp,
                                   parallel_residual, qkv_bias, o_bias, mlp_bias, qk_norm, sandwich_norms, embedding_multiplier, embedding_scale_in_lookup,
                                   residual_multiplier, attention_multiplier, logits_scaling, attention_softcap, logit_softcap, tie_embeddings, position_embeddings,
                                   alibi, embedding_norm, padding_idx, rope, layer_rope,
                                   sliding_window, max_position_embeddings, moe)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(WeightBinding, hf_name, param, row_offset, order, alias, stacked)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelSpec, config, weights, carried)

inline std::string spec_to_json(const ModelSpec& spec) { return nlohmann::json(spec).dump(); }

// `from` names who wrote it, for the error.
inline ModelSpec spec_from_json(const std::string& text, const std::string& from) {
  try {
    return nlohmann::json::parse(text).get<ModelSpec>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(from + " described the model in a form this ftrun cannot read: " + e.what());
  }
}

}  // namespace ft::models
