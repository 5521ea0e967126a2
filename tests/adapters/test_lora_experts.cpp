// LoRA on mixtures of experts against PEFT 0.21: the routers and the stacked
// routed experts as PEFT adapts parameters (target_parameters), and
// "all-linear" resolved per architecture as PEFT resolves it. Loss, logits
// and every lora_A / lora_B gradient; ft reads PEFT's adapter files and
// writes them back tensor for tensor; merging gives the adapted logits.
//
// Fixtures come from tools/make_moe_lora_fixtures.py: PEFT's adapters (r 4,
// alpha 8, every weight random) on tests/fixtures/parity's mixtures, and
// PEFT's float64 results on the parity fixtures' batch. Tolerances are the
// parity test's (whole tensors, max |ft - hf| / max |hf|).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/peft_reference.hpp"
#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/adapters/merged_model.hpp>
#include <ft/infer/engine.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>

namespace test_lora_experts {

using namespace ft;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* name;
  const char* base;
  std::vector<std::string> modules, parameters;
  bool rslora = false;
  std::size_t tensors;  // what PEFT's adapter holds, counted by hand from the model's shape
};

// Mixtral: 2 layers, both sparse (4 experts); Qwen3-MoE: 3 layers, layer 1
// sparse (8 experts), 0 and 2 dense; Qwen2-MoE: 3 layers, layer 1 dense,
// 0 and 2 sparse with a shared expert; GraniteMoE: 2 sparse layers;
// GraniteMoeShared: 2 sparse layers (3 experts) with an ungated shared_mlp.
const Case cases[] = {
    // q, k, v, o, router, gate_up, down in 2 layers: 14 modules
    {"mixtral_all_linear", "mixtral_top2", {"all-linear"}, {}, false, 28},
    // q, k, v, o in 3 layers, router, gate_up, down in one (the dense layers' MLPs left out, as in PEFT)
    {"qwen3_moe_all_linear", "qwen3_moe_sparse_step", {"all-linear"}, {}, false, 30},
    // q, k, v, o in 3 layers; the shared expert's 3 and its gate in 2; the dense MLP's 3 in 1
    {"qwen2_moe_all_linear", "qwen2_moe_shared", {"all-linear"}, {}, false, 46},
    // q, k, v, o in 2 layers: GraniteMoE's experts and routers were never nn.Linear
    {"granite_moe_all_linear", "granite_moe_top2", {"all-linear"}, {}, false, 16},
    // q, k, v, o and the shared_mlp's input_linear and output_linear in 2 layers
    {"granite_moe_shared_all_linear", "granite_moe_shared", {"all-linear"}, {}, false, 24},
    // v in 2 layers, down and router in 2
    {"mixtral_parameters_rslora", "mixtral_top2", {"v_proj"}, {"down_proj", "gate.weight"}, true, 12},
};

fs::path parity(const std::string& base) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / base; }
fs::path case_dir(const Case& c) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/peft/moe" / c.name; }

adapters::LoraOptions options_of(const Case& c) {
  return {.r = 4, .alpha = 8, .target_modules = c.modules, .target_parameters = c.parameters, .seed = 3,
          .use_rslora = c.rslora};
}

using ft::testing::relative_error;
template <class T>
std::vector<T> read(const io::SafetensorsFile& file, const std::string& name) {
  return ft::testing::read_tensor<T>(file, name);
}

// A frozen mixture with the case's PEFT adapter loaded.
template <class T>
struct Adapted {
  std::unique_ptr<models::Transformer<T>> model;
  std::unique_ptr<adapters::LoraModel<T>> lora;

  explicit Adapted(const Case& c) {
    model = std::make_unique<models::Transformer<T>>(models::read_model_spec(parity(c.base)), false);
    model->load(io::ModelWeights::open(parity(c.base)));
    lora = std::make_unique<adapters::LoraModel<T>>(*model, options_of(c));
    adapters::load_peft_adapter(*lora, model->config(), case_dir(c) / "adapter");
  }
};

models::Batch parity_batch(const Case& c) {
  auto expected = io::SafetensorsFile::open(parity(c.base) / "expected.safetensors");
  const io::TensorView& ids = expected.at("input_ids");
  auto ids64 = read<std::int64_t>(expected, "input_ids");
  auto labels64 = read<std::int64_t>(expected, "labels");
  return models::causal_lm_batch(ids.shape[0], ids.shape[1], std::vector<std::int32_t>(ids64.begin(), ids64.end()),
                                 std::vector<std::int32_t>(labels64.begin(), labels64.end()));
}

template <class T>
void check_against_peft(const Case& c, ft::testing::PeftTolerance tol) {
  CAPTURE(c.name);
  auto expected = io::SafetensorsFile::open(case_dir(c) / "expected.safetensors");
  Adapted<T> a(c);
  const std::size_t compared = ft::testing::check_against_peft_reference(*a.model, *a.lora, parity_batch(c), expected, tol);
  CHECK(compared == c.tensors);
  CHECK(compared == expected.tensors().size() - 2);  // every gradient PEFT computed
}

}  // namespace

TEST_CASE("LoRA on mixtures of experts matches PEFT in float32: routers, stacked experts, all-linear per family") {
  for (const Case& c : cases) check_against_peft<float>(c, {1e-5, 1e-5, 1e-4});
}

TEST_CASE("LoRA on mixtures of experts matches PEFT in float64") {
  for (const Case& c : cases) check_against_peft<double>(c, {1e-6, 1e-6, 1e-5});
}

TEST_CASE("LoRA on mixtures of experts writes PEFT's adapter back tensor for tensor, with its rank_pattern") {
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Adapted<float> a(c);
    ft::testing::TempDir dir("lora_experts");
    adapters::save_peft_adapter(*a.lora, a.model->config(), "base", dir.path, "F32");
    auto peft = io::SafetensorsFile::open(case_dir(c) / "adapter" / "adapter_model.safetensors");
    auto ours = io::SafetensorsFile::open(dir.path / "adapter_model.safetensors");
    REQUIRE(ours.tensors().size() == peft.tensors().size());
    for (const io::TensorView& t : peft.tensors()) {
      CAPTURE(t.name);
      const io::TensorView* mine = ours.find(t.name);
      REQUIRE(mine != nullptr);
      CHECK(mine->shape == t.shape);
      CHECK(read<float>(ours, t.name) == read<float>(peft, t.name));
    }
    const nlohmann::json want = io::read_json_file(case_dir(c) / "adapter" / "adapter_config.json");
    const nlohmann::json got = io::read_json_file(dir.path / "adapter_config.json");
    auto set_of = [](const nlohmann::json& list) {
      return list.is_array() ? list.get<std::set<std::string>>() : std::set<std::string>{};
    };
    CHECK(set_of(got["target_parameters"]) == set_of(want["target_parameters"]));
    CHECK(got["rank_pattern"] == want["rank_pattern"]);
    CHECK(got["alpha_pattern"] == want["alpha_pattern"]);
    // And ft reads back what it wrote: the same adapter, to the bit.
    adapters::LoraModel<float> again(*a.model, options_of(c), false);
    adapters::load_peft_adapter(again, a.model->config(), dir.path);
    for (std::size_t b = 0; b < again.blocks().size(); ++b) {
      auto& mine = again.blocks()[b]->parameters().values();
      auto& theirs = a.lora->blocks()[b]->parameters().values();
      CHECK(std::equal(mine.data(), mine.data() + mine.numel(), theirs.data()));
    }
  }
}

TEST_CASE("target_modules as full module names, as PEFT writes GraniteMoE's all-linear, adapt what all-linear does") {
  const models::ModelSpec granite = models::read_model_spec(parity("granite_moe_top2"));
  const nlohmann::json config =
      io::read_json_file(fs::path(FT_SOURCE_DIR) / "tests/fixtures/peft/moe/granite_moe_all_linear/adapter/adapter_config.json");
  const auto names = config["target_modules"].get<std::vector<std::string>>();
  REQUIRE(names.size() == 8);
  CHECK(names[0].starts_with("model.layers."));
  const auto named = adapters::lora_targets(granite, names), all = adapters::lora_targets(granite, {"all-linear"});
  REQUIRE(named.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(named[i].module == all[i].module);
  // An end of a name after a dot names the same modules; a part of a word names none.
  CHECK(adapters::lora_targets(granite, {"self_attn.q_proj"}).size() == 2);
  CHECK_THROWS_WITH_AS(adapters::lora_targets(granite, {"proj"}), doctest::Contains("\"proj\" matches no projection"),
                       Error);
}

TEST_CASE("merging LoRA on routers and experts into the model gives the adapted model's logits") {
  const Case& c = cases[0];
  Adapted<double> a(c);
  const models::Batch batch = parity_batch(c);
  const index_t V = a.model->config().vocab_size;
  std::vector<double> adapted(std::size_t(batch.rows() * V)), merged(adapted.size());
  const double count = double(batch.scored_tokens());
  a.model->forward_backward(batch, {.token_count = count, .backward = false}, adapted.data());
  a.lora->merge_into_model();
  a.model->forward_backward(batch, {.token_count = count, .backward = false}, merged.data());
  CHECK(relative_error(merged, adapted) <= 1e-12);
}

namespace {

// The next-token logits after each prompt, all prompts in one engine step;
// `adapter` names the engine's adapter for the prompts where `adapted` is set.
std::vector<float> step_logits(infer::Engine<float>& engine, const std::vector<std::vector<std::int32_t>>& prompts,
                               const std::vector<bool>& adapted, int adapter) {
  const models::TransformerConfig& c = engine.model().config();
  std::vector<infer::KvCache<float>> caches;
  for (std::size_t i = 0; i < prompts.size(); ++i) caches.emplace_back(c, 64);
  std::vector<infer::SequenceStep<float>> steps;
  for (std::size_t i = 0; i < prompts.size(); ++i) steps.push_back({&caches[i], prompts[i], adapted[i] ? adapter : -1});
  std::vector<float> logits(prompts.size() * std::size_t(c.vocab_size));
  engine.step(steps, logits.data());
  return logits;
}

}  // namespace

TEST_CASE("LoRA on routers and experts is served unmerged per sequence as the merged model computes it") {
  for (const char* name : {"mixtral_all_linear", "qwen3_moe_all_linear", "mixtral_parameters_rslora"}) {
    CAPTURE(name);
    const Case& c = *std::ranges::find_if(cases, [&](const Case& k) { return k.name == std::string(name); });
    const models::Batch batch = parity_batch(c);
    // Three prompts of the parity batch's tokens, the first and last adapted: in a
    // routed expert's run of rows, adapted and plain sequences' rows alternate.
    std::vector<std::vector<std::int32_t>> prompts;
    for (index_t r = 0; r < 3; ++r)
      prompts.emplace_back(batch.input_ids.begin() + (r % batch.B) * batch.T + r,
                           batch.input_ids.begin() + (r % batch.B + 1) * batch.T);
    const std::vector<bool> adapted{true, false, true};

    auto base = models::load_pretrained<float>(parity(c.base), false);
    infer::Engine<float> served(*base);
    const int adapter = served.load_adapter(case_dir(c) / "adapter");
    const std::vector<float> got = step_logits(served, prompts, adapted, adapter);

    Adapted<float> merged(c);
    merged.lora->merge_into_model();
    infer::Engine<float> reference(*merged.model);
    const std::vector<float> with = step_logits(reference, prompts, adapted, -1);
    infer::Engine<float> plain(*base);
    const std::vector<float> without = step_logits(plain, prompts, adapted, -1);
    const std::size_t V = std::size_t(base->config().vocab_size);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      auto row = [&](const std::vector<float>& l) { return std::vector<float>(l.begin() + i * V, l.begin() + (i + 1) * V); };
      CHECK(relative_error(row(got), row(adapted[i] ? with : without)) < 1e-5);
      if (adapted[i]) CHECK(relative_error(row(with), row(without)) > 1e-3);  // the adapter changes these
    }
  }
}

TEST_CASE("ftrun convert's merge of LoRA on routers and experts writes the merged model under the files' names") {
  const Case& c = cases[0];  // Mixtral: the files hold each expert's w1, w3 and w2
  const fs::path dir = parity(c.base);
  auto merged = adapters::merge_lora_into_model(models::read_model_spec(dir), dir, case_dir(c) / "adapter",
                                                [](const std::string&) { return std::string("F32"); });
  ft::testing::TempDir out("ft_merged_experts");
  io::write_model_safetensors(out.path, merged.tensors, std::uint64_t(1) << 30);
  std::filesystem::copy_file(dir / "config.json", out / "config.json");
  const auto names = io::ModelWeights::open(out.path).names(), source = io::ModelWeights::open(dir).names();
  CHECK(std::set<std::string>(names.begin(), names.end()) == std::set<std::string>(source.begin(), source.end()));

  Adapted<double> adapted(c);
  const models::Batch batch = parity_batch(c);
  const index_t V = adapted.model->config().vocab_size;
  std::vector<double> expected(std::size_t(batch.rows() * V)), logits(expected.size());
  const double count = double(batch.scored_tokens());
  adapted.model->forward_backward(batch, {.token_count = count, .backward = false}, expected.data());
  auto written = models::load_pretrained<double>(out.path, false);
  written->forward_backward(batch, {.token_count = count, .backward = false}, logits.data());
  CHECK(relative_error(logits, expected) < 1e-6);  // the merge ran in float32
}

TEST_CASE("transformers 4's expert and router names in target_modules become the parameters PEFT converts them to") {
  // What PEFT 0.21 does on transformers 5 (peft/utils/transformers_weight_conversion.py): Mixtral's w1/w3/w2/gate and
  // Qwen3-MoE's gate_proj/up_proj/down_proj/gate move to target_parameters, w1 with w3 fused at twice the rank.
  auto summary = [](const std::vector<adapters::LoraTarget>& targets) {
    std::set<std::string> s;
    for (const adapters::LoraTarget& t : targets)
      s.insert((t.parameter.empty() ? t.module : t.parameter) + " r" + std::to_string(t.rank));
    return s;
  };
  const models::ModelSpec mixtral = models::read_model_spec(parity("mixtral_top2"));
  adapters::LoraOptions old_names{.r = 4, .target_modules = {"q_proj", "v_proj", "w1", "w3", "w2", "gate"}};
  adapters::LoraOptions new_names{.r = 4, .target_modules = {"q_proj", "v_proj"},
                                  .target_parameters = {"gate_up_proj", "down_proj", "gate.weight"}};
  const auto converted = adapters::lora_targets(mixtral, old_names);
  auto expected = summary(adapters::lora_targets(mixtral, new_names));
  CHECK(expected.erase("model.layers.0.mlp.experts.gate_up_proj r4") == 1);
  expected.insert("model.layers.0.mlp.experts.gate_up_proj r8");
  CHECK(expected.erase("model.layers.1.mlp.experts.gate_up_proj r4") == 1);
  expected.insert("model.layers.1.mlp.experts.gate_up_proj r8");
  CHECK(summary(converted) == expected);
  // Without the pair's fusion the rank stays; a full module name converts by its end.
  const adapters::LoraOptions full_name{.r = 4, .target_modules = {"q_proj", "block_sparse_moe.experts.w2"}};
  const adapters::LoraOptions parameter{.r = 4, .target_modules = {"q_proj"}, .target_parameters = {"down_proj"}};
  CHECK(summary(adapters::lora_targets(mixtral, full_name)) == summary(adapters::lora_targets(mixtral, parameter)));
  CHECK_THROWS_WITH_AS(adapters::lora_targets(mixtral, {"q_proj", "w1", "w2"}),
                       doctest::Contains("lora.target_modules: \"w1\" without \"w3\": transformers 5 fuses both"),
                       Error);
  // Qwen3-MoE: gate_proj/up_proj/down_proj name the experts, so the dense layers' MLPs are not adapted, as in PEFT.
  const models::ModelSpec qwen3 = models::read_model_spec(parity("qwen3_moe_sparse_step"));
  const auto qwen = adapters::lora_targets(qwen3, {"gate_proj", "up_proj", "down_proj"});
  REQUIRE(qwen.size() == 2);  // layer 1's experts; layers 0 and 2 are dense
  for (const adapters::LoraTarget& t : qwen) CHECK(t.stacked());
  // GraniteMoE's and Qwen2-MoE's names are not converted by PEFT, nor by ft: gate_proj stays a module there.
  const models::ModelSpec qwen2 = models::read_model_spec(parity("qwen2_moe_shared"));
  for (const adapters::LoraTarget& t : adapters::lora_targets(qwen2, {"gate_proj"})) CHECK(t.parameter.empty());
}

TEST_CASE("a rank_pattern for one layer's experts beside all-linear's doubled rank reads back as it was written") {
  const fs::path dir = parity("mixtral_top2");
  models::Transformer<float> model(models::read_model_spec(dir), false);
  adapters::LoraOptions o{.r = 4, .alpha = 8, .target_modules = {"all-linear"}};
  o.rank_pattern = {{"layers\\.0\\.mlp\\.experts\\.gate_up_proj", 2}};
  adapters::LoraModel<float> lora(model, o);
  ft::testing::TempDir out("ft_expert_patterns");
  adapters::save_peft_adapter(lora, model.config(), dir.string(), out.path, "F32");
  // Layer 1's gate_up_proj keeps all-linear's doubled rank under its own key, so no module has two keys.
  const nlohmann::json config = io::read_json_file(out / "adapter_config.json");
  CHECK(config["rank_pattern"] == nlohmann::json{{"layers\\.0\\.mlp\\.experts\\.gate_up_proj", 2},
                                                 {"model\\.layers\\.1\\.mlp\\.experts\\.gate_up_proj", 8}});
  const io::PeftAdapter peft = io::PeftAdapter::open(out.path);
  models::Transformer<float> again_model(models::read_model_spec(dir), false);
  adapters::LoraModel<float> again(again_model, adapters::lora_options_of(peft));
  adapters::load_peft_adapter(again, again_model.config(), out.path);
  for (auto& block : again.blocks())
    for (std::size_t k = 0; k < block->targets().size(); ++k)
      if (block->targets()[k].slot == models::LinearSlot::experts_gate_up)
        CHECK(block->rank_of(k) == (block->targets()[k].layer == 0 ? 2 : 8));
}

TEST_CASE("LoRA on mixtures of experts: names that match nothing, dropout, and split experts are refused") {
  const models::ModelSpec mixtral = models::read_model_spec(parity("mixtral_top2"));
  CHECK_THROWS_WITH_AS(adapters::lora_targets(mixtral, {"q_proj"}, {"w1"}),
                       doctest::Contains("lora.target_parameters: \"w1\" matches no parameter of this "
                                         "MixtralForCausalLM model; allowed: gate_up_proj, down_proj, gate.weight"),
                       Error);
  const models::ModelSpec granite = models::read_model_spec(parity("granite_moe_top2"));
  CHECK_THROWS_WITH_AS(adapters::lora_targets(granite, {"q_proj"}, {"gate.weight"}),
                       doctest::Contains("allowed: gate_up_proj, down_proj, router.weight"), Error);
  CHECK(adapters::lora_targets(granite, {"q_proj"}, {"router.weight", "experts.down_proj"}).size() == 2 * 3);
  const models::ModelSpec dense = models::read_model_spec(parity("llama_gqa"));
  CHECK_THROWS_WITH_AS(adapters::lora_targets(dense, {"q_proj"}, {"down_proj"}),
                       doctest::Contains("allowed: none (its layers have no experts)"), Error);

  models::Transformer<float> model(mixtral, false);
  const Case& named = *std::ranges::find_if(cases, [](const Case& c) { return c.name == std::string("mixtral_parameters_rslora"); });
  adapters::LoraOptions dropping = options_of(named);
  dropping.dropout = 0.1;
  CHECK_THROWS_WITH_AS(adapters::LoraModel<float>(model, dropping),
                       doctest::Contains("lora.dropout = 0.100000 with LoRA on \"model.layers.0.mlp.experts.down_proj\""),
                       Error);

  // With expert parallelism a rank adapts its run of the stacked experts: the second of two holds the second half.
  models::ModelSpec split = mixtral;
  split.config.moe.parallel = 2;
  split.config.moe.rank = 1;
  const index_t E = mixtral.config.moe.experts;
  for (const adapters::LoraTarget& t : adapters::lora_targets(split, {"all-linear"})) {
    CAPTURE(t.module);
    CHECK(t.experts == (t.stacked() ? E : 1));
    CHECK(t.local_experts == (t.stacked() ? E / 2 : 1));
    CHECK(t.first_expert == (t.stacked() ? E / 2 : 0));
  }
  CHECK(adapters::lora_targets(split, {"q_proj"}, {"gate.weight"}).size() == 2 * 2);  // routers stay whole
}

}  // namespace test_lora_experts
