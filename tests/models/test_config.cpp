// Reading HF config.json files of real model families: the shapes and
// parameter counts must be those the models are published with.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <ft/models/load.hpp>
#include <ft/models/spec_json.hpp>
#include <ft/nn/rope.hpp>

#include "support/model_spec.hpp"

namespace test_config {

using namespace ft;
namespace fs = std::filesystem;

using ft::testing::spec_of;

TEST_CASE("GPT-NeoX-20B: parallel residual, quarter rotary, 20.55B parameters") {
  auto spec = spec_of(R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 6144, "num_attention_heads": 64,
    "num_hidden_layers": 44, "intermediate_size": 24576, "vocab_size": 50432, "rotary_pct": 0.25,
    "rotary_emb_base": 10000, "use_parallel_residual": true, "layer_norm_eps": 1e-05, "hidden_act": "gelu_fast",
    "tie_word_embeddings": false, "max_position_embeddings": 2048})");
  const auto& c = spec.config;
  CHECK(c.head_dim == 96);
  CHECK(c.rope.rotary_dim == 24);
  CHECK(c.parallel_residual);
  CHECK(c.norm == nn::NormKind::layer);
  CHECK(c.activation == nn::Activation::gelu_tanh);
  CHECK(models::parameter_count(c) == 20'554'567'680);
  CHECK(spec.weights.size() == 1 + 44 * 12 + 3);  // embed_in; 12 per layer; final norm (2), embed_out
}

TEST_CASE("Llama 3 8B: grouped-query attention and Llama-3 rope scaling, 8.03B parameters") {
  auto spec = spec_of(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "vocab_size": 128256, "hidden_act": "silu"})");
  const auto& c = spec.config;
  CHECK(c.num_kv_heads == 8);
  CHECK(c.rope.llama3);
  CHECK(c.rope.theta == 500000.0);
  CHECK(c.rope.scaling.original_max_position_embeddings == 8192);
  CHECK(models::parameter_count(c) == 8'030'261'248);
}

TEST_CASE("Qwen2-0.5B: q/k/v biases and tied embeddings, 494M parameters") {
  auto spec = spec_of(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 21,
    "tie_word_embeddings": true, "vocab_size": 151936, "hidden_act": "silu"})");
  const auto& c = spec.config;
  CHECK(c.qkv_bias);
  CHECK(!c.o_bias);
  CHECK(c.tie_embeddings);
  CHECK(c.sliding_window == std::vector<index_t>(24, 0));
  CHECK(models::parameter_count(c) == 494'032'768);
}

TEST_CASE("Qwen3-0.6B: per-head q/k norms, a head size of its own (128, not 1024 / 16), 596M parameters") {
  auto spec = spec_of(R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000, "attention_bias": false, "sliding_window": null,
    "use_sliding_window": false, "max_window_layers": 28, "tie_word_embeddings": true, "vocab_size": 151936})");
  const auto& c = spec.config;
  CHECK(c.qk_norm);
  CHECK(c.head_dim == 128);
  CHECK(!c.qkv_bias);
  CHECK(c.sliding_window == std::vector<index_t>(28, 0));
  CHECK(models::parameter_count(c) == 596'049'920);  // transformers' count of Qwen3ForCausalLM at this config
  CHECK(spec.weights.size() == 1 + 28 * 11 + 1);   // embed; 11 per layer (q_norm, k_norm among them); final norm
}

TEST_CASE("Granite 3 2B: its four multipliers read under HF's names, 2.53B parameters; a bad one is refused") {
  auto spec = spec_of(R"({"architectures": ["GraniteForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": true,
    "vocab_size": 49155, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
    "attention_multiplier": 0.015625, "logits_scaling": 8.0})");
  const auto& c = spec.config;
  CHECK(c.embedding_multiplier == 12.0);
  CHECK(c.residual_multiplier == 0.22);
  CHECK(c.attention_multiplier == 0.015625);
  CHECK(c.logits_scaling == 8.0);
  CHECK(models::parameter_count(c) == 2'533'531'648);  // transformers' count of GraniteForCausalLM at this config

  // Left out, each is HF's default of 1 (the attention's too, not 1 / sqrt(head_dim)); Llama never reads them.
  const auto plain = spec_of(R"({"architectures": ["GraniteForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10})");
  CHECK(plain.config.attention_multiplier == 1.0);
  CHECK(plain.config.logits_scaling == 1.0);
  const auto llama = spec_of(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10, "logits_scaling": 8.0})");
  CHECK(llama.config.attention_multiplier == 0.0);
  CHECK(llama.config.logits_scaling == 1.0);
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["GraniteForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10,
    "logits_scaling": 0})"), doctest::Contains("field \"logits_scaling\" must be a positive number"), Error);
}

TEST_CASE("Phi-3-mini-4k: fused qkv_proj and gate_up_proj, a 2047-token window, 3.82B parameters; Phi-4-mini's LongRoPE") {
  auto spec = spec_of(R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "rope_scaling": null, "sliding_window": 2047, "original_max_position_embeddings": 4096,
    "max_position_embeddings": 4096, "tie_word_embeddings": false, "vocab_size": 32064, "hidden_act": "silu"})");
  const auto& c = spec.config;
  CHECK(c.sliding_window == std::vector<index_t>(32, 2047));
  CHECK(c.rope.rotary_dim == 96);
  CHECK(models::parameter_count(c) == 3'821'079'552);  // transformers' count of Phi3ForCausalLM at this config
  CHECK(spec.weights.size() == 1 + 32 * 6 + 2);  // embed; 6 per layer, the fused two among them; final norm, lm_head
  CHECK(spec.weights[2].hf_name == "model.layers.0.self_attn.qkv_proj.weight");
  CHECK(spec.weights[2].param == "layers.0.qkv.weight");

  // Phi-4-mini: a quarter of each head unrotated, LongRoPE (short factors below its original 4096 positions,
  // long ones from there).
  std::string factors = "[1.0";
  for (int i = 1; i < 48; ++i) factors += ", 1.5";
  factors += "]";
  std::string long_factors = "[2.0";
  for (int i = 1; i < 48; ++i) long_factors += ", 3.5";
  long_factors += "]";
  const std::string phi4 = R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
    "num_attention_heads": 24, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 200064,
    "tie_word_embeddings": true, "partial_rotary_factor": 0.75, "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "rope_scaling": {"type": "longrope", "long_factor": )" +
                           long_factors + R"(, "short_factor": )" + factors + "}}";
  const auto mini = spec_of(phi4);
  CHECK(mini.config.rope.rotary_dim == 96);
  CHECK(mini.config.rope.short_factors.size() == 48);
  CHECK(mini.config.rope.short_factors[1] == 1.5);
  CHECK(mini.config.rope.long_factors.size() == 48);
  CHECK(mini.config.rope.long_factors[0] == 2.0);
  CHECK(mini.config.rope.long_factors[47] == 3.5);
  CHECK(mini.config.rope.position_limit == 4096);
  CHECK(mini.config.rope.attention_factor == doctest::Approx(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
  CHECK(models::parameter_count(mini.config) == 3'836'021'760);  // transformers' count at this config
  std::string short_list = phi4;
  short_list.replace(short_list.rfind(factors), factors.size(), "[1.0, 2.0]");
  CHECK_THROWS_WITH_AS(spec_of(short_list),
                       doctest::Contains("LongRoPE needs \"short_factor\", a list of 48 numbers"), Error);
}

TEST_CASE("Mistral 7B: a sliding window on every layer; SmolLM2-135M: tied, 134.5M parameters") {
  auto mistral = spec_of(R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false, "vocab_size": 32000})");
  CHECK(mistral.config.sliding_window == std::vector<index_t>(32, 4096));
  CHECK(models::parameter_count(mistral.config) == 7'241'732'096);

  auto smol = spec_of(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536,
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05,
    "rope_theta": 100000, "tie_word_embeddings": true, "vocab_size": 49152})");
  CHECK(smol.config.head_dim == 64);
  CHECK(models::parameter_count(smol.config) == 134'515'008);
}

TEST_CASE("a model's description crosses the plugin boundary whole: every field of every stock family's reading") {
  // Each parity fixture sets options the others leave at their defaults
  // (layer norms, biases, parallel residual, partial rotary, Llama 3
  // scaling, sliding windows, tied tables); with the published shapes above.
  std::vector<models::ModelSpec> specs;
  for (const fs::directory_entry& fixture : fs::directory_iterator(fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity"))
    if (fs::exists(fixture.path() / "config.json")) specs.push_back(models::read_model_spec(fixture.path()));
  REQUIRE(specs.size() >= 6);
  for (const models::ModelSpec& spec : specs) {
    CAPTURE(spec.config.architecture);
    const models::ModelSpec back = models::spec_from_json(models::spec_to_json(spec), "the test");
    CHECK(back == spec);
    CHECK(back.config == spec.config);
  }
  // What changes one field is seen: the comparison is field by field.
  models::ModelSpec changed = specs.front();
  changed.config.rope.scaling.low_freq_factor += 1;
  CHECK(models::spec_from_json(models::spec_to_json(changed), "the test") != specs.front());
  CHECK_THROWS_WITH_AS(models::spec_from_json(R"({"config": {}})", "plugin p"),
                       doctest::Contains("plugin p described the model in a form this ftrun cannot read"), Error);
}

TEST_CASE("StarCoder-1B and a 20B GPTBigCode: multi-query, learned positions, c_proj twice; transformers' counts") {
  auto spec = spec_of(R"({"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 2048, "n_head": 16, "n_inner": 8192,
    "n_layer": 24, "n_positions": 8192, "vocab_size": 49152, "multi_query": true,
    "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-05})");
  const auto& c = spec.config;
  CHECK(c.num_kv_heads == 1);
  CHECK(c.head_dim == 128);
  CHECK(c.position_embeddings == 8192);
  CHECK(c.rope.rotary_dim == 0);
  CHECK(c.tie_embeddings);
  CHECK(c.attention_multiplier == 0.0);  // 1 / sqrt(head_dim)
  CHECK(models::parameter_count(c) == 1'137'207'296);  // transformers' count of GPTBigCodeForCausalLM at this config
  CHECK(spec.weights[1].hf_name == "transformer.wpe.weight");
  CHECK(spec.weights[3].hf_name == "transformer.h.0.attn.c_attn.weight");
  CHECK(spec.weights[3].order == models::RowOrder::same);
  const auto big = spec_of(R"({"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 6144, "n_head": 48,
    "n_inner": 24576, "n_layer": 52, "n_positions": 8192, "vocab_size": 49152, "tie_word_embeddings": false})");
  CHECK(models::parameter_count(big.config) == 20'368'983'040);
  const auto mha = spec_of(R"({"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 64, "n_head": 4, "n_layer": 1,
    "n_positions": 32, "vocab_size": 10, "multi_query": false, "scale_attn_weights": false})");
  CHECK(mha.config.num_kv_heads == 4);
  CHECK(mha.config.intermediate_size == 256);  // n_inner absent: 4 n_embd
  CHECK(mha.config.attention_multiplier == 1.0);
  CHECK(mha.weights[3].order == models::RowOrder::neox_qkv);
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["GPTBigCodeForCausalLM"], "n_embd": 64, "n_head": 4,
    "n_layer": 1, "vocab_size": 10})"), doctest::Contains("missing required field \"n_positions\""), Error);
}

TEST_CASE("bloom-560m and bloom-7b1: ALiBi, the embedding norm, tied tables, BigScience's unprefixed names; "
          "transformers' counts") {
  // bloom-560m's config.json as BigScience publishes it (n_inner null, n_embed absent).
  const auto spec = spec_of(R"({"architectures": ["BloomForCausalLM"], "hidden_size": 1024, "n_head": 16,
    "n_layer": 24, "n_inner": null, "vocab_size": 250880, "layer_norm_epsilon": 1e-05, "pad_token_id": 3,
    "apply_residual_connection_post_layernorm": false, "pretraining_tp": 1, "slow_but_exact": false})");
  const auto& c = spec.config;
  CHECK(c.alibi);
  CHECK(c.embedding_norm);
  CHECK(c.tie_embeddings);
  CHECK(c.rope.rotary_dim == 0);
  CHECK(c.position_embeddings == 0);
  CHECK(c.head_dim == 64);
  CHECK(c.intermediate_size == 4096);
  CHECK(c.padding_idx == -1);  // BloomModel's embedding has no padding row
  CHECK(models::parameter_count(c) == 559'214'592);  // transformers' count of BloomForCausalLM at this config
  const models::WeightBinding& qkv = spec.weights[6];
  CHECK(qkv.hf_name == "transformer.h.0.self_attention.query_key_value.weight");
  CHECK(qkv.alias == "h.0.self_attention.query_key_value.weight");
  CHECK(qkv.order == models::RowOrder::neox_qkv);
  const auto big = spec_of(R"({"architectures": ["BloomForCausalLM"], "n_embed": 4096, "n_head": 32, "n_layer": 30,
    "vocab_size": 250880})");
  CHECK(models::parameter_count(big.config) == 7'069'016'064);
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["BloomForCausalLM"], "hidden_size": 64, "n_head": 4,
    "n_layer": 1, "vocab_size": 10, "apply_residual_connection_post_layernorm": true})"),
                       doctest::Contains("apply_residual_connection_post_layernorm = true"), Error);
}

TEST_CASE("gemma-2b and gemma-7b: norms scaled by 1 + w, embeddings by sqrt(hidden_size), GeGLU; transformers' "
          "counts") {
  // gemma-2b's config.json as published (the legacy "gelu", which means the tanh approximation).
  const auto spec = spec_of(R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 2048, "head_dim": 256,
    "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
    "vocab_size": 256000, "hidden_act": "gelu", "rms_norm_eps": 1e-06, "pad_token_id": 0, "rope_theta": 10000.0})");
  const auto& c = spec.config;
  CHECK(c.norm == nn::NormKind::rms_unit_offset);
  CHECK(c.activation == nn::Activation::gelu_tanh);
  CHECK(c.gated_mlp);
  CHECK(c.tie_embeddings);  // Gemma's default
  CHECK(c.embedding_multiplier == double(float(std::sqrt(2048.0))));
  CHECK(c.embedding_scale_in_lookup);
  CHECK(models::embedding_scale<bf16>(c) == 45.25f);  // HF's bf16 scale
  CHECK(c.head_dim == 256);
  CHECK(c.padding_idx == 0);
  CHECK(models::parameter_count(c) == 2'506'172'416);  // transformers' count of GemmaForCausalLM at this config
  const auto big = spec_of(R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 3072, "head_dim": 256,
    "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
    "vocab_size": 256000})");
  CHECK(models::parameter_count(big.config) == 8'537'680'896);
  CHECK(models::embedding_scale<bf16>(big.config) == 55.5f);  // sqrt(3072) = 55.43 in bf16, as HF scales it
  // GemmaConfig's defaults where keys are missing: gemma-7b's head_dim and key/value heads, pad id 0.
  const auto bare = spec_of(R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 16, "vocab_size": 10})");
  CHECK(bare.config.head_dim == 256);
  CHECK(bare.config.num_kv_heads == 16);
  CHECK(bare.config.rope.rotary_dim == 256);
  CHECK(bare.config.padding_idx == 0);
  CHECK(bare.config.max_position_embeddings == 8192);
  // A stated null pad id is no padding row, as nn.Embedding(padding_idx=None).
  const auto unpadded = spec_of(R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 16, "vocab_size": 10, "pad_token_id": null})");
  CHECK(unpadded.config.padding_idx == -1);
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["GemmaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10, "use_bidirectional_attention": true})"),
                       doctest::Contains("use_bidirectional_attention = true"), Error);
}

TEST_CASE("gemma-2-2b and gemma-2-9b: a norm after each branch, soft-caps, local and global layers; transformers' "
          "counts") {
  // gemma-2-2b's config.json as published (no layer_types: Gemma2Config alternates, the first layer local).
  const auto spec = spec_of(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 2304, "head_dim": 256,
    "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "vocab_size": 256000, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-06, "pad_token_id": 0})");
  const auto& c = spec.config;
  CHECK(c.norm == nn::NormKind::rms_unit_offset);
  CHECK(c.sandwich_norms);
  CHECK(c.activation == nn::Activation::gelu_tanh);
  CHECK(c.tie_embeddings);
  CHECK(c.attention_multiplier == 1.0 / 16);
  CHECK(c.attention_softcap == 50.0);
  CHECK(c.logit_softcap == 30.0);
  REQUIRE(c.sliding_window.size() == 26);
  CHECK(c.sliding_window[0] == 4096);
  CHECK(c.sliding_window[1] == 0);
  CHECK(c.sliding_window[24] == 4096);
  CHECK(c.sliding_window[25] == 0);
  CHECK(models::parameter_count(c) == 2'614'341'888);  // transformers' count of Gemma2ForCausalLM at this config
  const models::WeightBinding& post = spec.weights[6];
  CHECK(post.hf_name == "model.layers.0.post_attention_layernorm.weight");
  CHECK(post.param == "layers.0.attn_post_norm.weight");
  const auto big = spec_of(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584, "head_dim": 256,
    "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
    "vocab_size": 256000})");
  CHECK(models::parameter_count(big.config) == 9'241'705'984);
  // Gemma2Config's defaults where keys are missing; null turns a cap off; stated layer types win.
  const auto bare = spec_of(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 3, "num_attention_heads": 8, "vocab_size": 10, "final_logit_softcapping": null,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention"]})");
  CHECK(bare.config.num_kv_heads == 4);
  CHECK(bare.config.attention_softcap == 50.0);
  CHECK(bare.config.logit_softcap == 0.0);
  CHECK(bare.config.sliding_window == std::vector<index_t>{0, 4096, 4096});
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10, "attn_logit_softcapping": -1})"),
                       doctest::Contains("field \"attn_logit_softcapping\" must be a positive number or null"), Error);
}

TEST_CASE("gemma-3-4b: the text model of a Gemma3ForConditionalGeneration checkpoint, Gemma3TextConfig's defaults "
          "where text_config leaves keys out; transformers' count") {
  // gemma-3-4b-it's config.json as published (its vision_config shortened).
  const auto spec = spec_of(R"({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02,
    "mm_tokens_per_image": 256, "model_type": "gemma3", "text_config": {"hidden_size": 2560,
    "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}, "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model", "num_hidden_layers": 27}})");
  const auto& c = spec.config;
  CHECK(c.architecture == "Gemma3ForConditionalGeneration");
  CHECK(c.vocab_size == 262208);
  CHECK(c.num_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 256);
  CHECK(c.qk_norm);
  CHECK(c.tie_embeddings);
  CHECK(c.sliding_window[4] == 1024);
  CHECK(c.sliding_window[5] == 0);
  CHECK(c.rope_of(5).linear_factor == 8.0);
  CHECK(c.rope_of(4).linear_factor == 1.0);
  CHECK(models::parameter_count(c) == 3'880'263'168);  // transformers' count of its text model
  CHECK(spec.weights.front().hf_name == "model.language_model.embed_tokens.weight");
  CHECK(spec.weights.front().alias == "language_model.model.embed_tokens.weight");
  CHECK(spec.carried.front() == "vision_tower.");
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": 3})"),
                       doctest::Contains("Gemma3ForConditionalGeneration needs \"text_config\", an object"), Error);
}

TEST_CASE("gemma-3-1b: Gemma 2's block with (1 + w) q/k norms, one rotary base per kind of layer; transformers' count") {
  // gemma-3-1b-it's config.json as published (rope_theta and rope_local_base_freq, no layer_types).
  const auto spec = spec_of(R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 1152, "head_dim": 256,
    "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
    "vocab_size": 262144, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
    "sliding_window": 512, "sliding_window_pattern": 6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": null, "attn_logit_softcapping": null, "final_logit_softcapping": null,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06})");
  const auto& c = spec.config;
  CHECK(c.sandwich_norms);
  CHECK(c.qk_norm);
  CHECK(c.norm == nn::NormKind::rms_unit_offset);
  CHECK(c.attention_softcap == 0.0);
  CHECK(c.logit_softcap == 0.0);
  CHECK(c.sliding_window[4] == 512);
  CHECK(c.sliding_window[5] == 0);
  CHECK(c.rope_of(4).theta == 1e4);
  CHECK(c.rope_of(5).theta == 1e6);
  CHECK(models::parameter_count(c) == 999'885'952);  // transformers' count of Gemma3ForCausalLM at this config
  // Gemma3TextConfig's defaults: no caps, every sixth layer global; rope_scaling scales the global layers only.
  const auto bare = spec_of(R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 6, "num_attention_heads": 8, "vocab_size": 10,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}})");
  CHECK(bare.config.sliding_window == std::vector<index_t>{4096, 4096, 4096, 4096, 4096, 0});
  CHECK(bare.config.rope_of(0).linear_factor == 1.0);
  CHECK(bare.config.rope_of(5).linear_factor == 8.0);
  CHECK(bare.config.rope_of(5).theta == 1e6);
  CHECK(bare.config.max_position_embeddings == 131072);
  const std::vector<float> plain = nn::rope_inverse_frequencies(bare.config.rope_of(0));
  const std::vector<float> scaled = nn::rope_inverse_frequencies(bare.config.rope_of(5));
  CHECK(scaled[0] == 1.0f / 8);
  CHECK(plain[0] == 1.0f);
}

TEST_CASE("the parameter count from the configuration is what the model allocates") {
  for (const char* name : {"llama_gqa", "smollm2_tied", "qwen2_bias", "neox_parallel", "qwen3_qk_norm",
                           "granite_multipliers", "phi3_fused", "phi3_longrope", "phi3_longrope_long", "gpt_bigcode_mqa",
                           "gpt_bigcode_mha", "bloom_alibi", "bloom_six_heads", "gemma_geglu", "gemma2_softcap",
                           "gemma3_local_global", "gemma3_vision_text", "mixtral_top2", "qwen2_moe_shared",
                           "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared"}) {
    CAPTURE(name);
    fs::path dir = fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / name;
    models::Transformer<float> model(models::read_model_spec(dir));
    CHECK(model.parameter_count() == models::parameter_count(model.config()));
  }
}

TEST_CASE("a block finds its parameters once: optional ones the configuration leaves out are absent, an unknown "
          "name is an error") {
  for (const char* name : {"llama_gqa", "neox_parallel"}) {
    CAPTURE(name);
    models::Transformer<float> model(models::read_model_spec(fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / name));
    const models::TransformerConfig& c = model.config();
    const auto& params = model.blocks()[0].parameters();
    const models::Block<float>::Weights w = models::Block<float>::Weights::of(params, c, 0);
    CHECK(w.qkv_weight.present());
    CHECK(params.value(w.qkv_weight) == params.value("qkv.weight"));
    CHECK(w.qkv_bias.present() == c.qkv_bias);
    CHECK(w.attn_norm_bias.present() == (c.norm == nn::NormKind::layer));
    if (!w.attn_norm_bias.present()) CHECK(params.value(w.attn_norm_bias) == nullptr);
    CHECK_THROWS_WITH_AS(params.value("qkv.wieght"),
                         doctest::Contains("internal: no parameter \"qkv.wieght\" in this buffer; it declares "
                                           "attn_norm.weight"),
                         Error);
  }
}

}  // namespace test_config
