// The training recipe as users write it.
#include <doctest/doctest.h>

#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

namespace test_recipe {

using namespace ft::recipe;

namespace {
const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures";

std::string minimal() {
  return "[model]\npath = '" + fixtures + "/models/tiny-llama'\n[data]\ntrain = '" + fixtures +
         "/data/tiny.jsonl'\n";
}

std::string error_of(const std::string& text) {
  try {
    from_table<Recipe>(parse_toml(text, "r.toml"), "r.toml");
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("a minimal recipe takes HF-like defaults") {
  Recipe r = from_table<Recipe>(parse_toml(minimal(), "r.toml"), "r.toml");
  CHECK(r.strategy.precision == "fp32");
  CHECK(r.train.gradient_accumulation_steps == 1);
  CHECK(r.train.max_steps == -1);
  CHECK(r.lora.target_modules.empty());  // the family's default
}

TEST_CASE("required keys, missing paths and bad choices are refused") {
  CHECK(error_of("[data]\ntrain = 'x'") ==
        "r.toml: model.path: missing required key; set it to an HF model directory (config.json, "
        "*.safetensors, tokenizer.json)");
  CHECK(error_of("[model]\npath = '/nonexistent/model'") ==
        "r.toml:2:8: model.path: no such directory: /nonexistent/model; allowed: an HF model directory "
        "(config.json, *.safetensors, tokenizer.json)");
  CHECK(error_of("[model]\npath = '" + fixtures + "'") ==
        "r.toml:2:8: model.path: directory " + fixtures +
            " has no config.json; allowed: an HF model directory (config.json, *.safetensors, tokenizer.json)");
  CHECK(error_of(minimal() + "[train]\ngradient_checkpointing = 'every_1'") ==
        "r.toml:6:26: train.gradient_checkpointing: \"every_1\" is not a choice; allowed: none, every_block, or "
        "every_K for every K-th block (K >= 2)");
  CHECK(error_of(minimal() + "[train]\ngradient_checkpointing = 'every_4'") == "no error");
  CHECK(error_of(minimal() + "[strategy]\noptimizer = 'Adam W'") ==
        "r.toml:6:13: strategy.optimizer: \"Adam W\" is not a policy name; allowed: a name that `ftrun plugins` lists");
}

TEST_CASE("the resolved recipe reads back identically") {
  Recipe r = from_table<Recipe>(parse_toml(minimal() + "[train]\nlearning_rate = 3e-5\n", "r.toml"), "r.toml");
  Recipe back = from_table<Recipe>(parse_toml(emit(r), "emitted"), "emitted");
  CHECK(emit(back) == emit(r));
  CHECK(back.train.learning_rate == 3e-5);
}

TEST_CASE("a missing recipe file is one line") {
  CHECK_THROWS_WITH_AS(load<Recipe>("/nonexistent/recipe.toml"), "/nonexistent/recipe.toml: no such recipe file",
                       ft::Error);
}

}  // namespace test_recipe
