// ftrun recipe --reference: every recipe key with its default, what it allows
// and what it does, as Markdown (docs/recipe-reference.md is this output).
#include <iostream>
#include <memory>

#include <ft/recipe/recipe.hpp>
#include <ft/recipe/reference.hpp>

#include "commands.hpp"
#include "exit_code.hpp"

namespace ftrun {

int run_recipe_reference() {
  std::cout << "# Recipe reference\n\n"
               "Every key `ftrun train` reads from a recipe, with its default, what it allows and what it does. "
               "This file is generated from the recipe's declarations by `ftrun recipe --reference`; a test fails "
               "when they differ. `ftrun train RECIPE --dry-run` prints a resolved recipe with the same comments, "
               "and [recipes.md](recipes.md) explains how a recipe is laid out.\n"
            << ft::recipe::reference(ft::recipe::Recipe{});
  return ok;
}

Command add_recipe_command(CLI::App& app) {
  auto reference = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand("recipe", "Print the reference of every recipe key (--reference), as Markdown");
  command->add_flag("--reference", *reference, "Every key with its default, what it allows and what it does")->required();
  return {command, [reference] { return run_recipe_reference(); }};
}

}  // namespace ftrun
