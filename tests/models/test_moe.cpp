// Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): the routing, a sparse
// layer's backward against finite differences, the configurations as
// published, and what LoRA may target in them. Parity with HF is in
// test_parity.cpp and test_generate.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <ft/adapters/lora.hpp>
#include <ft/models/load.hpp>
#include <ft/nn/moe.hpp>

#include "support/model_spec.hpp"

namespace test_moe {

using namespace ft;
namespace fs = std::filesystem;

using ft::testing::spec_of;

namespace {
fs::path fixture(const std::string& name) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / name; }
}  // namespace

TEST_CASE("routing: the top k by probability, renormalised or not, and the tokens sorted by expert") {
  // Three tokens, four experts, top 2.
  const std::vector<double> logits{0.0, 2.0, 1.0, -1.0,   // picks 1, 2
                                   3.0, 0.5, 0.0, 2.5,    // picks 0, 3
                                   -2.0, 1.5, 0.0, 1.0};  // picks 1, 3
  for (bool normalize : {true, false}) {
    CAPTURE(normalize);
    nn::Routing<double> r = nn::route(logits.data(), 3, 4, 2, normalize);
    nn::count_routes(r, [](index_t) { return true; });
    CHECK(r.expert == std::vector<std::int32_t>{1, 2, 0, 3, 1, 3});
    for (index_t n = 0; n < 3; ++n) {
      double z = 0;
      for (index_t e = 0; e < 4; ++e) z += std::exp(logits[std::size_t(n * 4 + e)]);
      const double p0 = std::exp(logits[std::size_t(n * 4 + r.expert[std::size_t(2 * n)])]) / z,
                   p1 = std::exp(logits[std::size_t(n * 4 + r.expert[std::size_t(2 * n + 1)])]) / z;
      CHECK(r.weight[std::size_t(2 * n)] == doctest::Approx(normalize ? p0 / (p0 + p1) : p0).epsilon(1e-14));
      CHECK(r.weight[std::size_t(2 * n + 1)] == doctest::Approx(normalize ? p1 / (p0 + p1) : p1).epsilon(1e-14));
    }
    // Expert 0: token 1; expert 1: tokens 0 and 2; expert 2: token 0; expert 3: tokens 1 and 2.
    CHECK(r.first == std::vector<index_t>{0, 1, 3, 4, 6});
    CHECK(r.token_at == std::vector<std::int32_t>{1, 0, 2, 0, 1, 2});
    for (index_t i = 0; i < 6; ++i) CHECK(r.token_at[std::size_t(r.row_of[std::size_t(i)])] == i / 2);
    CHECK(r.picks == std::vector<double>{1, 2, 1, 2});
    // Token 1 as padding: its picks (experts 0 and 3) and probabilities leave the counts.
    nn::count_routes(r, [](index_t n) { return n != 1; });
    CHECK(r.picks == std::vector<double>{0, 2, 1, 1});
    CHECK(r.counted_tokens == 2);
  }
}

TEST_CASE("the load-balancing loss leaves padding out, as HF's attention_mask does") {
  // Row 1 of a 2 x 12 batch holds 7 tokens and 5 of padding. Its loss equals
  // that of the same 19 tokens packed in one row as two documents (whose
  // tokens see what they saw in the rectangular batch), and differs from
  // the loss that counts the padding.
  auto model = models::load_pretrained<double>(fixture("mixtral_top2"));
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int32_t> token(0, std::int32_t(model->config().vocab_size - 1));
  std::vector<std::int32_t> ids(2 * 12);
  for (auto& id : ids) id = token(rng);
  auto aux_of = [&](const models::Batch& batch) {
    auto context = model->make_context();
    context->begin(batch, {.backward = false}, nullptr);
    model->forward(*context, -1, model->config().num_layers);
    return context->router_aux_loss();
  };
  models::Batch padded = models::causal_lm_batch(2, 12, ids);
  const double counting_padding = aux_of(padded);
  padded.lengths = {12, 7};
  std::vector<std::int32_t> packed_ids(ids.begin(), ids.begin() + 19), documents(19, 0);
  std::fill(documents.begin() + 12, documents.end(), 1);
  const double packed = aux_of(models::causal_lm_batch(1, 19, packed_ids, {}, documents));
  CHECK(aux_of(padded) == doctest::Approx(packed).epsilon(1e-12));
  CHECK(std::abs(counting_padding - packed) > 1e-4);
}

TEST_CASE("expert parallelism's route: runs of sorted rows to each rank, what arrives ordered expert by expert") {
  // Two ranks, two experts each. This rank's sorted rows: 1 for expert 0, 2
  // for expert 1, 0 for expert 2, 3 for expert 3. Rank 1 (this one) holds
  // experts 2 and 3, and is sent, for them, 2 and 1 rows by rank 0 and 0 and
  // 3 rows by itself.
  const nn::ExpertRoute r = nn::route_to_ranks({0, 1, 3, 3, 6}, 2, 2, {2, 1, 0, 3});
  CHECK(r.send == std::vector<std::size_t>{3, 3});
  CHECK(r.recv == std::vector<std::size_t>{3, 3});
  CHECK(r.first == std::vector<index_t>{0, 2, 6});  // expert 2: 2 rows, expert 3: 1 + 3
  // Received: rank 0's e2, e2, e3, then its own e3 x 3; local: e2 e2 | e3 (rank 0), e3 e3 e3.
  CHECK(r.received_at == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  // Now this rank has 1, 2, 2 and 1 rows for experts 0-3, and rank 0 sends it 1 and 1.
  const nn::ExpertRoute mixed = nn::route_to_ranks({0, 1, 3, 5, 6}, 2, 2, {1, 1, 2, 1});
  CHECK(mixed.send == std::vector<std::size_t>{3, 3});
  CHECK(mixed.recv == std::vector<std::size_t>{2, 3});
  CHECK(mixed.first == std::vector<index_t>{0, 3, 5});
  // Received rows: (r0, e2), (r0, e3), (r1, e2) x 2, (r1, e3); local: e2 from r0, r1, r1, then e3 from r0, r1.
  CHECK(mixed.received_at == std::vector<std::int32_t>{0, 2, 3, 1, 4});
  for (std::size_t i = 0; i < mixed.local_at.size(); ++i)
    CHECK(mixed.received_at[std::size_t(mixed.local_at[i])] == std::int32_t(i));
}

TEST_CASE("a sparse layer's backward matches finite differences: router, experts, shared expert, load-balancing loss") {
  // Every gradient of a sparse layer, through the whole model in double with
  // the load-balancing loss added: Mixtral's renormalised top 2,
  // Qwen2-MoE's top 2 with a shared expert and its gate, and GraniteMoE's
  // (its softmax over the top 2 logits is Mixtral's renormalisation), with
  // GraniteMoeShared's ungated shared MLP. The fixtures'
  // routers keep every token's choice clear of ties (by 0.05 in the
  // logits), so a step of 1e-6 changes no choice.
  for (const char* name : {"mixtral_top2", "qwen2_moe_shared", "granite_moe_top2", "granite_moe_shared"}) {
    CAPTURE(name);
    auto model = models::load_pretrained<double>(fixture(name));
    REQUIRE(model->config().moe.aux_loss_coef > 0);
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> token(0, std::int32_t(model->config().vocab_size - 1));
    std::vector<std::int32_t> ids(2 * 12);
    for (auto& id : ids) id = token(rng);
    // Row 1 is padded after 7 tokens: the load-balancing loss's gradient leaves the padding out.
    std::vector<std::int32_t> labels = ids;
    std::fill(labels.begin() + 19, labels.end(), -100);
    models::Batch batch = models::causal_lm_batch(2, 12, ids, labels);
    batch.lengths = {12, 7};
    const double count = double(batch.scored_tokens());
    auto loss = [&] { return model->forward_backward(batch, {.token_count = count, .backward = false}) / count; };
    model->zero_grads();
    model->forward_backward(batch, {.token_count = count});

    std::vector<std::string> params{"layers.0.router.weight", "layers.0.experts.gate_up.weight",
                                    "layers.0.experts.down.weight", "layers.0.attn_norm.weight"};
    if (model->config().moe.shared_expert_size > 0)
      for (const char* p : {"layers.0.mlp_in.weight", "layers.0.mlp_out.weight"}) params.push_back(p);
    if (model->config().moe.gated_shared_expert()) params.push_back("layers.0.shared_gate.weight");
    for (const std::string& param : params) {
      CAPTURE(param);
      auto [buffer, entry] = model->find_parameter(param);
      double* values = buffer->values().data() + entry->offset;
      const double* grads = buffer->grads().data() + entry->offset;
      std::uniform_int_distribution<index_t> pick(0, entry->shape.numel() - 1);
      double worst = 0;
      for (int i = 0; i < 24; ++i) {
        const index_t at = pick(rng);
        const double saved = values[at], eps = 1e-6;
        values[at] = saved + eps;
        const double up = loss();
        values[at] = saved - eps;
        const double down = loss();
        values[at] = saved;
        const double numeric = (up - down) / (2 * eps);
        worst = std::max(worst, std::abs(grads[at] - numeric) / std::max(1.0, std::abs(numeric)));
      }
      CHECK(worst < 1e-7);
    }
  }
}

TEST_CASE("Mixtral-8x7B, Qwen1.5-MoE-A2.7B and Qwen3-30B-A3B: sparse layers and parameter counts as published") {
  const auto mixtral = spec_of(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "output_router_logits": false, "sliding_window": null,
    "tie_word_embeddings": false})");
  const models::MoeConfig& m = mixtral.config.moe;
  CHECK(m.experts == 8);
  CHECK(m.top_k == 2);
  CHECK(m.expert_size == 14336);
  CHECK(m.normalize_top_k);
  CHECK(m.aux_loss_coef == 0);  // HF adds the load-balancing loss only with output_router_logits
  CHECK(m.sparse_layers() == 32);
  CHECK(models::parameter_count(mixtral.config) == 46'702'792'704);  // transformers' count at this config

  const auto qwen2 = spec_of(R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "num_experts": 60,
    "num_experts_per_tok": 4, "norm_topk_prob": false, "vocab_size": 151936, "decoder_sparse_step": 1,
    "output_router_logits": true, "router_aux_loss_coef": 0.001, "tie_word_embeddings": false})");
  CHECK(qwen2.config.moe.shared_expert_size == 5632);
  CHECK(qwen2.config.moe.aux_loss_coef == 0.001);
  CHECK(!qwen2.config.moe.normalize_top_k);
  CHECK(qwen2.config.qkv_bias);
  CHECK(models::parameter_count(qwen2.config) == 14'315'784'192);

  const auto qwen3 = spec_of(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true,
    "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": false})");
  CHECK(qwen3.config.qk_norm);
  CHECK(models::parameter_count(qwen3.config) == 30'532'122'624);

  // mlp_only_layers and decoder_sparse_step choose the sparse layers.
  const auto mixed = spec_of(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "moe_intermediate_size": 16, "num_attention_heads": 4, "num_hidden_layers": 6,
    "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100, "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  CHECK(mixed.config.moe.sparse == std::vector<std::uint8_t>{0, 1, 0, 0, 0, 1});

  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
    "num_local_experts": 2, "num_experts_per_tok": 3})"),
                       doctest::Contains("num_experts_per_tok (3) must not exceed the number of experts (2)"), Error);
  CHECK_THROWS_WITH_AS(spec_of(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
    "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
    "router_jitter_noise": 0.1})"),
                       doctest::Contains("router_jitter_noise"), Error);
}

TEST_CASE("LoRA on a mixture of experts: the attention, Qwen2-MoE's shared expert, and all-linear's routers and "
          "experts (tests/adapters/test_lora_experts.cpp checks them against PEFT)") {
  const models::ModelSpec mixtral = models::read_model_spec(fixture("mixtral_top2"));
  const auto attention = adapters::lora_targets(mixtral, {"q_proj", "k_proj", "v_proj", "o_proj"});
  CHECK(attention.size() == 4 * 2);  // q, k, v, o in two layers
  // PEFT's all-linear also adapts the routers and the routed experts, the fused gate_up at twice the rank.
  const auto all = adapters::lora_targets(mixtral, {"all-linear"});
  CHECK(all.size() == 7 * 2);
  for (const adapters::LoraTarget& t : all)
    CHECK(t.rank == (t.slot == models::LinearSlot::experts_gate_up ? 2 : 1) * adapters::LoraOptions{}.r);
  CHECK_THROWS_WITH_AS(adapters::lora_targets(mixtral, {"q_proj", "gate_proj"}),
                       doctest::Contains("\"gate_proj\" matches no projection of this MixtralForCausalLM model"),
                       Error);

  // Qwen2-MoE: layer 1 is dense (intermediate_size 40); layers 0 and 2 have a shared expert of width 24.
  const models::ModelSpec qwen2 = models::read_model_spec(fixture("qwen2_moe_shared"));
  for (const adapters::LoraTarget& t : adapters::lora_targets(qwen2, {"gate_proj", "down_proj"})) {
    CAPTURE(t.module);
    const bool dense = t.layer == 1;
    CHECK(t.module.find(dense ? ".mlp." : ".mlp.shared_expert.") != std::string::npos);
    if (t.slot == models::LinearSlot::mlp_in) CHECK(t.rows == (dense ? 40 : 24));
    else CHECK(t.in == (dense ? 40 : 24));
  }
}

}  // namespace test_moe
