// `ftrun init`'s fresh weights (models/initialise.hpp): HF's initialisation,
// read back from the directory written.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <ft/models/initialise.hpp>
#include <ft/models/load.hpp>

namespace test_initialise {

using namespace ft;
namespace fs = std::filesystem;

TEST_CASE("a fresh model's padding row starts at zero, its other rows drawn, its norms at their unit") {
  const std::string shape = R"("hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 12)";
  // The last is a multimodal config: its text model is initialised, with no vision tower to carry over.
  for (const std::string config :
       {R"({"architectures": ["LlamaForCausalLM"], "pad_token_id": 3, )" + shape + "}",
        R"({"architectures": ["GemmaForCausalLM"], "head_dim": 8, "num_key_value_heads": 2, )" + shape + "}",
        R"({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {"head_dim": 8,
          "num_key_value_heads": 1, )" + shape + "}}"}) {
    CAPTURE(config);
    const fs::path source = fs::temp_directory_path() / ("ft-init-source-" + std::to_string(::getpid()));
    const fs::path out = fs::temp_directory_path() / ("ft-init-" + std::to_string(::getpid()));
    fs::create_directories(source);
    fs::create_directories(out);
    std::ofstream(source / "config.json") << config;
    const models::ModelSpec spec = models::read_model_spec(source);
    const index_t pad = spec.config.padding_idx, C = spec.config.hidden_size;
    REQUIRE(pad >= 0);
    models::save_initialised(spec, source, out, 7, 0.02);
    auto model = models::load_pretrained<float>(out);
    const float* table = model->embedding().table();
    for (index_t row = 0; row < spec.config.vocab_size; ++row) {
      CAPTURE(row);
      double sum = 0;
      for (index_t c = 0; c < C; ++c) sum += double(table[row * C + c]) * double(table[row * C + c]);
      if (row == pad) CHECK(sum == 0);
      else CHECK(sum > 0);
    }
    const float unit = spec.config.norm == nn::NormKind::rms_unit_offset ? 0.0f : 1.0f;
    CHECK(model->stage_parameters(0).value("attn_norm.weight")[0] == unit);
    fs::remove_all(source);
    fs::remove_all(out);
  }
}

}  // namespace test_initialise
