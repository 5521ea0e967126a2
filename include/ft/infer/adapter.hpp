#pragma once
// A PEFT adapter served beside its base model and applied per sequence,
// never merged: any number of adapters share one copy of the base weights,
// and one batch can mix sequences of different adapters and of none (as
// vLLM serves several LoRAs). Two kinds:
//
//   LoRA           scale * B A x is added to the adapted projections of that
//                  sequence's rows only (the engine routes rows, engine.hpp),
//                  routers and routed experts included: an expert's run of
//                  rows holds each sequence's rows together
//   prompt tuning  the adapter's virtual tokens stand before the sequence's
//                  prompt, at positions 0..N-1, as PEFT generates
//
// An adapter that carries whole weights (modules_to_save, a LoRA on the
// embedding) would change what every sequence shares; it is refused with
// the way to use it (merge it into the model first).
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/adapters/lora.hpp"
#include "ft/adapters/lora_files.hpp"
#include "ft/adapters/prompt_tuning.hpp"
#include "ft/core/error.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/peft.hpp"
#include "ft/models/transformer.hpp"

namespace ft::infer {

// Device: the model's; the adapter's weights live in its memory.
template <element T, class Device = device::Cpu>
class Adapter {
public:
  Adapter(models::Transformer<T, Device>& model, const std::filesystem::path& dir) {
    const auto config_file = dir / "adapter_config.json";
    if (!std::filesystem::exists(config_file))
      throw Error(dir.string() + ": not a PEFT adapter directory (no adapter_config.json)");
    const nlohmann::json c = io::read_json_file(config_file);
    const std::string type = c.value("peft_type", "");
    if (type == "PROMPT_TUNING") load_prompt(model, dir, c);
    else if (type == "LORA") load_lora(model, dir);
    else
      throw Error(config_file.string() + ": peft_type \"" + type +
                  "\" cannot be served; allowed: LORA, PROMPT_TUNING");
  }
  Adapter(const Adapter&) = delete;
  Adapter& operator=(const Adapter&) = delete;

  // The LoRA of one layer, or null when this adapter leaves the layer alone.
  adapters::LoraBlock<T, Device>* lora_block(index_t layer) const {
    return layer < index_t(by_layer_.size()) ? by_layer_[std::size_t(layer)] : nullptr;
  }
  bool is_lora() const { return lora_ != nullptr; }
  index_t virtual_tokens() const { return virtual_.size(0); }
  const T* virtual_embeddings() const { return virtual_.data(); }  // [virtual_tokens, hidden], the device's memory

private:
  void load_prompt(models::Transformer<T, Device>& model, const std::filesystem::path& dir, const nlohmann::json& c) {
    const auto n = c.find("num_virtual_tokens");
    if (n == c.end() || !n->is_number_integer() || n->get<index_t>() < 1)
      throw Error((dir / "adapter_config.json").string() + ": \"num_virtual_tokens\" must be a positive integer");
    const index_t N = n->get<index_t>(), C = model.config().hidden_size;
    // PromptTuning reads and checks PEFT's file; the engine only needs the vectors.
    adapters::PromptTuning<T, Device> prompt(model, N, 0);
    adapters::load_peft_prompt(prompt, model.config(), dir);
    virtual_ = Tensor<T, typename Device::Memory>(Shape{N, C});
    Device::copy(virtual_.data(), prompt.values(), std::size_t(N * C) * sizeof(T));
  }

  void load_lora(models::Transformer<T, Device>& model, const std::filesystem::path& dir) {
    const io::PeftAdapter peft = io::PeftAdapter::open(dir);
    const std::string where = (dir / "adapter_model.safetensors").string() + ": ";
    const bool embedding = std::ranges::any_of(peft.modules(), &io::LoraModule::embedding);
    if (!peft.whole_weights().empty() || embedding)
      throw Error(where + "changes " + (embedding ? "the embedding" : "whole weights (modules_to_save)") +
                  ", which every request shares; merge it into the model (ftrun convert BASE OUT --merge-lora " +
                  dir.string() + ") and serve that");
    if (peft.modules().empty()) throw Error(where + "has no LoRA modules");
    lora_ = std::make_unique<adapters::LoraModel<T, Device>>(model, adapters::lora_options_of(peft), false);
    adapters::load_peft_adapter(*lora_, model.config(), dir);
    by_layer_.assign(std::size_t(model.config().num_layers), nullptr);
    for (auto& block : lora_->blocks()) by_layer_[std::size_t(block->targets()[0].layer)] = block.get();
  }

  std::unique_ptr<adapters::LoraModel<T, Device>> lora_;
  std::vector<adapters::LoraBlock<T, Device>*> by_layer_;
  Tensor<T, typename Device::Memory> virtual_;
};

}  // namespace ft::infer
