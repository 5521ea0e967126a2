#pragma once
// A micro-batch as the model consumes it: B rows of T tokens, flattened to
// N = B * T. targets[n] is the token row n must predict (-100: none), so the
// HF shift (labels[t + 1] scored at position t) happens once, here, when a
// batch is made. Packed rows carry a document id per token; positions then
// restart at every document. A batch for prompt tuning starts every row with
// virtual_tokens placeholder positions: their ids only have to be valid, an
// InputAdapter supplies their vectors, and nothing predicts them.
#include <cstdint>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::models {

struct Batch {
  index_t B = 0, T = 0;
  std::vector<std::int32_t> input_ids;  // [B * T]
  std::vector<std::int32_t> targets;    // [B * T], -100 = not scored
  std::vector<std::int32_t> positions;  // [B * T]
  std::vector<std::int32_t> documents;  // [B * T] or empty: one document per row
  index_t virtual_tokens = 0;           // leading positions of every row that an InputAdapter fills
  // [B]: each row's tokens before its padding (HF's attention_mask, which
  // keeps padding out of a mixture's load-balancing loss); empty: none padded.
  std::vector<index_t> lengths;
  // Preference pairs (train/preference.hpp): rows [0, pairs) are the chosen
  // completions and rows [pairs, 2 pairs) the rejected ones of the same
  // prompts, in order, as TRL concatenates them; 0: no pairs.
  index_t pairs = 0;
  // [B]: each row's completion log-probability under the reference model; empty until the run sets it.
  std::vector<double> reference_logps;
  // [B]: the position in each row whose target is its completion's first
  // token, when the prompt's tokens are scored too (ORPO's cross-entropy
  // over whole chosen sequences, train/preference.hpp); empty: every scored
  // target is the completion's.
  std::vector<index_t> completion_from;

  index_t rows() const { return B * T; }
  // What divides the loss: scored tokens, or pairs.
  index_t loss_units() const { return pairs > 0 ? pairs : scored_tokens(); }
  bool attends(index_t n) const { return lengths.empty() || n % T < lengths[std::size_t(n / T)]; }
  index_t scored_tokens() const {
    index_t n = 0;
    for (std::int32_t t : targets) n += t != -100;
    return n;
  }
};

// HF's causal-LM convention: labels (default: the inputs) shifted left by
// one; the last position of each row, and of each document when `documents`
// is given, predicts nothing.
inline Batch causal_lm_batch(index_t B, index_t T, std::vector<std::int32_t> input_ids,
                             const std::vector<std::int32_t>& labels = {},
                             std::vector<std::int32_t> documents = {}) {
  if (index_t(input_ids.size()) != B * T)
    throw Error("a batch of " + std::to_string(B) + " x " + std::to_string(T) + " needs " +
                std::to_string(B * T) + " token ids, got " + std::to_string(input_ids.size()));
  if (!labels.empty() && labels.size() != input_ids.size())
    throw Error("labels must have one entry per token (" + std::to_string(input_ids.size()) + "), got " +
                std::to_string(labels.size()));
  if (!documents.empty() && documents.size() != input_ids.size())
    throw Error("documents must have one entry per token (" + std::to_string(input_ids.size()) + "), got " +
                std::to_string(documents.size()));
  Batch batch;
  batch.B = B;
  batch.T = T;
  batch.targets.assign(std::size_t(B * T), -100);
  batch.positions.resize(std::size_t(B * T));
  const std::vector<std::int32_t>& source = labels.empty() ? input_ids : labels;
  for (index_t b = 0; b < B; ++b) {
    std::int32_t position = 0;
    for (index_t t = 0; t < T; ++t) {
      index_t n = b * T + t;
      bool new_document = !documents.empty() && t > 0 && documents[n] != documents[n - 1];
      if (new_document) position = 0;
      batch.positions[n] = position++;
      bool last_of_document = t + 1 == T || (!documents.empty() && documents[n + 1] != documents[n]);
      if (!last_of_document) batch.targets[n] = source[n + 1];
    }
  }
  batch.input_ids = std::move(input_ids);
  batch.documents = std::move(documents);
  return batch;
}

}  // namespace ft::models
