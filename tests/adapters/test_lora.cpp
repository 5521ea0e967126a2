// LoRA against PEFT on the tiny training models: loss, logits and every
// lora_A / lora_B gradient, in float and double; finite differences with
// dropout on; adapter files that round-trip bit for bit (and match PEFT's
// own file); merging; and which modules a target list names.
//
// Fixtures come from tools/make_train_fixtures.py: a PEFT adapter (r 4,
// alpha 8, random B) on tests/fixtures/train/tiny_{llama,neox}, and PEFT's
// float64 results on a fixed 2 x 12 batch. Tolerances are the parity test's
// (tests/models/test_parity.cpp): whole tensors, max |ft - hf| / max |hf|.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/compare.hpp"
#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/models/load.hpp>

#include "support/files.hpp"
#include "support/peft_reference.hpp"
#include "support/finite_difference.hpp"

namespace test_lora {

using namespace ft;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* model;
  std::vector<std::string> targets;
};

const Case llama{"tiny_llama", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}};
const Case neox{"tiny_neox", {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}};
const Case* const cases[] = {&llama, &neox};

fs::path train_dir(const std::string& name) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/train" / name; }
fs::path adapter_dir(const Case& c) { return train_dir(std::string(c.model) + "_lora") / "adapter"; }

adapters::LoraOptions options_of(const Case& c, double dropout = 0.0) {
  return {.r = 4, .alpha = 8, .dropout = dropout, .target_modules = c.targets, .seed = 7};
}

// A frozen tiny model with the fixture's adapter loaded.
template <class T>
struct Adapted {
  std::unique_ptr<models::Transformer<T>> model;
  std::unique_ptr<adapters::LoraModel<T>> lora;

  explicit Adapted(const Case& c, double dropout = 0.0, bool load_adapter = true) {
    model = std::make_unique<models::Transformer<T>>(models::read_model_spec(train_dir(c.model)), false);
    model->load(io::ModelWeights::open(train_dir(c.model)));
    lora = std::make_unique<adapters::LoraModel<T>>(*model, options_of(c, dropout));
    if (load_adapter) adapters::load_peft_adapter(*lora, model->config(), adapter_dir(c));
  }

  void zero_grads() {
    for (auto& b : lora->blocks()) b->parameters().zero_grads();
  }
};

models::Batch fixture_batch(const Case& c) {
  const nlohmann::json j = io::read_json_file(train_dir(std::string(c.model) + "_lora") / "batch.json");
  std::vector<std::int32_t> ids, labels;
  for (const auto& row : j["input_ids"])
    for (const auto& v : row) ids.push_back(v.get<std::int32_t>());
  for (const auto& row : j["labels"])
    for (const auto& v : row) labels.push_back(v.get<std::int32_t>());
  const index_t B = index_t(j["input_ids"].size());
  return models::causal_lm_batch(B, index_t(ids.size()) / B, ids, labels);
}

using ft::testing::relative_error;
template <class T>
std::vector<T> read(const io::SafetensorsFile& file, const std::string& name) {
  return ft::testing::read_tensor<T>(file, name);
}

template <class T>
void check_against_peft(const Case& c, ft::testing::PeftTolerance tol) {
  const std::string model_name = c.model;
  CAPTURE(model_name);
  auto expected = io::SafetensorsFile::open(train_dir(std::string(c.model) + "_lora") / "expected.safetensors");
  Adapted<T> a(c);
  const models::Batch batch = fixture_batch(c);
  REQUIRE(batch.scored_tokens() == 17);  // 2 x 11 shifted targets, 3 + 2 masked
  const std::size_t compared = ft::testing::check_against_peft_reference(*a.model, *a.lora, batch, expected, tol);
  // Every gradient PEFT computed was compared, and the base model kept none.
  CHECK(compared == expected.tensors().size() - 2);
  CHECK(a.model->blocks()[0].parameters().grad("qkv.weight") == nullptr);
}

// The adapted model's mean loss over the batch, without backward.
template <class T>
double loss_of(Adapted<T>& a, const models::Batch& batch) {
  const double count = double(batch.scored_tokens());
  return a.model->forward_backward(batch, {.token_count = count, .backward = false}) / count;
}

}  // namespace

TEST_CASE("LoRA matches PEFT in float32: loss and logits within 1e-5, every A and B gradient within 1e-4") {
  for (const Case* c : cases) check_against_peft<float>(*c, {1e-5, 1e-5, 1e-4});
}

TEST_CASE("LoRA matches PEFT in float64") {
  // As in the parity test, HF keeps rotary angles, softmax and the loss in
  // float32 inside a float64 model, so agreement stops near float32 precision.
  for (const Case* c : cases) check_against_peft<double>(*c, {1e-6, 1e-6, 1e-5});
}

TEST_CASE("LoRA gradients with dropout agree with finite differences") {
  // Dropout 0.1 while training, one fixed micro-batch key: the masks are a
  // function of the key, so every loss evaluation sees the same ones.
  for (const Case* c : cases) {
    const std::string model_name = c->model;
    CAPTURE(model_name);
    Adapted<double> a(*c, 0.1);
    const models::Batch batch = fixture_batch(*c);
    a.lora->set_dropout(false, 0);
    const double without = loss_of(a, batch);
    a.lora->set_dropout(true, 0x5eed);
    CHECK(std::abs(loss_of(a, batch) - without) > 1e-6);  // the masks do change the model

    a.zero_grads();
    const double count = double(batch.scored_tokens());
    a.model->forward_backward(batch, {.token_count = count});

    // Several modules of each layer, both A and B: layer 0's gradients also
    // pass back through layer 1's dropped-out LoRA inputs.
    const index_t r = a.lora->options().r;
    std::size_t checked = 0;
    for (auto& block : a.lora->blocks())
      for (std::size_t k = 0; k < block->targets().size(); k += 2) {
        const adapters::LoraTarget& t = block->targets()[k];
        for (bool is_a : {true, false}) {
          double* values = is_a ? block->a_of(k) : block->b_of(k);
          const double* grads = is_a ? block->da_of(k) : block->db_of(k);
          const std::size_t n = std::size_t(is_a ? r * t.in : t.rows * r);
          // Compared relative to the largest gradient entry of the matrix.
          double scale = 0;
          for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(grads[i]));
          REQUIRE(scale > 0);
          std::vector<double> x(values, values + n), analytic(grads, grads + n);
          for (double& g : analytic) g /= scale;
          auto loss = [&] {
            std::copy(x.begin(), x.end(), values);
            return loss_of(a, batch) / scale;
          };
          const std::string name = t.module + (is_a ? ".lora_A" : ".lora_B");
          testing::expect_gradient(name.c_str(), x, analytic, loss, {.eps = 1e-5, .tolerance = 1e-6, .max_samples = 6});
          std::copy(x.begin(), x.end(), values);
          ++checked;
        }
      }
    CHECK(checked >= 8);
  }
}

namespace {

// Saves the fixture's adapter from ft in `dtype` and loads it into a fresh LoRA.
template <class T>
void check_round_trip(const Case& c, const std::string& dtype) {
  CAPTURE(dtype);
  testing::TempDir dir("ft_lora_roundtrip");
  Adapted<T> a(c);
  adapters::save_peft_adapter(*a.lora, a.model->config(), c.model, dir.path, dtype);

  // A fresh LoRA (its own random A, zero B) loads it back exactly.
  Adapted<T> b(c, 0.0, false);
  auto same = [&](std::size_t i) {
    auto& want = a.lora->blocks()[i]->parameters().values();
    auto& got = b.lora->blocks()[i]->parameters().values();
    return want.numel() == got.numel() &&
           std::memcmp(want.data(), got.data(), std::size_t(want.numel()) * sizeof(T)) == 0;
  };
  for (std::size_t i = 0; i < b.lora->blocks().size(); ++i) CHECK(!same(i));
  adapters::load_peft_adapter(*b.lora, b.model->config(), dir.path);
  for (std::size_t i = 0; i < b.lora->blocks().size(); ++i) CHECK(same(i));

  auto ours = io::SafetensorsFile::open(dir / "adapter_model.safetensors");
  for (const io::TensorView& t : ours.tensors()) CHECK(t.dtype == dtype);
  const nlohmann::json config = io::read_json_file(dir / "adapter_config.json");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"] == 8.0);
  std::set<std::string> leaves(config["target_modules"].begin(), config["target_modules"].end());
  CHECK(leaves == std::set<std::string>(c.targets.begin(), c.targets.end()));
  if (dtype != "F32") return;

  // In float32 the file holds PEFT's own tensors byte for byte: B's rows went back to HF's order.
  auto peft = io::SafetensorsFile::open(adapter_dir(c) / "adapter_model.safetensors");
  CHECK(ours.tensors().size() == peft.tensors().size());
  for (const io::TensorView& t : peft.tensors()) {
    CAPTURE(t.name);
    const io::TensorView* mine = ours.find(t.name);
    REQUIRE(mine != nullptr);
    CHECK(mine->shape == t.shape);
    CHECK((mine->bytes.size() == t.bytes.size() &&
           std::memcmp(mine->bytes.data(), t.bytes.data(), t.bytes.size()) == 0));
  }
}

}  // namespace

TEST_CASE("save_peft_adapter then load_peft_adapter is bit-exact, and writes PEFT's own tensors") {
  for (const Case* c : cases) {
    const std::string model_name = c->model;
    CAPTURE(model_name);
    check_round_trip<float>(*c, "F32");
    check_round_trip<bf16>(*c, "BF16");
  }
}

TEST_CASE("merge_into_model gives the adapted model's logits") {
  for (const Case* c : cases) {
    const std::string model_name = c->model;
    CAPTURE(model_name);
    const models::Batch batch = fixture_batch(*c);
    auto logits_of = [&](models::Transformer<float>& model) {
      std::vector<float> logits(std::size_t(batch.rows() * model.config().vocab_size));
      model.forward_backward(batch, {.backward = false}, logits.data());
      return logits;
    };
    Adapted<float> a(*c, 0.1);
    a.lora->set_dropout(false, 0);  // dropout off: the merged model has none
    const std::vector<float> adapted = logits_of(*a.model);
    a.lora->merge_into_model();  // also detaches the adapters: the merged weights stand alone
    const std::vector<float> merged = logits_of(*a.model);
    CHECK(relative_error(merged, adapted) <= 1e-5);

    Adapted<float> base(*c, 0.0, false);
    base.lora.reset();
    CHECK(relative_error(logits_of(*base.model), adapted) > 1e-2);  // the adapter does move the logits
  }
}

TEST_CASE("lora_targets: all-linear covers every projection; unknown names are errors") {
  for (const Case* c : cases) {
    const std::string model_name = c->model;
    CAPTURE(model_name);
    const models::ModelSpec spec = models::read_model_spec(train_dir(c->model));
    const auto all = adapters::lora_targets(spec, {"all-linear"});
    CHECK(all.size() == c->targets.size() * std::size_t(spec.config.num_layers));
    std::set<std::string> leaves;
    for (const auto& t : all) leaves.insert(t.module.substr(t.module.rfind('.') + 1));
    CHECK(leaves == std::set<std::string>(c->targets.begin(), c->targets.end()));
    // The named list adapts the same modules, rows and widths.
    const auto named = adapters::lora_targets(spec, c->targets);
    REQUIRE(named.size() == all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      CHECK(named[i].module == all[i].module);
      CHECK(named[i].rows == all[i].rows);
    }
    // Each fused slot is covered exactly once, row for row.
    for (index_t layer = 0; layer < spec.config.num_layers; ++layer)
      for (auto slot : {models::LinearSlot::qkv, models::LinearSlot::o, models::LinearSlot::mlp_in,
                        models::LinearSlot::mlp_out}) {
        index_t covered = 0, width = -1;
        for (const auto& t : all)
          if (t.layer == layer && t.slot == slot) covered += t.rows, width = t.out;
        CHECK(covered == width);
      }
  }
  // Llama's rows, by hand: hidden 32, 4 heads of 8, 2 KV heads, ffn 64.
  const auto llama_targets = adapters::lora_targets(models::read_model_spec(train_dir("tiny_llama")), {"all-linear"});
  auto find = [&](const std::string& module) {
    return *std::ranges::find_if(llama_targets, [&](const auto& t) { return t.module == module; });
  };
  CHECK(find("model.layers.1.self_attn.v_proj").row_offset == 48);
  CHECK(find("model.layers.1.self_attn.v_proj").rows == 16);
  CHECK(find("model.layers.0.mlp.up_proj").row_offset == 64);
  CHECK(find("model.layers.0.mlp.down_proj").in == 64);

  const models::ModelSpec spec = models::read_model_spec(train_dir("tiny_neox"));
  const std::string msg = testing::error_of([&] { adapters::lora_targets(spec, {"query_key_value", "q_proj"}); });
  CHECK(msg.find("lora.target_modules: \"q_proj\" matches no projection of this GPTNeoXForCausalLM model") !=
        std::string::npos);
  models::Transformer<float> model(spec, false);
  CHECK_THROWS_WITH_AS(adapters::LoraModel<float>(model, {.target_modules = {"c_attn"}}),
                       doctest::Contains("\"c_attn\""), Error);
}

TEST_CASE("rank_pattern and alpha_pattern give modules their own rank and alpha, and PEFT's files carry them") {
  const fs::path dir = train_dir("tiny_llama");
  models::Transformer<float> model(models::read_model_spec(dir), false);
  adapters::LoraOptions o = options_of(llama);
  o.rank_pattern = {{"layers\\.1\\.mlp\\.down_proj", 6}, {"q_proj", 2}};
  o.alpha_pattern = {{"v_proj", 3.0}};
  adapters::LoraModel<float> lora(model, o);
  std::size_t checked = 0;
  for (auto& block : lora.blocks())
    for (std::size_t k = 0; k < block->targets().size(); ++k, ++checked) {
      const adapters::LoraTarget& t = block->targets()[k];
      CAPTURE(t.module);
      const std::string leaf = t.module.substr(t.module.rfind('.') + 1);
      const index_t rank = leaf == "q_proj" ? 2 : t.module == "model.layers.1.mlp.down_proj" ? 6 : 4;
      const double alpha = leaf == "v_proj" ? 3.0 : 8.0;
      CHECK(block->rank_of(k) == rank);
      CHECK(block->scale_of(k) == alpha / double(rank));
    }
  CHECK(checked == 14);

  ft::testing::TempDir out("ft_lora_patterns");
  adapters::save_peft_adapter(lora, model.config(), dir.string(), out.path, "F32");
  const nlohmann::json config = io::read_json_file(out / "adapter_config.json");
  CHECK(config["rank_pattern"] == nlohmann::json{{"layers\\.1\\.mlp\\.down_proj", 6}, {"q_proj", 2}});
  CHECK(config["alpha_pattern"] == nlohmann::json{{"v_proj", 3.0}});
  // Read back as PEFT reads it: each module's rank from its pattern, and the same options.
  const io::PeftAdapter peft = io::PeftAdapter::open(out.path);
  for (const io::LoraModule& m : peft.modules())
    if (m.module == "model.layers.0.self_attn.v_proj") CHECK(m.scale == 3.0 / 4.0);
  const adapters::LoraOptions read = adapters::lora_options_of(peft);
  CHECK(read.rank_pattern == o.rank_pattern);
  CHECK(read.alpha_pattern == o.alpha_pattern);
  models::Transformer<float> again_model(models::read_model_spec(dir), false);
  adapters::LoraModel<float> again(again_model, read);
  adapters::load_peft_adapter(again, again_model.config(), out.path);
  for (std::size_t b = 0; b < lora.blocks().size(); ++b)
    for (std::size_t k = 0; k < lora.blocks()[b]->targets().size(); ++k) {
      const index_t n = lora.blocks()[b]->rank_of(k) * lora.blocks()[b]->targets()[k].in;
      CHECK(std::equal(lora.blocks()[b]->a_of(k), lora.blocks()[b]->a_of(k) + n, again.blocks()[b]->a_of(k)));
    }

  // Two keys that name one module with different values: PEFT would take the first it was given, a table has no order.
  adapters::LoraOptions ambiguous = options_of(llama);
  ambiguous.rank_pattern = {{"q_proj", 2}, {"self_attn\\.q_proj", 3}};
  CHECK_THROWS_WITH_AS(adapters::LoraModel<float>(model, ambiguous),
                       doctest::Contains("lora.rank_pattern: \"q_proj\" and \"self_attn\\.q_proj\" both name "
                                         "\"model.layers.0.self_attn.q_proj\" with different values"),
                       Error);
  ambiguous.rank_pattern = {{"q_proj", 2}, {"self_attn\\.q_proj", 2}};
  CHECK_NOTHROW(adapters::LoraModel<float>(model, ambiguous));
  ambiguous.rank_pattern = {{"q_proj(", 2}};
  CHECK_THROWS_WITH_AS(adapters::LoraModel<float>(model, ambiguous),
                       doctest::Contains("lora.rank_pattern: \"q_proj(\" is not a regular expression"), Error);
}

TEST_CASE("load_peft_adapter refuses an adapter that does not fit this LoRA") {
  const fs::path dir = train_dir("tiny_llama");
  models::Transformer<float> model(models::read_model_spec(dir), false);
  auto error_with = [&](adapters::LoraOptions options) {
    adapters::LoraModel<float> lora(model, options);
    return testing::error_of([&] { adapters::load_peft_adapter(lora, model.config(), adapter_dir(llama)); });
  };
  adapters::LoraOptions fewer = options_of(llama);
  fewer.target_modules = {"q_proj"};
  CHECK(error_with(fewer).find("has 14 LoRA modules, this run adapts 2") != std::string::npos);
  adapters::LoraOptions wider = options_of(llama);
  wider.r = 8;
  CHECK(error_with(wider).find("do not match rank 8") != std::string::npos);
  adapters::LoraOptions stronger = options_of(llama);
  stronger.alpha = 16;
  const std::string scaled = error_with(stronger);
  CHECK(scaled.find("model.layers.0.self_attn.q_proj") != std::string::npos);
  CHECK(scaled.find("scale 2") != std::string::npos);
  CHECK(scaled.find("scale 4") != std::string::npos);
}

}  // namespace test_lora
