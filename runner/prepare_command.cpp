// ftrun prepare: tokenise a recipe's data into its token cache once, so that
// every later `ftrun train` (and every rank of a distributed run) maps the
// tokens instead of tokenising again (ft/data/prepared.hpp).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <ft/core/progress.hpp>
#include <ft/data/prepared.hpp>
#include <ft/recipe/load.hpp>

#include "commands.hpp"
#include "exit_code.hpp"

namespace ftrun {

struct PrepareOptions {
  std::string recipe;
  std::vector<std::string> sets;  // --set section.key=value
  bool force = false;             // rebuild even when the cache matches
};

int run_prepare(const PrepareOptions& options) {
  try {
    const auto loaded = ft::recipe::load<ft::recipe::Recipe>(options.recipe, options.sets);
    const ft::recipe::Recipe& r = loaded.recipe;
    const ft::text::ModelText text = ft::text::ModelText::load(r.model.path);
    const auto start = std::chrono::steady_clock::now();
    ft::Progress bar("prepare", 100);
    const ft::data::PreparedData prepared =
        ft::data::load_prepared(r, text, ft::data::progress_line(bar), options.force);
    bar.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto& counts = prepared.metadata["counts"];
    const std::string dir = ft::data::cache_dir_of(r).string();
    if (prepared.reused) {
      std::printf("%s: up to date (its metadata matches the recipe; --force rebuilds it)\n", dir.c_str());
    } else {
      if (!prepared.rebuilt_because.empty()) std::printf("rebuilt: %s\n", prepared.rebuilt_because.c_str());
      const double rows = counts["train"]["rows"].get<double>() + counts["validation"]["rows"].get<double>();
      const double tokens = counts["train"]["tokens"].get<double>() + counts["validation"]["tokens"].get<double>();
      std::printf("%s: written in %.2f s (%.0f rows/s, %.0f tokens/s)\n", dir.c_str(), seconds, rows / seconds,
                  tokens / seconds);
    }
    std::printf("  train       %lld rows, %lld tokens\n", counts["train"]["rows"].get<long long>(),
                counts["train"]["tokens"].get<long long>());
    if (counts["validation"]["rows"].get<long long>() > 0)
      std::printf("  validation  %lld rows, %lld tokens\n", counts["validation"]["rows"].get<long long>(),
                  counts["validation"]["tokens"].get<long long>());
    std::printf("  skipped     %lld bad rows\n", counts["skipped"].get<long long>());
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

Command add_prepare_command(CLI::App& app) {
  auto o = std::make_shared<PrepareOptions>();
  CLI::App* command = app.add_subcommand("prepare", "Tokenise a recipe's data once into its token cache (data.cache_dir)");
  add_recipe_options(command, o->recipe, o->sets);
  command->add_flag("--force", o->force, "Rebuild the cache even when it matches the recipe");
  return {command, [o] { return run_prepare(*o); }};
}

}  // namespace ftrun
