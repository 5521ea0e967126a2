// ftrun init SOURCE [DESTINATION]: a randomly initialised model in HF layout
// from a config.json, with ft's own deterministic draws, for pre-training
// from scratch and for ft's tiny models (models/ft-tiny-*), whose weights
// the build makes this way instead of committing them.
//
// The weights are drawn as models/initialise.hpp says, with config.json's
// initializer_range (0.02 when it has none); the other files of SOURCE
// (tokenizer, chat template) are copied beside them; DESTINATION (SOURCE
// by default) is written atomically.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <ft/io/hf_config.hpp>
#include <ft/io/staged_directory.hpp>
#include <ft/models/initialise.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_reading.hpp"

namespace ftrun {

struct InitOptions {
  std::string source, destination;  // destination: the source directory when empty
  long seed = 0;
  bool force = false;               // replace existing weights
  std::vector<std::string> plugins;  // --plugin FILE: for a model a plugin's family reads
};

int run_init(const InitOptions& options) {
  namespace fs = std::filesystem;
  try {
    const fs::path source = options.source;
    const fs::path destination = options.destination.empty() ? source : fs::path(options.destination);
    if (!fs::is_regular_file(source / "config.json"))
      throw ft::Error(source.string() + ": has no config.json to initialise a model from");
    if (fs::exists(destination / "model.safetensors") && !options.force)
      throw ft::Error(destination.string() + ": already holds model.safetensors (--force replaces it)");
    const ft::models::ModelSpec spec = read_model(source, options.plugins).spec;
    const double std = ft::io::read_json_file(source / "config.json").value("initializer_range", 0.02);
    ft::index_t parameters = 0;
    ft::io::write_directory_atomically(
        destination,
        [&](const fs::path& dir) {
          parameters = ft::models::save_initialised(spec, source, dir, std::uint64_t(options.seed), std);
        },
        true);
    std::cout << "initialised " << parameters << " parameters (seed " << options.seed << ") in "
              << destination.string() << "\n";
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

Command add_init_command(CLI::App& app) {
  auto o = std::make_shared<InitOptions>();
  CLI::App* command = app.add_subcommand("init", "Write randomly initialised weights for a config.json (HF layout, deterministic)");
  command->add_option("source", o->source, "Directory with config.json (and tokenizer files to copy)")->required();
  command->add_option("destination", o->destination, "Directory to write; the source directory by default");
  command->add_option("--seed", o->seed, "Seed of the draws")->capture_default_str();
  command->add_flag("--force", o->force, "Replace weights that are already there");
  add_family_plugins(command, o->plugins);
  return {command, [o] { return run_init(*o); }};
}

}  // namespace ftrun
