// 4-bit bases as transformers + bitsandbytes save them, and QLoRA on them
// against PEFT (tools/make_qlora_fixtures.py): ft reads the packed weights
// and writes them back byte for byte, quantizes a full-precision model to
// the same bytes, and its loss, logits and every LoRA gradient over the
// 4-bit base match PEFT's over bitsandbytes.
//
// Tolerances: PEFT runs the 4-bit model in float32 on the CPU; ft's float32
// products add in another order, which moves the last bits (as the float32
// parity tests allow, whole tensors, max |ft - peft| / max |peft|).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/peft_reference.hpp"
#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/bnb_4bit.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/models/load.hpp>

namespace test_qlora {

using namespace ft;
namespace fs = std::filesystem;

struct Case {
  const char* name;
  const char* base;
  quant::FourBitOptions options;
  std::size_t gradients;  // lora_A and lora_B of every linear module
};

const Case cases[] = {
    {"llama_nf4_double", "llama_gqa", {quant::FourBit::nf4, 64, true}, 28},
    {"llama_fp4", "llama_gqa", {quant::FourBit::fp4, 64, false}, 28},
    {"neox_nf4", "neox_parallel", {quant::FourBit::nf4, 64, false}, 16},
};

fs::path case_dir(const Case& c) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/quant" / c.name; }
fs::path parity(const Case& c) { return fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity" / c.base; }

models::Batch parity_batch(const Case& c) {
  auto expected = io::SafetensorsFile::open(parity(c) / "expected.safetensors");
  const io::TensorView& ids = expected.at("input_ids");
  auto ids64 = ft::testing::read_tensor<std::int64_t>(expected, "input_ids");
  auto labels64 = ft::testing::read_tensor<std::int64_t>(expected, "labels");
  return models::causal_lm_batch(ids.shape[0], ids.shape[1], std::vector<std::int32_t>(ids64.begin(), ids64.end()),
                                 std::vector<std::int32_t>(labels64.begin(), labels64.end()));
}

std::unique_ptr<models::Transformer<float>> frozen(const fs::path& dir) {
  auto model = std::make_unique<models::Transformer<float>>(models::read_model_spec(dir), false);
  model->load(io::ModelWeights::open(dir));
  return model;
}

std::vector<float> logits_of(models::Transformer<float>& model, const models::Batch& batch) {
  std::vector<float> logits(std::size_t(batch.rows() * model.config().vocab_size));
  model.forward_backward(batch, {.token_count = double(batch.scored_tokens()), .backward = false}, logits.data());
  return logits;
}

TEST_CASE("qlora: bitsandbytes' 4-bit files read, quantized again and written back byte for byte") {
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const io::ModelWeights files = io::ModelWeights::open(case_dir(c) / "model");
    const io::ModelWeights original = io::ModelWeights::open(parity(c));
    std::size_t packed = 0;
    for (const std::string& name : files.names()) {
      if (!io::bnb_4bit_type(files, name)) continue;
      CAPTURE(name);
      const quant::FourBitWeight w = io::read_bnb_4bit(files, name);
      // The same weight quantized by ft from the float32 model.
      const io::TensorView& t = original.at(name);
      std::vector<float> values(std::size_t(t.numel()));
      io::copy_elements(original, name, values.data(), t.numel());
      const quant::FourBitWeight again = quant::quantize_weight(values, t.shape, "float32", c.options);
      CHECK(again.packed == w.packed);
      CHECK(again.absmax == w.absmax);
      CHECK(again.nested.has_value() == c.options.double_quant);
      if (again.nested && w.nested) {
        CHECK(again.nested->codes == w.nested->codes);
        CHECK(again.nested->absmax == w.nested->absmax);
        CHECK(again.nested->offset == w.nested->offset);
      }
      // Every tensor of its state, byte for byte as bitsandbytes saved it.
      for (const io::TensorToWrite& out : io::bnb_4bit_tensors(name, std::make_shared<quant::FourBitWeight>(w))) {
        CAPTURE(out.name);
        const io::TensorView& saved = files.at(out.name);
        CHECK(out.dtype == saved.dtype);
        CHECK(out.shape == saved.shape);
        const std::vector<std::byte> bytes = io::collect_bytes(out.produce);
        CHECK((bytes.size() == saved.bytes.size() && std::memcmp(bytes.data(), saved.bytes.data(), bytes.size()) == 0));
      }
      ++packed;
    }
    CHECK(packed == c.gradients / 2 / 2 * 2);  // every linear module of 2 layers
  }
}

TEST_CASE("qlora: a 4-bit base keeps its layers packed; quantizing on load gives bitsandbytes' model") {
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto model = frozen(case_dir(c) / "model");
    REQUIRE(model->quantized());
    // Between uses the blocks hold no values: only the packed weights and the small tensors.
    for (index_t l = 0; l < model->config().num_layers; ++l) CHECK(model->stage_parameters(l).values().data() == nullptr);
    const index_t block_values = model->stage_parameters(0).size() * model->config().num_layers;
    CHECK(model->quantized_bytes() < std::size_t(block_values) * sizeof(float) / 6);

    auto quantized_here = std::make_unique<models::Transformer<float>>(models::read_model_spec(parity(c)), false);
    quantized_here->quantize_on_load(c.options);
    quantized_here->load(io::ModelWeights::open(parity(c)));
    const models::Batch batch = parity_batch(c);
    const std::vector<float> want = logits_of(*model, batch);
    CHECK(logits_of(*quantized_here, batch) == want);
    CHECK(model->stage_parameters(0).values().data() == nullptr);  // dropped again after the forward
    // The 4-bit model is not the full-precision one.
    CHECK(ft::testing::relative_error(logits_of(*frozen(parity(c)), batch), want) > 1e-3);
  }
}

TEST_CASE("qlora: loss, logits and every LoRA gradient over a 4-bit base match PEFT over bitsandbytes") {
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto expected = io::SafetensorsFile::open(case_dir(c) / "expected.safetensors");
    auto model = frozen(case_dir(c) / "model");
    adapters::LoraModel<float> lora(*model, {.r = 4, .alpha = 8, .target_modules = {"all-linear"}, .seed = 3});
    adapters::load_peft_adapter(lora, model->config(), case_dir(c) / "adapter");
    const std::size_t compared =
        ft::testing::check_against_peft_reference(*model, lora, parity_batch(c), expected, {1e-5, 1e-5, 1e-4});
    CHECK(compared == c.gradients);
    CHECK(compared == expected.tensors().size() - 2);
  }
}

TEST_CASE("qlora: a damaged 4-bit state, a block size bitsandbytes refuses, full fine-tuning: one line each") {
  const Case& c = cases[0];
  ft::testing::TempDir tmp("ft_qlora");
  auto damaged = [&](const std::string& from, const std::string& to) {
    fs::remove_all(tmp.path / "model");
    fs::copy(case_dir(c) / "model", tmp.path / "model");
    std::string bytes = ft::testing::read_bytes(tmp.path / "model/model.safetensors");
    const std::size_t at = bytes.find(from, bytes.find("\"quant_type\": \"nf4\"", 8 + bytes.find("__metadata__")));
    REQUIRE(at != std::string::npos);
    REQUIRE(from.size() == to.size());
    bytes.replace(at, from.size(), to);
    ft::testing::write_bytes(tmp.path / "model/model.safetensors", bytes);
    return ft::testing::error_of([&] { (void)frozen(tmp.path / "model"); });
  };
  CHECK(damaged("\"blocksize\": 64", "\"blocksize\": 48").find(
            "has block size 48, which bitsandbytes does not allow (32, 64, 128, 256, 512, 1024, 2048, 4096)") !=
        std::string::npos);
  CHECK(damaged("{\"quant_type\"", "[\"quant_type\"").find("is not valid JSON") != std::string::npos);
  CHECK(damaged("\"shape\": [", "\"shapf\": [").find("lacks quant_type, blocksize, dtype or shape") != std::string::npos);
  CHECK(damaged("\"quant_type\": \"nf4\"", "\"quant_type\": \"fp4\"").find("says quant_type \"fp4\" under a key for nf4") !=
        std::string::npos);

  const std::string full = ft::testing::error_of([&] {
    models::Transformer<float> model(models::read_model_spec(case_dir(c) / "model"), true);
    model.load(io::ModelWeights::open(case_dir(c) / "model"));
  });
  CHECK(full == "a 4-bit base cannot be fine-tuned in full: it trains under an adapter (LoRA, prompt tuning)");
}

}  // namespace test_qlora
