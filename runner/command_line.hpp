#pragma once
// How ftrun's commands declare themselves on the command line (CLI11): each
// command's source adds its subcommand with the options it takes and says
// what running it does (commands.hpp); options several commands take are
// declared here once.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ftrun {

// A command as ftrun's main holds it: its subcommand, and running it (an
// exit code, exit_code.hpp; its errors printed as one line on stderr).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// Where eval, generate, serve and chat run the model: its element type, its
// device, and plugin files to load before the stock ones.
struct EngineChoice {
  std::string dtype = "float32";
  std::string device = "cpu";
  std::vector<std::string> plugins;  // --plugin FILE
  // --quantize: a whole-precision base's linear weights quantized to 4 bits as they load, as QLoRA trains them.
  std::string quantize = "none";
  bool double_quant = false;
  std::int64_t quant_block_size = 64;
};

// A recipe and its overrides (--set section.key=value), as train, prepare,
// estimate and schedule take them.
void add_recipe_options(CLI::App* command, std::string& recipe, std::vector<std::string>& sets);

// The engine a command runs the model in: its dtype, its device and the plugins that offer it.
void add_engine_options(CLI::App* command, EngineChoice& engine, const std::string& where = "");

// The model generate, serve and chat load, as one of them names it: what
// MODEL may be, the checkpoint of an output_dir (`use`: the verb for it),
// the compute dtype, the device and the plugins whose engines run it.
CLI::Option* add_model_options(CLI::App* command, std::string& model, std::string& checkpoint, EngineChoice& engine,
                               const std::string& use, const std::string& where = "");

// Plugins whose model families init, convert and schedule may read a model with.
void add_family_plugins(CLI::App* command, std::vector<std::string>& plugins);

}  // namespace ftrun
