#pragma once
// LoRA at run time: low-rank matrices beside the frozen projections the
// recipe targets, one trainable buffer per adapted block; checkpoints and the
// result are PEFT adapters, and lora.save_merged also leaves the merged model.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ft/adapters/lora.hpp"
#include "ft/adapters/lora_files.hpp"
#include "ft/adapters/runtime.hpp"
#include "ft/core/random.hpp"
#include "ft/io/adapter_directory.hpp"
#include "ft/io/base_quantization.hpp"
#include "ft/io/model_files.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/models/save.hpp"
#include "ft/train/four_bit_base.hpp"

namespace ft::adapters {

template <element T, class Device>
class LoraRuntime final : public Runtime<T, Device> {
public:
  explicit LoraRuntime(const recipe::Recipe& r)
      : source_(r.model.path), base_quantize_(train::quantized_on_load(r)), save_merged_(r.lora.save_merged),
        init_from_(r.lora.init_from.empty() ? std::filesystem::path() : io::adapter_directory(r.lora.init_from)) {
    options_.r = r.lora.r;
    options_.alpha = r.lora.alpha;
    options_.use_rslora = r.lora.use_rslora;
    options_.dropout = r.lora.dropout;
    options_.target_modules = r.lora.target_modules;
    options_.target_parameters = r.lora.target_parameters;
    options_.rank_pattern = r.lora.rank_pattern;
    options_.alpha_pattern = r.lora.alpha_pattern;
    options_.seed = std::uint64_t(r.seed);
    if (options_.target_modules.empty())
      throw Error("internal: the LoRA policy resolves lora.target_modules before training");
  }

  std::vector<Trainable<T, Device>> attach(models::Transformer<T, Device>& model, const text::ModelText&) override {
    model_ = &model;
    lora_ = std::make_unique<LoraModel<T, Device>>(model, options_);
    std::vector<Trainable<T, Device>> out;
    for (auto& b : lora_->blocks()) {
      const index_t layer = b->targets()[0].layer;
      out.push_back({"lora.layers." + std::to_string(layer), layer, &b->parameters()});
    }
    return out;
  }

  void set_training(bool training, std::uint64_t key) override { lora_->set_dropout(training, key); }

  double added_matmul_parameters() const override {
    double n = 0;
    for (auto& b : lora_->blocks()) n += double(b->parameters().size());
    return n;
  }

  void save(const std::filesystem::path& dir) override {
    save_peft_adapter(*lora_, model_->config(), source_, dir, "F32");
    if (base_quantize_) io::write_base_quantization<T>(dir, *base_quantize_);
  }
  void load(const std::filesystem::path& dir) override { load_peft_adapter(*lora_, model_->config(), dir); }
  std::filesystem::path initial_weights() const override { return init_from_; }

  std::vector<std::string> save_final(const std::filesystem::path& output_dir) override {
    const auto adapter = output_dir / "adapter";
    io::write_directory_atomically(adapter, [&](const auto& dir) { save(dir); }, true);
    std::vector<std::string> out{"adapter (PEFT) in " + adapter.string()};
    if (save_merged_) {
      lora_->merge_into_model();
      const auto merged = output_dir / "merged";
      io::write_directory_atomically(
          merged, [&](const auto& dir) { models::save_pretrained(*model_, source_, dir, io::safetensors_dtype_of<T>()); },
          true);
      out.push_back("merged model (HF) in " + merged.string());
    }
    return out;
  }

  bool final_save_changes_model() const override { return save_merged_; }

private:
  std::string source_;
  std::optional<quant::FourBitOptions> base_quantize_;  // written beside each adapter (io/base_quantization.hpp)
  bool save_merged_;
  std::filesystem::path init_from_;
  LoraOptions options_;
  models::Transformer<T, Device>* model_ = nullptr;
  std::unique_ptr<LoraModel<T, Device>> lora_;
};

}  // namespace ft::adapters
