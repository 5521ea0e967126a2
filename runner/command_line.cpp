#include "command_line.hpp"

namespace ftrun {

void add_recipe_options(CLI::App* command, std::string& recipe, std::vector<std::string>& sets) {
  command->add_option("recipe", recipe, "Recipe file (TOML)")->required();
  command->add_option("--set", sets, "Override a recipe key: section.key=value (repeatable)");
}

void add_engine_options(CLI::App* command, EngineChoice& engine, const std::string& where) {
  command->add_option("--dtype", engine.dtype, "Compute dtype" + where)
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  command->add_option("--device", engine.device, "Where the model runs: cpu, cuda, or a plugin's device" + where)
      ->capture_default_str();
  command->add_option("--plugin", engine.plugins, "Also load this plugin file (repeatable)");
  command->add_option("--quantize", engine.quantize,
                      "Quantize the base's linear weights to 4 bits as they load, as bitsandbytes does (QLoRA)")
      ->check(CLI::IsMember({"none", "nf4", "fp4"}))
      ->capture_default_str();
  command->add_flag("--double-quant", engine.double_quant,
                    "With --quantize: quantize the absmax too (bnb_4bit_use_double_quant)");
  command->add_option("--quant-block-size", engine.quant_block_size, "With --quantize: weights sharing one absmax")
      ->capture_default_str();
}

CLI::Option* add_model_options(CLI::App* command, std::string& model, std::string& checkpoint, EngineChoice& engine,
                               const std::string& use, const std::string& where) {
  command->add_option("-c,--checkpoint", checkpoint, use + " one of the output_dir's checkpoints: latest, or a step number");
  add_engine_options(command, engine, where);
  return command->add_option("model", model, "HF model directory, PEFT adapter directory, or training output_dir");
}

void add_family_plugins(CLI::App* command, std::vector<std::string>& plugins) {
  command->add_option("--plugin", plugins,
                      "Also load this plugin file, for a model only a plugin's family reads (repeatable)");
}

}  // namespace ftrun
