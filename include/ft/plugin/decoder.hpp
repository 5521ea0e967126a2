#pragma once
// An inference engine a plugin built (abi.h's ft_engine_factory) as the host's
// infer::Decoder: ftrun generate, chat and serve batch requests through it
// as through an engine of their own, and the model runs where the plugin
// put it (its device, its element type). A failure the plugin reports
// becomes an exception with its line: ft::Error for bad input,
// ft::OutOfMemory when an allocation failed, std::runtime_error for any
// other (a device's error). Free slots are counted here; the plugin keeps
// the caches.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/infer/decoder.hpp"
#include "ft/infer/load_options.hpp"
#include "ft/plugin/loader.hpp"

namespace ft::plugin {

class PluginDecoder final : public infer::Decoder {
public:
  // Loads the model directory with the engine, as `options` say; a failure
  // throws as above, with the plugin's reason.
  PluginDecoder(const EngineFactory& factory, const std::filesystem::path& model_dir,
                const infer::LoadOptions& options = {})
      : plugin_(factory.plugin), entry_(factory.entry) {
    check(entry_->open(model_dir.c_str(), infer::to_json(options).c_str(), &engine_, &append, &why_));
    vocab_size_ = index_t(entry_->vocab_size(engine_));
  }
  ~PluginDecoder() override {
    if (engine_) entry_->close(engine_);
  }
  PluginDecoder(const PluginDecoder&) = delete;
  PluginDecoder& operator=(const PluginDecoder&) = delete;

  index_t vocab_size() const override { return vocab_size_; }
  int load_adapter(const std::filesystem::path& dir) override {
    std::int32_t index = -1;
    check(entry_->load_adapter(engine_, dir.c_str(), &index, &append, &why_));
    adapters_ = index + 1;
    return index;
  }
  int adapters() const override { return adapters_; }
  index_t virtual_tokens(int adapter) const override {
    const std::int64_t n = entry_->virtual_tokens(engine_, adapter);
    if (n < 0) throw Error("internal: no adapter " + std::to_string(adapter));
    return index_t(n);
  }

  void reserve(index_t max_model_len, index_t slots) override {
    max_model_len_ = slots_ = free_ = 0;  // the old caches are gone even if the new ones fail
    check(entry_->reserve(engine_, max_model_len, slots, &append, &why_));
    max_model_len_ = max_model_len;
    slots_ = free_ = slots;
  }
  index_t max_model_len() const override { return max_model_len_; }
  index_t slots() const override { return slots_; }
  index_t free_slots() const override { return free_; }
  std::size_t bytes_per_sequence() const override { return std::size_t(entry_->cache_bytes(engine_)); }
  index_t acquire() override {
    const index_t slot = index_t(entry_->acquire(engine_));
    if (slot >= 0) --free_;
    return slot;
  }
  void release(index_t slot) override {
    check(entry_->release(engine_, slot, &append, &why_));
    ++free_;
  }

  void step(std::span<const infer::SlotStep> steps, float* logits) override {
    steps_.clear();
    for (const infer::SlotStep& s : steps)
      steps_.push_back({s.slot, s.tokens.data(), s.tokens.size(), std::int32_t(s.adapter), s.every_position ? 1 : 0});
    check(entry_->step(engine_, steps_.data(), steps_.size(), logits, &append, &why_));
  }

  infer::Score score(const infer::ScoreRequest& r, float* logits) override {
    infer::Score s;
    check(entry_->score(engine_, r.ids.data(), r.labels.empty() ? nullptr : r.labels.data(),
                        r.documents.empty() ? nullptr : r.documents.data(), r.ids.size(), r.logits_at.data(),
                        r.logits_at.size(), &s.loss_sum, &s.scored, logits, &append, &why_));
    return s;
  }

private:
  static void append(void* context, const char* text) { *static_cast<std::string*>(context) += text; }

  // Throws the plugin's line for a non-zero status, of the kind the status
  // says (the bytes an allocation asked for are in the line: they do not
  // cross the boundary).
  void check(int status) {
    std::string why = std::move(why_);
    why_.clear();
    if (status == 0) return;
    if (why.empty()) why = "the plugin's inference engine failed without saying why";
    if (status == 2) throw Error(why);
    if (status == 3) throw OutOfMemory(why, 0);
    throw std::runtime_error(why);
  }

  std::shared_ptr<const Plugin> plugin_;  // keeps the library loaded while the engine lives
  const ft_engine_factory* entry_;
  void* engine_ = nullptr;
  index_t vocab_size_ = 0, max_model_len_ = 0, slots_ = 0, free_ = 0;
  int adapters_ = 0;
  std::string why_;
  std::vector<ft_sequence_step> steps_;
};

}  // namespace ft::plugin
