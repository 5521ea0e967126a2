#pragma once
// Prompt tuning (Lester et al. 2021) as PEFT defines it for causal LMs: N
// trainable vectors, "virtual tokens", stand before every row's token
// embeddings, and only they train; the model is frozen.
//
// PEFT's conventions, which ft keeps so that each loads the other's adapters:
//   - the virtual tokens take positions 0..N-1 and the row's tokens follow
//     from N; nothing predicts a virtual token (label -100), and the last one
//     predicts the row's first token
//   - initialised from a text: the text's ids as tokenizer(text) gives them
//     (special tokens included), cut to N or repeated until there are N, and
//     their rows of the embedding table; otherwise N(0, 1), as
//     torch.nn.Embedding initialises
//   - files: adapter_model.safetensors holds "prompt_embeddings" [N, C] in
//     float32, adapter_config.json says peft_type "PROMPT_TUNING"
//
// The placement is data's business (BatchPlan puts N placeholder positions at
// the start of every row and marks the batch); this adapter only fills those
// positions and collects their gradient, through models::InputAdapter.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/random.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/model_files.hpp"
#include "ft/io/peft.hpp"
#include "ft/io/safetensors.hpp"
#include "ft/models/input_adapter.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/transformer.hpp"

namespace ft::adapters {

// PEFT's rule for the ids a text initialises N virtual tokens from.
inline std::vector<std::int32_t> prompt_init_ids(std::vector<std::int32_t> text_ids, index_t n) {
  if (text_ids.empty()) throw Error("prompt_tuning.init_text has no tokens to initialise the virtual tokens from");
  const std::size_t want = std::size_t(n), have = text_ids.size();
  for (std::size_t i = have; i < want; ++i) text_ids.push_back(text_ids[i % have]);
  text_ids.resize(want);
  return text_ids;
}

// Every row's virtual tokens are the same vectors: their gradient is the
// sum over rows, one task per element adding the rows in order.
template <class T>
struct PromptGradient {
  T* grad;
  const T* dy;
  index_t rows, row_stride;

  FT_HOST_DEVICE void operator()(index_t i) const {
    acc_t<T> sum = 0;
    for (index_t b = 0; b < rows; ++b) sum += acc_t<T>(dy[b * row_stride + i]);
    grad[i] = T(acc_t<T>(grad[i]) + sum);
  }
};

// Device: where the model runs; the virtual tokens live in its memory.
template <element T, class Device = device::Cpu>
class PromptTuning : public models::InputAdapter<T, Device> {
public:
  // N virtual tokens drawn from N(0, 1) with ft::Rng(seed), attached to the model's embedding stage.
  PromptTuning(models::Transformer<T, Device>& model, index_t num_virtual_tokens, std::uint64_t seed)
      : model_(model), N_(num_virtual_tokens), C_(model.config().hidden_size) {
    if (num_virtual_tokens < 1)
      throw Error("num_virtual_tokens " + std::to_string(num_virtual_tokens) + " is not allowed, allowed: 1 or more");
    params_.declare("prompt_embeddings", {N_, C_});
    params_.allocate(true);
    Rng rng(derive_key(seed, 0x70726f6d7074ull));  // "prompt"
    std::vector<T> v(std::size_t(N_ * C_));
    for (T& x : v) x = T(float(rng.normal()));
    set_values(v);
    model_.embedding().set_adapter(this);
  }
  ~PromptTuning() override { model_.embedding().set_adapter(nullptr); }
  PromptTuning(const PromptTuning&) = delete;
  PromptTuning& operator=(const PromptTuning&) = delete;

  // Sets the virtual tokens to the rows of these token ids (prompt_init_ids'
  // result) of the embedding table [V, C], given on the host.
  void init_from_tokens(const std::vector<std::int32_t>& ids, const T* table) {
    if (index_t(ids.size()) != N_)
      throw Error("internal: " + std::to_string(ids.size()) + " ids for " + std::to_string(N_) + " virtual tokens");
    const index_t V = model_.config().vocab_size;
    std::vector<T> v(std::size_t(N_ * C_));
    for (index_t i = 0; i < N_; ++i) {
      const std::int32_t id = ids[std::size_t(i)];
      if (id < 0 || id >= V) throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
      std::copy_n(table + index_t(id) * C_, C_, v.begin() + i * C_);
    }
    set_values(v);
  }

  index_t num_virtual_tokens() const { return N_; }
  models::ParameterBuffer<T, typename Device::Memory>& parameters() { return params_; }
  // In the device's memory.
  const T* values() const { return params_.value("prompt_embeddings"); }
  T* values() { return params_.value("prompt_embeddings"); }
  const T* grads() const { return params_.grad("prompt_embeddings"); }
  // The virtual tokens [N, C] through the host, out and in.
  std::vector<T> host_values() const {
    std::vector<T> v(std::size_t(N_ * C_));
    Device::to_host(v.data(), values(), v.size() * sizeof(T));
    return v;
  }
  void set_values(const std::vector<T>& v) { Device::from_host(values(), v.data(), v.size() * sizeof(T)); }

  void forward(T* y, const models::Batch& batch) override {
    check(batch);
    for (index_t b = 0; b < batch.B; ++b) Device::copy(y + b * batch.T * C_, values(), std::size_t(N_ * C_) * sizeof(T));
  }

  void backward(const T* dy, const models::Batch& batch) override {
    check(batch);
    T* g = params_.grad("prompt_embeddings");
    if (!g) return;
    Device::parallel_for(N_ * C_, PromptGradient<T>{g, dy, batch.B, batch.T * C_});
  }

private:
  void check(const models::Batch& batch) const {
    if (batch.virtual_tokens != N_ || batch.T <= N_)
      throw Error("a batch with " + std::to_string(batch.virtual_tokens) + " virtual tokens in rows of " +
                  std::to_string(batch.T) + " does not fit a prompt of " + std::to_string(N_) + " virtual tokens");
  }

  models::Transformer<T, Device>& model_;
  index_t N_, C_;
  models::ParameterBuffer<T, typename Device::Memory> params_;
};

// What adapter_config.json records about how the prompt was made.
struct PromptTuningFileInfo {
  std::string base_model;  // base_model_name_or_path (and the tokenizer's)
  std::string init_text;   // "" when random
};

// Writes adapter_config.json and adapter_model.safetensors (dtype "F32", "BF16" or "F16") into dir.
template <element T, class Device>
void save_peft_prompt(const PromptTuning<T, Device>& prompt, const models::TransformerConfig& config,
                      const PromptTuningFileInfo& info, const std::filesystem::path& dir,
                      const std::string& dtype = "F32") {
  const index_t N = prompt.num_virtual_tokens(), C = config.hidden_size;
  const std::vector<T> host = prompt.host_values();
  const std::vector<float> values(host.begin(), host.end());
  const std::vector<std::byte> bytes = io::encode_floats(values, dtype);
  io::write_safetensors(dir / "adapter_model.safetensors", {{"prompt_embeddings", dtype, {N, C}, bytes, {}}},
                        {{"format", "pt"}});
  nlohmann::ordered_json c;
  c["peft_type"] = "PROMPT_TUNING";
  c["task_type"] = "CAUSAL_LM";
  c["base_model_name_or_path"] = info.base_model;
  c["num_virtual_tokens"] = N;
  c["token_dim"] = C;
  c["num_transformer_submodules"] = 1;
  c["num_attention_heads"] = config.num_heads;
  c["num_layers"] = config.num_layers;
  const bool text = !info.init_text.empty();
  c["prompt_tuning_init"] = text ? "TEXT" : "RANDOM";
  c["prompt_tuning_init_text"] = text ? nlohmann::ordered_json(info.init_text) : nlohmann::ordered_json();
  c["tokenizer_name_or_path"] = text ? nlohmann::ordered_json(info.base_model) : nlohmann::ordered_json();
  c["tokenizer_kwargs"] = nullptr;
  io::write_peft_config(dir, std::move(c));
}

// Loads a PEFT prompt-tuning adapter's virtual tokens; their count and width must be this prompt's.
template <element T, class Device>
void load_peft_prompt(PromptTuning<T, Device>& prompt, const models::TransformerConfig& config,
                      const std::filesystem::path& dir) {
  const auto config_file = dir / "adapter_config.json";
  if (!std::filesystem::exists(config_file))
    throw Error(dir.string() + ": not a PEFT adapter directory (no adapter_config.json)");
  const nlohmann::json c = io::read_json_file(config_file);
  const std::string where = config_file.string() + ": ";
  const std::string type = c.value("peft_type", "");
  if (type != "PROMPT_TUNING")
    throw Error(where + "peft_type \"" + type + "\" is not a prompt-tuning adapter; allowed: PROMPT_TUNING");
  if (c.value("num_transformer_submodules", 1) != 1)
    throw Error(where + "num_transformer_submodules " + c["num_transformer_submodules"].dump() +
                " belongs to an encoder-decoder model; allowed: 1");
  const index_t N = prompt.num_virtual_tokens(), C = config.hidden_size;
  if (c.value("num_virtual_tokens", index_t(0)) != N)
    throw Error(where + "num_virtual_tokens " + c.value("num_virtual_tokens", nlohmann::json()).dump() +
                " differs from this run's " + std::to_string(N));
  const auto file = io::open_adapter_weights(dir);
  const io::TensorView* t = file.find("prompt_embeddings");
  const std::string file_where = file.path().string() + ": ";
  if (!t) throw Error(file_where + "has no \"prompt_embeddings\" tensor");
  if (t->shape != std::vector<std::int64_t>{N, C})
    throw Error(file_where + "\"prompt_embeddings\" is not [" + std::to_string(N) + ", " + std::to_string(C) +
                "] (virtual tokens x hidden size)");
  std::vector<T> values(std::size_t(N * C));
  io::copy_elements(file, *t, values.data(), N * C);
  prompt.set_values(values);
}

}  // namespace ft::adapters
