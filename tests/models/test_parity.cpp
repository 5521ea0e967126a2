// Parity with HF Transformers on tiny random models of each family: logits,
// loss and every parameter gradient. Fixtures come from
// tools/make_parity_fixtures.py (HF run in float64, stored as float32).
//
// Tolerances compare whole tensors: max |ft - hf| / max |hf|. Element-wise
// relative error is meaningless for entries near zero (HF's own float32 run
// is 0.4% off its float64 run on such entries).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "support/compare.hpp"
#include "support/files.hpp"
#include <ft/io/model_weights.hpp>
#include <ft/models/load.hpp>
#include <ft/models/save.hpp>

namespace test_parity {

using namespace ft;
namespace fs = std::filesystem;

namespace {

const char* const cases[] = {"llama_gqa",       "smollm2_tied",  "llama3_rope_scaling", "qwen2_bias",
                             "mistral_sliding", "neox_parallel", "neox_sequential",     "qwen3_qk_norm",
                             "granite_multipliers", "phi3_fused",          "phi3_longrope",
                             "phi3_longrope_long",
                             "gpt_bigcode_mqa",     "gpt_bigcode_mha",     "bloom_alibi",
                             "bloom_six_heads",     "gemma_geglu",      "gemma2_softcap",
                             "gemma3_local_global", "gemma3_vision_text", "mixtral_top2",
                             "qwen2_moe_shared",    "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared"};

fs::path fixture(const std::string& name) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / name; }

using ft::testing::relative_error;
template <class T>
std::vector<T> read(const io::SafetensorsFile& file, const std::string& name) {
  return ft::testing::read_tensor<T>(file, name);
}

struct Tolerance {
  double loss, logits, gradient;
};

struct Result {
  double loss;
  std::vector<float> logits;
};

// Runs the fixture's batch through ft in element type T and compares with HF.
template <class T>
void check_case(const std::string& name, Tolerance tol) {
  CAPTURE(name);
  auto expected = io::SafetensorsFile::open(fixture(name) / "expected.safetensors");
  auto model = models::load_pretrained<T>(fixture(name));
  const io::TensorView& ids_view = expected.at("input_ids");
  const index_t B = ids_view.shape[0], T_ = ids_view.shape[1], V = model->config().vocab_size;
  auto ids64 = read<std::int64_t>(expected, "input_ids");
  auto labels64 = read<std::int64_t>(expected, "labels");
  models::Batch batch = models::causal_lm_batch(B, T_, std::vector<std::int32_t>(ids64.begin(), ids64.end()),
                                                std::vector<std::int32_t>(labels64.begin(), labels64.end()));
  std::vector<T> logits(std::size_t(B * T_ * V));
  model->zero_grads();
  double count = double(batch.scored_tokens());
  double loss = model->forward_backward(batch, {.token_count = count}, logits.data()) / count;

  double want_loss = read<float>(expected, "loss")[0];
  CHECK(std::abs(loss - want_loss) / want_loss <= tol.loss);
  CHECK(relative_error(logits, read<float>(expected, "logits")) <= tol.logits);

  std::size_t compared = 0;
  for (const io::TensorView& t : expected.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    std::string param = t.name.substr(5);
    CAPTURE(param);
    CHECK(relative_error(model->hf_gradient(param), read<float>(expected, t.name)) <= tol.gradient);
    ++compared;
  }
  // Every tensor ft loads has a gradient in the fixture, and the reverse.
  CHECK(compared == model->spec().weights.size());
}

}  // namespace

TEST_CASE("HF parity in float32: logits and loss within 1e-5, gradients within 1e-4") {
  for (const char* name : cases) check_case<float>(name, {1e-5, 1e-5, 1e-4});
}

TEST_CASE("HF parity in float64: ft's double build agrees with HF's float64 run") {
  // HF keeps rotary angles, attention softmax and the loss in float32 even in
  // a float64 model, so agreement stops near float32 precision.
  for (const char* name : cases) check_case<double>(name, {1e-6, 1e-6, 1e-5});
}

TEST_CASE("bf16 storage with float32 accumulation stays within bf16's tolerances of float32") {
  // bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%); weights,
  // activations and gradients are all stored in it, so errors compound
  // through two blocks. Measured worst cases on these fixtures are stated in
  // docs/design.md; the bounds are a little above them.
  // The Gemma 2 and 3 fixtures are harder on bf16: logits soft-capped at 2.5
  // (small logits, so the same rounding is a larger part of them), and every
  // query and key head renormalised from bf16 values in three blocks. By this
  // measure (the largest difference over the largest value) HF's own bf16 runs
  // of them are 0.027 and 0.056 off the float64 logits, and 0.12 off Gemma 3's
  // worst gradient; ft's are 0.034, 0.033 and 0.15. The same text model
  // under Gemma3ForConditionalGeneration, with other random weights: HF's
  // 0.035 and 0.17 (the embedding's gradient), ft's 0.044 and 0.23.
  for (const std::string name : cases) {
    const bool vision = name == "gemma3_vision_text", gemma3 = vision || name == "gemma3_local_global";
    const bool gemma2_block = name == "gemma2_softcap" || gemma3;
    check_case<bf16>(name, {2e-3, vision ? 5e-2 : gemma2_block ? 4e-2 : 3e-2, vision ? 0.25 : gemma3 ? 0.2 : 6e-2});
  }
}

TEST_CASE("a packed row of two documents equals the two documents run apart") {
  // Rotary positions with a sliding window; learned positions, which restart at each document too; ALiBi's
  // distances, which never cross a document's start.
  for (const char* name : {"mistral_sliding", "gpt_bigcode_mqa", "bloom_six_heads"}) {
  CAPTURE(name);
  auto model = models::load_pretrained<double>(fixture(name));
  const index_t V = model->config().vocab_size;
  std::vector<std::int32_t> first{5, 9, 1, 33, 7, 2, 60, 11}, second{3, 14, 15, 92, 65, 35};
  std::vector<std::int32_t> packed = first;
  packed.insert(packed.end(), second.begin(), second.end());
  std::vector<std::int32_t> documents(first.size(), 0);
  documents.resize(packed.size(), 1);
  for (auto& id : packed) id %= std::int32_t(V);

  auto run = [&](const models::Batch& batch, double count) {
    model->zero_grads();
    return model->forward_backward(batch, {.token_count = count});
  };
  auto gradients = [&] {
    std::vector<float> all;
    for (const auto& w : model->spec().weights) {
      auto g = model->hf_gradient(w.hf_name);
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  const double count = double(first.size() - 1 + second.size() - 1);
  double packed_loss = run(models::causal_lm_batch(1, index_t(packed.size()), packed, {}, documents), count);
  auto packed_grads = gradients();

  std::vector<std::int32_t> a(packed.begin(), packed.begin() + std::ptrdiff_t(first.size()));
  std::vector<std::int32_t> b(packed.begin() + std::ptrdiff_t(first.size()), packed.end());
  model->zero_grads();
  double apart = model->forward_backward(models::causal_lm_batch(1, index_t(a.size()), a), {.token_count = count});
  apart += model->forward_backward(models::causal_lm_batch(1, index_t(b.size()), b), {.token_count = count});
  auto apart_grads = gradients();

  CHECK(packed_loss == doctest::Approx(apart).epsilon(1e-12));
  CHECK(relative_error(packed_grads, apart_grads) < 1e-6);  // grads read back as float
  }
}

TEST_CASE("a batch reaching original_max_position_embeddings takes LongRoPE's long factors at every position") {
  auto model = models::load_pretrained<float>(fixture("phi3_longrope"));
  const index_t limit = model->config().rope.position_limit, V = model->config().vocab_size;
  REQUIRE(limit == 48);
  auto logits = [&](index_t T) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(T));
    for (index_t i = 0; i < T; ++i) ids[std::size_t(i)] = std::int32_t(3 + (i * 7) % 80);
    std::vector<float> out(static_cast<std::size_t>(T * V));
    model->forward_backward(models::causal_lm_batch(1, T, ids), {.backward = false}, out.data());
    return out;
  };
  // Causal attention: the first `limit` rows see the same tokens either way, so only the frequencies differ.
  const std::vector<float> below = logits(limit), reaching = logits(limit + 1);
  auto row_difference = [&](index_t row) {
    double worst = 0;
    for (index_t v = 0; v < V; ++v)
      worst = std::max(worst, double(std::abs(below[std::size_t(row * V + v)] - reaching[std::size_t(row * V + v)])));
    return worst;
  };
  CHECK(row_difference(0) == 0);  // position 0 does not rotate
  for (index_t row : {index_t(1), index_t(20), limit - 1}) {
    CAPTURE(row);
    CHECK(row_difference(row) > 1e-4);
  }
}

TEST_CASE("learned positions run up to n_positions and refuse a position past it in one line") {
  auto model = models::load_pretrained<float>(fixture("gpt_bigcode_mqa"));
  const index_t rows = model->config().position_embeddings;
  REQUIRE(rows == 48);
  auto run = [&](index_t T) {
    std::vector<std::int32_t> ids(std::size_t(T), 5);
    model->zero_grads();
    return model->forward_backward(models::causal_lm_batch(1, T, ids), {.token_count = double(T - 1)});
  };
  CHECK(std::isfinite(run(rows)));
  CHECK_THROWS_WITH_AS(run(rows + 1),
                       doctest::Contains("position 48 is past the model's learned positions (n_positions = 48)"),
                       Error);
}

TEST_CASE("model directories with problems give one-line errors") {
  fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures";
  CHECK_THROWS_WITH_AS(models::read_model_spec(fixtures / "models/unknown-arch"),
                       doctest::Contains("architecture \"FalconForCausalLM\" is not supported; supported: "
                                         "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                         "GraniteForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, "
                                         "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, GraniteMoeForCausalLM, "
                                         "GraniteMoeSharedForCausalLM, "
                                         "GPTNeoXForCausalLM, Phi3ForCausalLM, "
                                         "GPTBigCodeForCausalLM, BloomForCausalLM"),
                       Error);
  CHECK_THROWS_WITH_AS(models::read_model_spec(fixtures / "no-such-dir"), doctest::Contains("not a model directory"),
                       Error);

  fs::path dir = fs::temp_directory_path() / ("ft-model-errors-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "config.json") << text; };
  write(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8})");
  CHECK_THROWS_WITH_AS(models::read_model_spec(dir), doctest::Contains("missing required field \"intermediate_size\""),
                       Error);
  write(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
  CHECK_THROWS_WITH_AS(models::read_model_spec(dir),
                       doctest::Contains("rope type \"yarn\" is not supported; allowed: default, linear, llama3, longrope"), Error);
  write(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2})");
  CHECK_THROWS_WITH_AS(models::load_pretrained<float>(dir), doctest::Contains("model.safetensors"), Error);

  // A weight file that does not fit the configuration.
  fs::copy_file(fixture("llama_gqa") / "model.safetensors", dir / "model.safetensors");
  CHECK_THROWS_WITH_AS(models::load_pretrained<float>(dir),
                       doctest::Contains("has shape [128, 64], the configuration implies [10, 8]"), Error);
  fs::remove_all(dir);
}

TEST_CASE("a saved model holds the tensors it loaded: bit for bit in f32, rounded once in bf16 and f16") {
  for (const char* name : cases) {
    CAPTURE(name);
    auto model = models::load_pretrained<float>(fixture(name));
    const io::ModelWeights source = io::ModelWeights::open(fixture(name));
    // A tensor read under its binding's other name is written under the binding's own (Gemma 3's
    // language_model.model.* as model.language_model.*); the ones the spec carries keep theirs.
    auto saved_name = [&](const std::string& tensor) {
      for (const models::WeightBinding& w : model->spec().weights)
        if (w.alias == tensor) return w.hf_name;
      return tensor;
    };
    for (const std::string dtype : {"F32", "BF16", "F16"}) {
      CAPTURE(dtype);
      ft::testing::TempDir dir("ft_saved");
      models::save_pretrained(*model, fixture(name), dir.path, dtype);
      const io::ModelWeights saved = io::ModelWeights::open(dir.path);
      CHECK(saved.names().size() == source.names().size());
      for (const std::string& tensor : source.names()) {
        CAPTURE(tensor);
        const io::TensorView& want = source.at(tensor);
        const io::TensorView& got = saved.at(saved_name(tensor));
        CHECK(got.dtype == dtype);
        CHECK(got.shape == want.shape);
        const std::vector<float> values = read<float>(source.file_of(tensor), tensor);
        const std::vector<std::byte> expected = io::encode_floats(values, dtype);
        CHECK(std::equal(got.bytes.begin(), got.bytes.end(), expected.begin(), expected.end()));
      }
    }
  }
}

}  // namespace test_parity
