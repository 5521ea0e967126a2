// Prompt tuning against PEFT on the tiny training models: the virtual tokens
// initialised from a text, loss, logits and the prompt's gradient in float
// and double; finite differences; adapter files that round-trip and hold
// PEFT's tensor; and the refusals.
//
// Fixtures come from tools/make_train_fixtures.py: <model>_prompt/adapter is
// a PEFT prompt-tuning adapter (6 virtual tokens from "Explain the jargon
// term", then moved by noise), expected.safetensors PEFT's float64 results on
// the LoRA case's 2 x 12 batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ft/adapters/prompt_tuning.hpp>
#include <ft/data/batches.hpp>
#include <ft/text/tokenizer.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/models/load.hpp>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/finite_difference.hpp"

namespace test_prompt_tuning {

using namespace ft;
namespace fs = std::filesystem;

namespace {

constexpr index_t virtual_tokens = 6;
const char* const init_text = "Explain the jargon term";
const char* const models_under_test[] = {"tiny_llama", "tiny_neox"};

fs::path train_dir(const std::string& name) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/train" / name; }

// A frozen tiny model with a prompt adapter, loaded from the fixture unless told otherwise.
template <class T>
struct Prompted {
  std::unique_ptr<models::Transformer<T>> model;
  std::unique_ptr<adapters::PromptTuning<T>> prompt;

  explicit Prompted(const std::string& name, bool load_adapter = true) {
    model = std::make_unique<models::Transformer<T>>(models::read_model_spec(train_dir(name)), false);
    model->load(io::ModelWeights::open(train_dir(name)));
    prompt = std::make_unique<adapters::PromptTuning<T>>(*model, virtual_tokens, 7);
    if (load_adapter) adapters::load_peft_prompt(*prompt, model->config(), train_dir(name + "_prompt") / "adapter");
  }
  std::vector<T> values() const {
    return {prompt->values(), prompt->values() + virtual_tokens * model->config().hidden_size};
  }
};

// The LoRA case's batch with the virtual tokens' placeholders in front, as BatchPlan lays them out.
models::Batch fixture_batch(const std::string& name) {
  const nlohmann::json j = io::read_json_file(train_dir(name + "_lora") / "batch.json");
  std::vector<std::int32_t> ids, labels;
  const index_t B = index_t(j["input_ids"].size());
  for (index_t b = 0; b < B; ++b) {
    ids.insert(ids.end(), std::size_t(virtual_tokens), 0);
    labels.insert(labels.end(), std::size_t(virtual_tokens), -100);
    for (const auto& v : j["input_ids"][std::size_t(b)]) ids.push_back(v.get<std::int32_t>());
    for (const auto& v : j["labels"][std::size_t(b)]) labels.push_back(v.get<std::int32_t>());
  }
  models::Batch batch = models::causal_lm_batch(B, index_t(ids.size()) / B, ids, labels);
  batch.virtual_tokens = virtual_tokens;
  return batch;
}

template <class T>
std::vector<T> read(const io::SafetensorsFile& file, const std::string& name) {
  return ft::testing::read_tensor<T>(file, name);
}

template <class T>
void check_against_peft(const std::string& name, double tol_loss, double tol_logits, double tol_gradient) {
  CAPTURE(name);
  auto expected = io::SafetensorsFile::open(train_dir(name + "_prompt") / "expected.safetensors");
  Prompted<T> p(name);
  const models::Batch batch = fixture_batch(name);
  const index_t V = p.model->config().vocab_size;
  std::vector<T> logits(std::size_t(batch.rows() * V));
  p.prompt->parameters().zero_grads();
  const double count = double(batch.scored_tokens());
  REQUIRE(count == 18);  // 17 as without a prompt, and the last virtual token predicts row 1's first label
  const double loss = p.model->forward_backward(batch, {.token_count = count}, logits.data()) / count;

  const double want = read<float>(expected, "loss")[0];
  CHECK(std::abs(loss - want) / want <= tol_loss);
  CHECK(ft::testing::relative_error(logits, read<float>(expected, "logits")) <= tol_logits);
  const index_t n = virtual_tokens * p.model->config().hidden_size;
  std::vector<T> grad(p.prompt->grads(), p.prompt->grads() + n);
  CHECK(ft::testing::relative_error(grad, read<float>(expected, "grad.prompt_embeddings")) <= tol_gradient);
}

template <class T>
double loss_of(Prompted<T>& p, const models::Batch& batch) {
  const double count = double(batch.scored_tokens());
  return p.model->forward_backward(batch, {.token_count = count, .backward = false}) / count;
}

}  // namespace

TEST_CASE("prompt_init_ids cuts or repeats the text's ids to the number of virtual tokens, as PEFT") {
  CHECK(adapters::prompt_init_ids({5, 6, 7}, 7) == std::vector<std::int32_t>{5, 6, 7, 5, 6, 7, 5});
  CHECK(adapters::prompt_init_ids({5, 6, 7, 8}, 2) == std::vector<std::int32_t>{5, 6});
  CHECK(adapters::prompt_init_ids({9}, 3) == std::vector<std::int32_t>{9, 9, 9});
  CHECK_THROWS_WITH_AS(adapters::prompt_init_ids({}, 3), doctest::Contains("init_text has no tokens"), Error);
}

TEST_CASE("virtual tokens initialised from a text are PEFT's, bit for bit") {
  for (const std::string name : models_under_test) {
    CAPTURE(name);
    Prompted<float> p(name, false);
    const auto tokenizer = text::Tokenizer::from_file(train_dir(name) / "tokenizer.json");
    const auto ids = tokenizer.encode(init_text, true);
    REQUIRE(ids.size() > std::size_t(virtual_tokens));  // the fixture's text is cut
    // The table as PromptRuntime reads it: from the model's files.
    const auto table = p.model->read_parameter(io::ModelWeights::open(train_dir(name)), "embed.weight");
    p.prompt->init_from_tokens(adapters::prompt_init_ids(ids, virtual_tokens), table.data());
    auto expected = io::SafetensorsFile::open(train_dir(name + "_prompt") / "expected.safetensors");
    CHECK(p.values() == read<float>(expected, "init"));
  }
}

TEST_CASE("prompt tuning matches PEFT in float32: loss and logits within 1e-5, the prompt's gradient within 1e-4") {
  for (const std::string name : models_under_test) check_against_peft<float>(name, 1e-5, 1e-5, 1e-4);
}

TEST_CASE("prompt tuning matches PEFT in float64") {
  for (const std::string name : models_under_test) check_against_peft<double>(name, 1e-6, 1e-6, 1e-5);
}

TEST_CASE("the prompt's gradient agrees with finite differences") {
  for (const std::string name : models_under_test) {
    CAPTURE(name);
    Prompted<double> p(name);
    const models::Batch batch = fixture_batch(name);
    p.prompt->parameters().zero_grads();
    p.model->forward_backward(batch, {.token_count = double(batch.scored_tokens())});
    const index_t n = virtual_tokens * p.model->config().hidden_size;
    double scale = 0;
    for (index_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(p.prompt->grads()[i]));
    REQUIRE(scale > 0);
    std::vector<double> x = p.values(), analytic(p.prompt->grads(), p.prompt->grads() + n);
    for (double& g : analytic) g /= scale;
    auto loss = [&] {
      std::copy(x.begin(), x.end(), p.prompt->values());
      return loss_of(p, batch) / scale;
    };
    testing::expect_gradient("prompt_embeddings", x, analytic, loss, {.eps = 1e-5, .tolerance = 1e-6, .max_samples = 24});
  }
}

TEST_CASE("save_peft_prompt then load_peft_prompt is bit-exact and writes PEFT's tensor and config") {
  for (const std::string name : models_under_test) {
    CAPTURE(name);
    testing::TempDir dir("ft_prompt_roundtrip");
    Prompted<float> a(name);
    adapters::save_peft_prompt(*a.prompt, a.model->config(), {"tests/fixtures/train/" + name, init_text}, dir.path);

    Prompted<float> b(name, false);
    CHECK(b.values() != a.values());
    adapters::load_peft_prompt(*b.prompt, b.model->config(), dir.path);
    CHECK(b.values() == a.values());

    // The same tensor bytes as PEFT's file, and the same answers to every key PEFT's config has that matter.
    const fs::path peft = train_dir(name + "_prompt") / "adapter";
    auto ours = io::SafetensorsFile::open(dir / "adapter_model.safetensors");
    auto theirs = io::SafetensorsFile::open(peft / "adapter_model.safetensors");
    REQUIRE(ours.tensors().size() == 1);
    const io::TensorView* mine = ours.find("prompt_embeddings");
    const io::TensorView* want = theirs.find("prompt_embeddings");
    REQUIRE(mine != nullptr);
    CHECK(mine->shape == want->shape);
    CHECK((mine->bytes.size() == want->bytes.size() &&
           std::memcmp(mine->bytes.data(), want->bytes.data(), want->bytes.size()) == 0));
    const nlohmann::json c = io::read_json_file(dir / "adapter_config.json");
    const nlohmann::json peft_config = io::read_json_file(peft / "adapter_config.json");
    for (const char* key : {"peft_type", "task_type", "num_virtual_tokens", "token_dim", "num_transformer_submodules",
                            "num_attention_heads", "num_layers", "prompt_tuning_init", "prompt_tuning_init_text",
                            "tokenizer_name_or_path", "base_model_name_or_path", "inference_mode"}) {
      CAPTURE(key);
      CHECK(c.at(key) == peft_config.at(key));
    }
  }
}

TEST_CASE("load_peft_prompt refuses adapters that are not this prompt") {
  Prompted<float> p("tiny_llama", false);
  CHECK_THROWS_WITH_AS(adapters::load_peft_prompt(*p.prompt, p.model->config(),
                                                  train_dir("tiny_llama_lora") / "adapter"),
                       doctest::Contains("peft_type \"LORA\" is not a prompt-tuning adapter"), Error);
  models::Transformer<float> other(models::read_model_spec(train_dir("tiny_llama")), false);
  adapters::PromptTuning<float> longer(other, virtual_tokens + 2, 1);
  CHECK_THROWS_WITH_AS(adapters::load_peft_prompt(longer, other.config(), train_dir("tiny_llama_prompt") / "adapter"),
                       doctest::Contains("num_virtual_tokens 6 differs from this run's 8"), Error);
}

TEST_CASE("virtual tokens need an adapter to fill them, and cannot be packed") {
  models::Transformer<float> model(models::read_model_spec(train_dir("tiny_llama")), false);
  models::Batch batch = models::causal_lm_batch(1, 8, std::vector<std::int32_t>(8, 3));
  batch.virtual_tokens = 2;
  CHECK_THROWS_WITH_AS(model.forward_backward(batch, {.backward = false}),
                       doctest::Contains("no prompt adapter is attached"), Error);

  std::vector<data::Example> examples(4, data::Example{{3, 4, 5}, {3, 4, 5}, 1});
  CHECK_THROWS_WITH_AS(data::BatchPlan(examples, 2, 16, true, 0, 1, data::Cover::epochs, 4),
                       doctest::Contains("0 when packing"), Error);
  // Unpacked, every row starts with the placeholders, labelled -100, and positions count through them.
  const models::Batch b = data::BatchPlan(examples, 2, 16, false, 0, 1, data::Cover::epochs, 4).batch(0);
  CHECK(b.virtual_tokens == 4);
  CHECK(b.T == 4 + 8);
  CHECK(b.input_ids[0] == 0);
  CHECK(b.input_ids[4] == 3);
  CHECK(b.positions[4] == 4);
  CHECK(b.targets[3] == 3);  // the last virtual token predicts the first real token's label
  CHECK(b.targets[2] == -100);
}

}  // namespace test_prompt_tuning
