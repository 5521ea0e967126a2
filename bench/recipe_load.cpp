// Start-up cost of a run before any model work: parse, override and bind the
// default recipe, and print it back (what `ftrun train --dry-run` does).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <string>
#include <vector>

#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

namespace {

void BM_load_default_recipe(benchmark::State& state) {
  std::filesystem::current_path(FT_SOURCE_DIR);  // the recipe's paths are relative to the checkout
  const std::vector<std::string> sets{"train.max_steps=10", "output_dir=/tmp/run"};
  for (auto _ : state) {
    auto loaded = ft::recipe::load<ft::recipe::Recipe>("recipes/ft_tiny_llama/lora.toml", sets);
    benchmark::DoNotOptimize(loaded.recipe.train.max_steps);
  }
}
BENCHMARK(BM_load_default_recipe)->Unit(benchmark::kMicrosecond);

void BM_emit_recipe(benchmark::State& state) {
  std::filesystem::current_path(FT_SOURCE_DIR);
  auto loaded = ft::recipe::load<ft::recipe::Recipe>("recipes/ft_tiny_llama/lora.toml");
  for (auto _ : state) benchmark::DoNotOptimize(ft::recipe::emit(loaded.recipe));
}
BENCHMARK(BM_emit_recipe)->Unit(benchmark::kMicrosecond);

}  // namespace
