// A trainer built from the headers alone: the five policies are types, fixed
// at compile time; the options come from a recipe file like ftrun's.
//
//   custom_trainer recipe.toml [--set section.key=value ...]
#include <iostream>
#include <string>
#include <vector>

#include <ft/ft.hpp>

// [trainer]
using Trainer = ft::Trainer<ft::models::Llama,        // Llama / Mistral / Qwen2 family
                            ft::precision::BF16Mixed,  // bf16 compute, f32 master weights
                            ft::parallel::Single,      // one process
                            ft::optim::AdamW,          // decoupled weight decay
                            ft::adapters::LoRA>;       // low-rank adapters on frozen weights
// [trainer]

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: custom_trainer recipe.toml [--set section.key=value ...]\n";
    return 2;
  }
  std::vector<std::string> sets;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--set") sets.emplace_back(argv[i + 1]);
  try {
    auto loaded = ft::recipe::load<ft::recipe::Recipe>(argv[1], sets);
    Trainer trainer(loaded.recipe);
    std::cout << trainer.plan();
  } catch (const ft::Error& e) {
    std::cerr << "custom_trainer: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
