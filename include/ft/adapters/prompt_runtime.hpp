#pragma once
// Prompt tuning at run time: a few virtual token embeddings before every row
// train while the whole model stays frozen; checkpoints and the result are
// PEFT prompt-tuning adapters.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ft/adapters/prompt_tuning.hpp"
#include "ft/adapters/runtime.hpp"
#include "ft/io/adapter_directory.hpp"
#include "ft/io/base_quantization.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/train/four_bit_base.hpp"

namespace ft::adapters {

template <element T, class Device>
class PromptRuntime final : public Runtime<T, Device> {
public:
  explicit PromptRuntime(const recipe::Recipe& r)
      : source_(r.model.path), init_text_(r.prompt_tuning.init_text), tokens_(r.prompt_tuning.num_virtual_tokens),
        seed_(std::uint64_t(r.seed)),
        init_from_(r.prompt_tuning.init_from.empty() ? std::filesystem::path()
                                                     : io::adapter_directory(r.prompt_tuning.init_from)),
        base_quantize_(train::quantized_on_load(r)) {}

  std::vector<Trainable<T, Device>> attach(models::Transformer<T, Device>& model, const text::ModelText& text) override {
    model_ = &model;
    prompt_ = std::make_unique<PromptTuning<T, Device>>(model, tokens_, seed_);
    if (!init_text_.empty() && init_from_.empty()) {
      // From the model's files: a rank may keep no whole table (ZeRO-3, a pipeline rank).
      std::vector<T> table = model.read_parameter(io::ModelWeights::open(source_), "embed.weight");
      // The rows the model's lookup gives, as PEFT takes them from the embedding module.
      const models::TransformerConfig& c = model.config();
      if (c.embedding_scale_in_lookup)
        for (T& v : table) v = T(acc_t<T>(v) * models::embedding_scale<T>(c));
      prompt_->init_from_tokens(
          prompt_init_ids(text.need_tokenizer("prompt_tuning.init_text").encode(init_text_, true), tokens_),
          table.data());
    }
    return {{"prompt", -1, &prompt_->parameters()}};
  }

  index_t virtual_tokens() const override { return tokens_; }

  void save(const std::filesystem::path& dir) override {
    save_peft_prompt(*prompt_, model_->config(), {source_, init_text_}, dir);
    if (base_quantize_) io::write_base_quantization<T>(dir, *base_quantize_);
  }
  void load(const std::filesystem::path& dir) override { load_peft_prompt(*prompt_, model_->config(), dir); }
  std::filesystem::path initial_weights() const override { return init_from_; }

  std::vector<std::string> save_final(const std::filesystem::path& output_dir) override {
    const auto adapter = output_dir / "adapter";
    io::write_directory_atomically(adapter, [&](const auto& dir) { save(dir); }, true);
    return {"adapter (PEFT) in " + adapter.string()};
  }

private:
  std::string source_, init_text_;
  index_t tokens_;
  std::uint64_t seed_;
  std::filesystem::path init_from_;
  std::optional<quant::FourBitOptions> base_quantize_;  // written beside each adapter (io/base_quantization.hpp)
  models::Transformer<T, Device>* model_ = nullptr;
  std::unique_ptr<PromptTuning<T, Device>> prompt_;
};

}  // namespace ft::adapters
