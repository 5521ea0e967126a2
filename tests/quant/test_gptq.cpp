// GPTQ checkpoints in GPTQModel's format (tools/make_gptq_fixtures.py: 2-,
// 4- and 8-bit, groups of 16 and 32 and one for the whole input, with and
// without act-order, both checkpoint formats): ft's dequantized weights
// equal the reference formula's to the bit, a GPTQ model computes what its
// dequantized weights compute, and damaged checkpoints are refused.
#include <doctest/doctest.h>

#include <bit>
#include <fstream>
#include <span>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/files.hpp"
#include <ft/io/hf_config.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/packed_weights.hpp>
#include <ft/models/load.hpp>

namespace test_gptq {

namespace fs = std::filesystem;
using namespace ft;

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures/gptq";
const char* const cases[] = {"tiny_llama_4bit_g16", "tiny_llama_4bit_desc_act", "tiny_llama_8bit_v2", "tiny_llama_2bit"};

std::vector<float> logits_of(const fs::path& dir) {
  auto model = std::make_unique<models::Transformer<float>>(models::read_model_spec(dir), false);
  model->load(io::ModelWeights::open(dir));
  const models::Batch batch = models::causal_lm_batch(2, 5, {1, 7, 9, 300, 2, 4, 8, 15, 16, 23},
                                                      {7, 9, 300, 2, -100, 8, 15, 16, 23, 42});
  std::vector<float> logits(std::size_t(batch.rows() * model->config().vocab_size));
  model->forward_backward(batch, {.token_count = double(batch.scored_tokens()), .backward = false}, logits.data());
  return logits;
}

TEST_CASE("gptq: dequantized weights equal the reference formula's to the bit, every format and width") {
  for (const char* name : cases) {
    CAPTURE(name);
    const io::ModelWeights packed = io::ModelWeights::open(fixtures / name);
    const io::ModelWeights reference = io::ModelWeights::open(fixtures / name / "dequantized");
    std::size_t modules = 0;
    for (const std::string& weight : reference.names()) {
      if (!io::stored_packed(packed, weight)) continue;
      CAPTURE(weight);
      const auto w = io::read_packed(packed, weight);
      const io::TensorView& want = reference.at(weight);
      REQUIRE(w->hf_shape() == want.shape);
      std::vector<float> got(std::size_t(want.numel())), expected(std::size_t(want.numel()));
      w->dequantize(got);
      io::copy_elements(reference, weight, expected.data(), want.numel());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(expected[i]);
      CHECK(differ == 0);
      ++modules;
    }
    CHECK(modules == 14);  // seven linear modules in each of two layers
  }
}

TEST_CASE("gptq: a GPTQ model keeps its layers packed and computes what its dequantized weights compute") {
  for (const char* name : cases) {
    CAPTURE(name);
    auto model = std::make_unique<models::Transformer<float>>(models::read_model_spec(fixtures / name), false);
    model->load(io::ModelWeights::open(fixtures / name));
    CHECK(model->quantized());
    CHECK(model->stage_parameters(0).values().data() == nullptr);
    CHECK(logits_of(fixtures / name) == logits_of(fixtures / name / "dequantized"));
  }
}

TEST_CASE("gptq: unsupported widths, damaged states and a missing config are refused in one line") {
  ft::testing::TempDir tmp("ft_gptq");
  const fs::path source = fixtures / "tiny_llama_4bit_g16";
  auto copy_with = [&](const std::string& dir, const nlohmann::json& quantization,
                       const std::string& tensor = "", const std::vector<std::int32_t>& values = {}) {
    const fs::path out = tmp.path / dir;
    fs::create_directories(out);
    nlohmann::json config = io::read_json_file(source / "config.json");
    if (quantization.is_null()) config.erase("quantization_config");
    else config["quantization_config"].merge_patch(quantization);
    std::ofstream(out / "config.json") << config.dump();
    const io::SafetensorsFile file = io::SafetensorsFile::open(source / "model.safetensors");
    std::vector<io::TensorToWrite> tensors;
    for (const io::TensorView& t : file.tensors())
      if (t.name == tensor) tensors.push_back({t.name, t.dtype, {std::int64_t(values.size())}, std::as_bytes(std::span(values)), {}});
      else tensors.push_back({t.name, t.dtype, t.shape, t.bytes, {}});
    io::write_safetensors(out / "model.safetensors", tensors);
    return ft::testing::error_of([&] { (void)logits_of(out); });
  };
  CHECK(copy_with("three_bits", {{"bits", 3}}).find("GPTQ with bits = 3 is not supported; ft reads 2-, 4- and 8-bit") !=
        std::string::npos);
  CHECK(copy_with("format", {{"checkpoint_format", "marlin"}}).find("GPTQ checkpoint_format \"marlin\" is not supported") !=
        std::string::npos);
  std::vector<std::int32_t> groups(32, 0);
  groups[5] = 9;
  CHECK(copy_with("g_idx", nlohmann::json::object(), "model.layers.0.self_attn.q_proj.g_idx", groups)
            .find("the GPTQ state of \"model.layers.0.self_attn.q_proj\" names group 9 in g_idx, but scales has 2") !=
        std::string::npos);
  CHECK(copy_with("short_g_idx", nlohmann::json::object(), "model.layers.1.mlp.down_proj.g_idx", groups)
            .find("has g_idx of 32 rows for 64 inputs") != std::string::npos);
  CHECK(copy_with("no_config", nullptr).find("names no GPTQ quantization_config") != std::string::npos);
}

}  // namespace test_gptq
