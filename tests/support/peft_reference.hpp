#pragma once
// One batch of an adapted model against PEFT's float64 reference
// (tools/make_train_fixtures.py, tools/make_moe_lora_fixtures.py): the mean
// loss, the logits, and every lora_A / lora_B gradient, B put in PEFT's
// layout by the adapter files' own rule (adapters/lora_files.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/compare.hpp"
#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/safetensors.hpp>

namespace ft::testing {

struct PeftTolerance {
  double loss, logits, gradient;
};

// Runs `batch` forward and backward through `model` with `lora` attached and
// checks it against `expected`; returns how many gradients it compared.
template <class T>
std::size_t check_against_peft_reference(models::Transformer<T>& model, adapters::LoraModel<T>& lora,
                                         const models::Batch& batch, const io::SafetensorsFile& expected,
                                         PeftTolerance tol) {
  const index_t V = model.config().vocab_size;
  std::vector<T> logits(std::size_t(batch.rows() * V));
  for (auto& b : lora.blocks()) b->parameters().zero_grads();
  const double count = double(batch.scored_tokens());
  const double loss = model.forward_backward(batch, {.token_count = count}, logits.data()) / count;
  const double want_loss = read_tensor<float>(expected, "loss")[0];
  CHECK(std::abs(loss - want_loss) / want_loss <= tol.loss);
  CHECK(relative_error(logits, read_tensor<float>(expected, "logits")) <= tol.logits);

  std::size_t compared = 0;
  for (auto& block : lora.blocks())
    for (std::size_t k = 0; k < block->targets().size(); ++k) {
      const adapters::LoraTarget& t = block->targets()[k];
      const std::string prefix = "grad.base_model.model." + t.module;
      CAPTURE(t.module);
      const index_t r = block->rank_of(k);
      const std::vector<T> da(block->da_of(k), block->da_of(k) + t.experts * r * t.in);
      CHECK(relative_error(da, read_tensor<float>(expected, prefix + ".lora_A.weight")) <= tol.gradient);
      std::vector<T> db(std::size_t(t.experts * t.rows * r));
      adapters::detail::permute_b(t, model.config().num_heads, r, block->db_of(k), db.data(), true);
      CHECK(relative_error(db, read_tensor<float>(expected, prefix + ".lora_B.weight")) <= tol.gradient);
      compared += 2;
    }
  return compared;
}

}  // namespace ft::testing
