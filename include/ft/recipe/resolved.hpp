#pragma once
// The resolved recipe as ftrun hands it to a plugin: TOML text that
// recipe::emit wrote, read back into the struct. Compiled once into ft's
// recipe library (src/recipe/), so a plugin's entry points do not compile
// the TOML parser (CUDA plugins cannot: nvcc does not take toml++).
#include <string_view>

#include "ft/recipe/recipe.hpp"

namespace ft::recipe {

// Throws ft::Error naming "<resolved recipe>" and the line when the text is not a recipe.
Recipe read_resolved(std::string_view toml);

}  // namespace ft::recipe
