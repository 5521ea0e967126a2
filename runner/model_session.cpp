#include "model_session.hpp"

#include <iostream>
#include <set>

#include <ft/io/base_quantization.hpp>
#include <ft/io/gptq.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/plugin/decoder.hpp>

#include "plugin_search.hpp"

namespace ftrun {
namespace fs = std::filesystem;

namespace {

// An adapter's base: base_model_name_or_path as written (a training run
// writes its recipe's model.path), or relative to the adapter.
fs::path base_of_adapter(const fs::path& adapter) {
  const auto config_file = adapter / "adapter_config.json";
  const nlohmann::json c = ft::io::read_json_file(config_file);
  const auto base = c.find("base_model_name_or_path");
  if (base == c.end() || !base->is_string() || base->get<std::string>().empty())
    throw ft::Error(config_file.string() + ": names no base model (base_model_name_or_path)");
  const fs::path path = base->get<std::string>();
  for (const fs::path& candidate : {path, adapter / path})
    if (fs::exists(candidate / "config.json")) return candidate;
  throw ft::Error(config_file.string() + ": its base model " + path.string() +
                  " is not an HF model directory here (run from where it was trained, or merge the adapter)");
}

ModelSource classify(const fs::path& dir) {
  if (fs::exists(dir / "adapter_config.json")) return {base_of_adapter(dir), dir};
  if (fs::exists(dir / "config.json")) return {dir, {}};
  throw ft::Error(dir.string() + ": neither an HF model (config.json) nor a PEFT adapter (adapter_config.json)");
}

// Why no loaded plugin has an engine for this architecture, dtype and device, and what they offer.
std::string no_engine(const std::string& architecture, const EngineChoice& choice, const ft::plugin::Registry& registry) {
  std::string offered;
  std::set<std::string> architectures;
  for (const ft::plugin::EngineFactory& e : registry.engines()) {
    architectures.insert(e.hf_architectures.begin(), e.hf_architectures.end());
    if (std::find(e.hf_architectures.begin(), e.hf_architectures.end(), architecture) != e.hf_architectures.end())
      offered += (offered.empty() ? "" : ", ") + e.key.str();
  }
  std::string why = "no plugin runs " + architecture + " in " + choice.dtype + " on " + choice.device;
  if (offered.empty()) {
    std::string read;
    for (const std::string& a : architectures) read += (read.empty() ? "" : ", ") + a;
    why += "; the plugins found read " + (read.empty() ? std::string("no architecture") : read);
  } else {
    why += "; offered for it: " + offered;
  }
#ifndef FT_WITH_CUDA
  if (choice.device == "cuda") why += " (this ft was built without CUDA: no nvcc was found when it was configured)";
#endif
  return why;
}

}  // namespace

ft::infer::LoadOptions load_options_for(const fs::path& model_dir, const EngineChoice& choice,
                                        const std::optional<ft::quant::FourBitOptions>& trained_over) {
  ft::infer::LoadOptions load;
  if (choice.quantize != "none") {
    if (!ft::quant::valid_4bit_blocksize(choice.quant_block_size))
      throw ft::Error("--quant-block-size " + std::to_string(choice.quant_block_size) +
                      " is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, 2048, 4096)");
    load.quantize = ft::quant::FourBitOptions{choice.quantize == "nf4" ? ft::quant::FourBit::nf4 : ft::quant::FourBit::fp4,
                                              choice.quant_block_size, choice.double_quant};
  } else if (choice.double_quant || choice.quant_block_size != 64) {
    throw ft::Error("--double-quant and --quant-block-size shape a 4-bit base; add --quantize nf4 (or fp4)");
  } else {
    load.quantize = trained_over;
  }
  if (!load.quantize) return load;
  const fs::path config_file = model_dir / "config.json";
  const nlohmann::json config = ft::io::read_json_file(config_file);
  const bool four_bit = ft::io::bnb_4bit_config(config, config_file.string()).has_value();
  if (four_bit || ft::io::gptq_config(config, config_file.string()))
    throw ft::Error(model_dir.string() + " holds " + (four_bit ? "4-bit" : "GPTQ") +
                    " weights already, which load as they are; " +
                    (choice.quantize != "none" ? "leave --quantize out"
                                               : "its adapter's base_quantization.json asks to quantize them again"));
  return load;
}

std::unique_ptr<ft::infer::Decoder> open_engine(const fs::path& model_dir, const EngineChoice& choice,
                                                std::string* description, const ft::infer::LoadOptions& load) {
  const std::string architecture = ft::io::hf_architecture(model_dir);
  PluginSearch search = find_plugins(choice.plugins, choice.device);
  std::size_t warned = 0;
  auto warn_refused = [&] {
    for (; warned < search.refusals.size(); ++warned) std::cerr << "ftrun: warning: " << search.refusals[warned] << "\n";
  };
  warn_refused();
  const ft::plugin::EngineFactory* engine = search.registry.find_engine(architecture, choice.dtype, choice.device);
  // The plugins set aside (those that need CUDA, for a run on the CPU) only when the others have no engine.
  while (!engine && search.load_deferred()) {
    warn_refused();
    engine = search.registry.find_engine(architecture, choice.dtype, choice.device);
  }
  if (!engine) throw ft::Error(no_engine(architecture, choice, search.registry));
  if (description) *description = engine->key.str() + " from " + engine->plugin->name() + " " + engine->plugin->version();
  return std::make_unique<ft::plugin::PluginDecoder>(*engine, model_dir, load);
}

ModelSession::ModelSession(const ModelSource& source, const std::map<std::string, std::string>& adapters,
                           const EngineChoice& choice)
    : text_(text_with_tokenizer(source.base)), stop_tokens_(stop_tokens_of(source.base, text_)) {
  const nlohmann::json config = ft::io::read_json_file(source.base / "config.json");
  if (const auto it = config.find("max_position_embeddings"); it != config.end() && it->is_number_integer())
    max_position_embeddings_ = it->get<ft::index_t>();
  const ft::infer::LoadOptions load = load_options_for(
      source.base, choice, source.adapter.empty() ? std::nullopt : ft::io::read_base_quantization(source.adapter));
  decoder_ = open_engine(source.base, choice, &engine_description_, load);
  if (load.quantize)
    engine_description_ += ", linear weights quantized to " + std::string(ft::quant::name_of(load.quantize->type)) +
                           " as they load (blocks of " + std::to_string(load.quantize->blocksize) +
                           (load.quantize->double_quant ? ", double quantization)" : ")");
  if (!source.adapter.empty()) default_adapter_ = decoder_->load_adapter(source.adapter);
  for (const auto& [name, dir] : adapters) {
    adapters_[name] = decoder_->load_adapter(dir);
    // An adapter trained over another base than the one served still loads (PEFT would load it too), with a word.
    const auto trained_over = ft::io::read_base_quantization(dir);
    if (trained_over && trained_over != load.quantize)
      std::cerr << "ftrun: warning: adapter " << name << " was trained over a base quantized to "
                << ft::quant::name_of(trained_over->type) << " as it loaded (its base_quantization.json), but the base "
                << (load.quantize ? "is served quantized otherwise" : "is served as its files hold it")
                << "; serve that base with --quantize " << ft::quant::name_of(trained_over->type)
                << (trained_over->double_quant ? " --double-quant" : "") << "\n";
  }
}

ModelSource resolve_model_source(const std::string& model, const std::string& checkpoint) {
  const fs::path dir = model;
  if (!fs::is_directory(dir)) throw ft::Error(model + ": no such directory");
  if (!checkpoint.empty()) {
    fs::path chosen;
    if (checkpoint == "latest") {
      if (!fs::exists(dir / "latest"))
        throw ft::Error(model + ": has no checkpoint yet (no " + (dir / "latest").string() + ")");
      chosen = fs::canonical(dir / "latest");
    } else if (fs::is_directory(dir / ("checkpoint-" + checkpoint))) {
      chosen = dir / ("checkpoint-" + checkpoint);
    } else if (fs::is_directory(dir / checkpoint)) {
      chosen = dir / checkpoint;
    } else {
      throw ft::Error("--checkpoint " + checkpoint + ": " + model +
                      " has no such checkpoint; allowed: latest, a step number, or a checkpoint directory");
    }
    return classify(chosen);
  }
  if (fs::exists(dir / "config.json") || fs::exists(dir / "adapter_config.json")) return classify(dir);
  // A training run's output_dir: its final model, else its final adapter.
  for (const char* final_dir : {"model", "adapter"})
    if (fs::is_directory(dir / final_dir)) return classify(dir / final_dir);
  if (fs::exists(dir / "latest"))
    throw ft::Error(model + ": the run has not finished (no final model); serve its newest checkpoint with -c latest");
  throw ft::Error(model + ": not an HF model directory, a PEFT adapter or a training output_dir");
}

std::vector<std::int32_t> stop_tokens_of(const fs::path& dir, const ft::text::ModelText& text) {
  std::vector<std::int32_t> ids;
  const auto file = dir / "generation_config.json";
  if (fs::exists(file)) {
    const nlohmann::json g = ft::io::read_json_file(file);
    if (g.contains("eos_token_id")) {
      const auto& e = g["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
      else if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) ids.push_back(x.get<std::int32_t>());
    }
  }
  if (ids.empty() && text.eos_id >= 0) ids.push_back(text.eos_id);
  return ids;
}

std::map<std::string, std::string> parse_adapter_options(const std::vector<std::string>& options) {
  std::map<std::string, std::string> out;
  for (const std::string& o : options) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == o.size())
      throw ft::Error("--adapter " + o + ": expected NAME=DIR (a PEFT adapter directory)");
    if (!out.emplace(o.substr(0, eq), o.substr(eq + 1)).second)
      throw ft::Error("--adapter: the name \"" + o.substr(0, eq) + "\" is given twice");
  }
  return out;
}

}  // namespace ftrun
