#pragma once
// What ftrun generate, chat and serve load to answer prompts: the model
// (from an HF directory, a PEFT adapter over its base, or a training run's
// output_dir or checkpoint), its text tools, the tokens that end an answer,
// and an inference engine from a plugin with the adapters clients can name.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/infer/decoder.hpp>
#include <ft/infer/load_options.hpp>
#include <ft/text/model_text.hpp>

#include "command_line.hpp"

namespace ftrun {

// A model to serve: its base HF directory and, optionally, an adapter over it.
struct ModelSource {
  std::filesystem::path base;     // config.json, weights, tokenizer.json
  std::filesystem::path adapter;  // PEFT adapter directory, or empty
};

// MODEL is an HF model directory, a PEFT adapter directory (its
// base_model_name_or_path is the base), or a training output_dir (its final
// model/ or adapter/). `checkpoint` ("latest", a step number or a
// checkpoint directory) picks one of an output_dir's checkpoints instead.
ModelSource resolve_model_source(const std::string& model, const std::string& checkpoint);

// The tokens that end an answer: generation_config.json's eos_token_id (a
// number or a list), else the tokenizer's EOS.
std::vector<std::int32_t> stop_tokens_of(const std::filesystem::path& dir, const ft::text::ModelText& text);

// How the engine loads the model in `model_dir`: its linear weights
// quantized to 4 bits as they load when --quantize asks, or else when
// `trained_over` (an adapter's base_quantization.json) says the adapter
// served was trained over such a base. Refused in one line where the files
// are quantized already or the options are not bitsandbytes'.
ft::infer::LoadOptions load_options_for(const std::filesystem::path& model_dir, const EngineChoice& choice,
                                        const std::optional<ft::quant::FourBitOptions>& trained_over = {});

// The inference engine a plugin offers for the model in `model_dir` (an HF
// directory), its dtype and device, loaded with the model as `load` says;
// `description` receives "(llama, float32) on cpu from ft-cpu 0.1.0".
// Refused in one line where no plugin runs the architecture so, naming what
// they offer.
std::unique_ptr<ft::infer::Decoder> open_engine(const std::filesystem::path& model_dir, const EngineChoice& choice,
                                                std::string* description = nullptr,
                                                const ft::infer::LoadOptions& load = {});

// The model runs in the inference engine a model plugin offers for its
// architecture, dtype and device (ft/plugin/decoder.hpp), so every family
// and device ftrun can train on, a third party's included, can answer too;
// the text tools stay here.
class ModelSession {
public:
  // `adapters`: name -> PEFT directory, each loaded beside the base.
  ModelSession(const ModelSource& source, const std::map<std::string, std::string>& adapters,
               const EngineChoice& choice);

  // Prompts are text, so the model must bring its tokenizer.
  static ft::text::ModelText text_with_tokenizer(const std::filesystem::path& dir) {
    ft::text::ModelText text = ft::text::ModelText::load(dir);
    (void)text.need_tokenizer("generation");
    return text;
  }

  // The engine, with no key/value caches until reserve().
  ft::infer::Decoder& decoder() { return *decoder_; }
  const ft::infer::Decoder& decoder() const { return *decoder_; }
  // config.json's max_position_embeddings, 0 when it has none.
  ft::index_t max_position_embeddings() const { return max_position_embeddings_; }
  // "(llama, float32) on cpu from ft-llama 0.1.0", for the start-up line.
  const std::string& engine_description() const { return engine_description_; }
  const ft::text::ModelText& text() const { return text_; }
  const std::vector<std::int32_t>& stop_tokens() const { return stop_tokens_; }
  // The adapter MODEL itself brought (-1 for none), and those added by name.
  int default_adapter() const { return default_adapter_; }
  const std::map<std::string, int>& adapters() const { return adapters_; }

  bool has_chat_template() const { return text_.chat != nullptr; }

  // A conversation through the model's chat template, ready for the answer.
  std::vector<std::int32_t> encode_chat(const nlohmann::ordered_json& messages) const {
    if (!text_.chat) throw ft::Error("the model has no chat template; send a plain prompt instead");
    ft::text::ChatOptions options = text_.special;
    options.add_generation_prompt = true;
    std::string rendered;
    {
      const std::lock_guard lock(template_mutex_);  // the template engine is not shared between threads
      rendered = ft::text::apply_chat_template(*text_.chat, messages, options);
    }
    return text_.tokenizer->encode(rendered, false);
  }
  // Plain text, with the tokenizer's special tokens (BOS) as HF adds them.
  std::vector<std::int32_t> encode_text(const std::string& text) const { return text_.tokenizer->encode(text, true); }
  std::string decode(std::span<const std::int32_t> ids) const { return text_.tokenizer->decode(ids, true); }

private:
  ft::text::ModelText text_;
  std::vector<std::int32_t> stop_tokens_;
  ft::index_t max_position_embeddings_ = 0;
  std::string engine_description_;
  std::unique_ptr<ft::infer::Decoder> decoder_;
  int default_adapter_ = -1;
  std::map<std::string, int> adapters_;
  mutable std::mutex template_mutex_;
};

// "NAME=DIR" pairs from --adapter options; a repeated or empty name is refused.
std::map<std::string, std::string> parse_adapter_options(const std::vector<std::string>& options);

}  // namespace ftrun
