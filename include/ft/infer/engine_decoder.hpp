#pragma once
// The Decoder (decoder.hpp) of an Engine in this process, with its pool of
// key/value caches on the engine's device: what a model plugin hands ftrun
// across the plugin boundary, and what tests drive directly.
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/infer/decoder.hpp"
#include "ft/infer/engine.hpp"
#include "ft/infer/kv_cache.hpp"
#include "ft/models/batch.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::infer {

// A Decoder over an Engine in this process (not owned; it must outlive the
// decoder), with its own pool of caches on the engine's device.
template <element T, class Device = device::Cpu>
class EngineDecoder final : public Decoder {
public:
  explicit EngineDecoder(Engine<T, Device>& engine) : engine_(engine) {}
  EngineDecoder(Engine<T, Device>& engine, index_t max_model_len, index_t slots) : engine_(engine) {
    reserve(max_model_len, slots);
  }

  index_t vocab_size() const override { return engine_.model().config().vocab_size; }
  int load_adapter(const std::filesystem::path& dir) override { return engine_.load_adapter(dir); }
  int adapters() const override { return engine_.adapters(); }
  index_t virtual_tokens(int adapter) const override { return engine_.virtual_tokens(adapter); }

  void reserve(index_t max_model_len, index_t slots) override {
    if (pool_ && pool_->free_slots() != pool_->slots())
      throw Error("internal: key/value caches replaced while sequences hold them");
    pool_.reset();  // the old caches' memory is free before the new ones take theirs
    pool_ = std::make_unique<KvPool<T, Device>>(engine_.model().config(), max_model_len, slots);
  }
  // Before reserve() (or after one that failed) there are no slots.
  index_t max_model_len() const override { return pool_ ? pool_->max_model_len() : 0; }
  index_t slots() const override { return pool_ ? pool_->slots() : 0; }
  index_t free_slots() const override { return pool_ ? pool_->free_slots() : 0; }
  std::size_t bytes_per_sequence() const override { return pool_ ? pool_->bytes_per_sequence() : 0; }
  index_t acquire() override { return pool_ ? pool_->acquire() : -1; }
  void release(index_t slot) override {
    if (!pool_) throw Error("internal: key/value cache slot " + std::to_string(slot) + " released before reserve()");
    pool_->release(slot);
  }

  void step(std::span<const SlotStep> steps, float* logits) override {
    if (!pool_) throw Error("internal: a decoder stepped before reserve() made its caches");
    steps_.clear();
    for (const SlotStep& s : steps) {
      if (!pool_->held(s.slot))
        throw Error("internal: a step names key/value cache slot " + std::to_string(s.slot) + ", held by no sequence");
      steps_.push_back({&pool_->cache(s.slot), s.tokens, s.adapter, s.every_position});
    }
    engine_.step(steps_, logits);
  }

  Score score(const ScoreRequest& r, float* logits) override {
    const index_t n = index_t(r.ids.size()), V = vocab_size();
    const models::Batch batch =
        models::causal_lm_batch(1, n, {r.ids.begin(), r.ids.end()}, {r.labels.begin(), r.labels.end()},
                                {r.documents.begin(), r.documents.end()});
    const models::HeadOptions options{.backward = false};
    if (r.logits_at.empty()) return {engine_.model().forward_backward(batch, options), batch.scored_tokens()};
    for (std::int64_t at : r.logits_at)
      if (at < 0 || at >= n)
        throw Error("logits asked at position " + std::to_string(at) + " of a row of " + std::to_string(n) + " tokens");
    // Every position's logits, in the device's memory, then the rows asked for.
    Tensor<T, typename Device::Memory> all(Shape{n, V}, typename Tensor<T, typename Device::Memory>::Uninitialized{});
    const double loss = engine_.model().forward_backward(batch, options, all.data());
    std::vector<T> row(static_cast<std::size_t>(V));
    for (std::size_t i = 0; i < r.logits_at.size(); ++i) {
      Device::to_host(row.data(), all.data() + r.logits_at[i] * V, std::size_t(V) * sizeof(T));
      for (index_t v = 0; v < V; ++v) logits[i * std::size_t(V) + std::size_t(v)] = float(row[std::size_t(v)]);
    }
    return {loss, batch.scored_tokens()};
  }

private:
  Engine<T, Device>& engine_;
  std::unique_ptr<KvPool<T, Device>> pool_;
  std::vector<SequenceStep<T, Device>> steps_;
};

}  // namespace ft::infer
