#pragma once
// What continuous batching drives (generate.hpp): a model with its adapters
// and a fixed set of key/value cache slots, answering one step at a time,
// whatever its element type and device. Sequences hold slots by number, so a
// decoder may live in this process (engine_decoder.hpp, over an Engine) or
// behind the plugin boundary (plugin/decoder.hpp), where ftrun reaches the
// engine a model plugin built for its device.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "ft/tensor/shape.hpp"

namespace ft::infer {

// One sequence's part of a step: its slot, its new tokens (at the slot's
// positions from its length on) and its adapter (-1 for none); with
// every_position, the logits after each new token, not only the last (a
// prompt's log-probabilities).
struct SlotStep {
  index_t slot;
  std::span<const std::int32_t> tokens;
  int adapter = -1;
  bool every_position = false;

  index_t logit_rows() const { return every_position ? index_t(tokens.size()) : 1; }
};

// A packed row of documents scored without caches (what ftrun eval runs):
// token ids, HF's labels (empty: the ids themselves; -100 is not scored;
// the target of a position is the label after it within its document) and
// each token's document (empty: one document), which keeps attention and
// positions within it. `logits_at`: positions whose next-token logits are wanted.
struct ScoreRequest {
  std::span<const std::int32_t> ids, labels, documents;
  std::span<const std::int64_t> logits_at;
};
// The summed cross-entropy over the scored targets, and their count.
struct Score {
  double loss_sum = 0;
  std::int64_t scored = 0;
};

class Decoder {
public:
  virtual ~Decoder() = default;

  virtual index_t vocab_size() const = 0;
  // Loads a PEFT adapter for sequences to name by the returned index.
  virtual int load_adapter(const std::filesystem::path& dir) = 0;
  virtual int adapters() const = 0;
  // The positions a sequence's first step adds before its prompt (prompt tuning's virtual tokens).
  virtual index_t virtual_tokens(int adapter) const = 0;

  // Makes `slots` caches of max_model_len positions each, in place of any
  // there were (none may be held).
  virtual void reserve(index_t max_model_len, index_t slots) = 0;
  virtual index_t max_model_len() const = 0;
  virtual index_t slots() const = 0;
  virtual index_t free_slots() const = 0;
  virtual std::size_t bytes_per_sequence() const = 0;
  // A free slot with an empty cache, or -1 when every slot is held.
  virtual index_t acquire() = 0;
  virtual void release(index_t slot) = 0;

  // Runs each sequence's new tokens and writes its next-token logits to
  // logits [its logit_rows(), vocab_size], sequence after sequence (Engine::step).
  virtual void step(std::span<const SlotStep> steps, float* logits) = 0;

  // Scores a request through the whole model, without touching the caches;
  // logits [logits_at.size(), vocab_size] receive the requested positions' next-token logits.
  virtual Score score(const ScoreRequest& request, float* logits) = 0;
};

}  // namespace ft::infer
