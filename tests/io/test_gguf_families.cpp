// GGUF files of the architectures llama.cpp names besides Llama, written as
// its converter writes them (tools/make_gguf_family_fixtures.py): converted
// by ft, each loads as the model it came from, its logits those of the
// source model within float32's rounding.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/io/gguf_to_hf.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/tensors.hpp"

namespace test_gguf_families {

namespace fs = std::filesystem;
using namespace ft;

const fs::path families = fs::path(FT_SOURCE_DIR) / "tests/fixtures/gguf/families";

TEST_CASE("gguf: qwen2, qwen3, gemma, gemma2, gemma3, phi3, granite, starcoder, bloom, llama with experts, qwen2moe, "
          "qwen3moe and granitemoe (with and without a shared expert) files convert to the models they came from") {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},   {"gemma", "GemmaForCausalLM"},
      {"gemma2", "Gemma2ForCausalLM"}, {"gemma3", "Gemma3ForCausalLM"}, {"phi3", "Phi3ForCausalLM"},
      {"granite", "GraniteForCausalLM"}, {"starcoder", "GPTBigCodeForCausalLM"}, {"bloom", "BloomForCausalLM"},
      {"mixtral", "MixtralForCausalLM"}, {"qwen2moe", "Qwen2MoeForCausalLM"}, {"qwen3moe", "Qwen3MoeForCausalLM"},
      {"granitemoe", "GraniteMoeForCausalLM"}, {"granitemoeshared", "GraniteMoeSharedForCausalLM"}};
  for (auto [name, hf_class] : cases) {
    CAPTURE(name);
    ft::testing::TempDir dir("ft_gguf_family");
    const fs::path out = dir / "model";
    io::convert_gguf_to_hf(families / (std::string(name) + ".gguf"), out);
    const nlohmann::json config = io::read_json_file(out / "config.json");
    CHECK(config["architectures"][0] == hf_class);

    auto expected = io::SafetensorsFile::open(families / (std::string(name) + "_expected.safetensors"));
    const io::TensorView& ids_view = expected.at("input_ids");
    const index_t B = ids_view.shape[0], T = ids_view.shape[1];
    const std::vector<std::int32_t> ids = ft::testing::read_tensor<std::int32_t>(expected, "input_ids");
    auto model = models::load_pretrained<float>(out);
    const index_t V = model->config().vocab_size;
    std::vector<float> logits(std::size_t(B * T * V));
    model->forward_backward(models::causal_lm_batch(B, T, ids), {.backward = false}, logits.data());
    CHECK(ft::testing::relative_error(logits, ft::testing::read_tensor<float>(expected, "logits")) < 1e-5);
  }
}

TEST_CASE("gguf: what llama.cpp keeps of each family becomes HF's config.json") {
  ft::testing::TempDir dir("ft_gguf_family");
  auto convert = [&](const char* name) {
    io::convert_gguf_to_hf(families / (std::string(name) + ".gguf"), dir / name);
    return io::read_json_file(dir / name / "config.json");
  };
  const nlohmann::json gemma2 = convert("gemma2");
  CHECK(gemma2["attn_logit_softcapping"] == 4.0);
  CHECK(gemma2["final_logit_softcapping"] == 3.0);
  CHECK(gemma2["query_pre_attn_scalar"] == 16);
  CHECK(gemma2["layer_types"] == nlohmann::json{"sliding_attention", "full_attention"});
  const nlohmann::json gemma3 = convert("gemma3");
  CHECK(gemma3["model_type"] == "gemma3_text");
  CHECK(gemma3["layer_types"][4] == "sliding_attention");
  CHECK(gemma3["layer_types"][5] == "full_attention");
  CHECK(gemma3["rope_parameters"]["full_attention"]["factor"] == 2.0);
  CHECK(gemma3["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0);
  const nlohmann::json phi3 = convert("phi3");
  CHECK(phi3["rope_parameters"]["rope_type"] == "longrope");
  CHECK(phi3["rope_parameters"]["partial_rotary_factor"] == 0.75);
  CHECK(phi3["rope_parameters"]["long_factor"][5] == 48.0);
  CHECK(phi3["original_max_position_embeddings"] == 12);
  CHECK(phi3["sliding_window"].is_null());
  const nlohmann::json granite = convert("granite");
  CHECK(granite["embedding_multiplier"] == 3.0);
  CHECK(granite["logits_scaling"] == 4.0);
  CHECK(granite["tie_word_embeddings"] == true);
  const nlohmann::json starcoder = convert("starcoder");
  CHECK(starcoder["multi_query"] == true);
  CHECK(starcoder["n_inner"] == 256);
  CHECK(starcoder["n_positions"] == 64);
  const nlohmann::json bloom = convert("bloom");
  CHECK(bloom["n_head"] == 4);
  CHECK(bloom["layer_norm_epsilon"] == 1e-5);
  // Mixtures: the experts' count, width and routing; llama.cpp renormalises all but Qwen2-MoE's top k.
  const nlohmann::json mixtral = convert("mixtral");
  CHECK(mixtral["model_type"] == "mixtral");
  CHECK(mixtral["num_local_experts"] == 4);
  CHECK(mixtral["num_experts_per_tok"] == 2);
  CHECK(mixtral["intermediate_size"] == 96);
  const nlohmann::json qwen2moe = convert("qwen2moe");
  CHECK(qwen2moe["num_experts"] == 4);
  CHECK(qwen2moe["moe_intermediate_size"] == 48);
  CHECK(qwen2moe["shared_expert_intermediate_size"] == 80);
  CHECK(qwen2moe["norm_topk_prob"] == false);
  CHECK(qwen2moe["mlp_only_layers"] == nlohmann::json::array());
  const nlohmann::json qwen3moe = convert("qwen3moe");
  CHECK(qwen3moe["num_experts_per_tok"] == 3);
  CHECK(qwen3moe["norm_topk_prob"] == true);
  CHECK(qwen3moe["head_dim"] == 24);
  const nlohmann::json granitemoe = convert("granitemoe");
  CHECK(granitemoe["model_type"] == "granitemoe");
  CHECK(granitemoe["num_local_experts"] == 4);
  CHECK(granitemoe["intermediate_size"] == 40);
  CHECK(granitemoe["attention_multiplier"] == 0.3);
  CHECK(granitemoe["residual_multiplier"] == 0.7);
  CHECK_FALSE(granitemoe.contains("shared_intermediate_size"));
  const nlohmann::json granitemoeshared = convert("granitemoeshared");
  CHECK(granitemoeshared["model_type"] == "granitemoeshared");
  CHECK(granitemoeshared["num_local_experts"] == 3);
  CHECK(granitemoeshared["shared_intermediate_size"] == 56);
  CHECK(granitemoeshared["logits_scaling"] == 2.0);
}

}  // namespace test_gguf_families
