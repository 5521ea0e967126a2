#pragma once
// Greedy decoding, to show what a model answers before and after training.
// Each new token re-runs the whole sequence (no key/value cache): for the
// few dozen tokens of a preview on a small model this costs seconds, and it
// reuses the training forward exactly. With prompt tuning the rows start
// with the prompt's virtual tokens, as in training. `agree`, when given,
// turns this rank's choice of each token into the job's (rank 0's), so
// that ranks whose logits may differ in the last bit (split experts
// multiply each rank's rows at another place of one GEMM) run as many
// steps, and the collectives in each forward stay matched.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "ft/models/batch.hpp"
#include "ft/models/transformer.hpp"

namespace ft::train {

template <element T, class Device>
std::vector<std::int32_t> generate_greedy(models::Transformer<T, Device>& model, std::vector<std::int32_t> tokens,
                                          index_t max_new_tokens, std::int32_t eos_id,
                                          index_t virtual_tokens = 0, const models::StageHooks& hooks = {},
                                          const std::function<std::int32_t(std::int32_t)>& agree = {}) {
  const index_t V = model.config().vocab_size;
  const std::size_t prompt = tokens.size();
  using Logits = Tensor<T, typename Device::Memory>;
  Logits logits;
  std::vector<T> last(std::size_t(V), T(0.0f));  // the last position's logits, on the host
  for (index_t i = 0; i < max_new_tokens; ++i) {
    const index_t n = virtual_tokens + index_t(tokens.size());
    std::vector<std::int32_t> row(std::size_t(virtual_tokens), 0);  // placeholders the prompt adapter fills
    row.insert(row.end(), tokens.begin(), tokens.end());
    models::Batch batch = models::causal_lm_batch(1, n, std::move(row));
    batch.virtual_tokens = virtual_tokens;
    logits = Logits(Shape{n * V}, typename Logits::Uninitialized{});
    model.forward_backward(batch, {.backward = false}, logits.data(), hooks);
    Device::to_host(last.data(), logits.data() + (n - 1) * V, last.size() * sizeof(T));
    std::int32_t next = std::int32_t(std::ranges::max_element(last, [](T a, T b) {
                                        return float(a) < float(b);
                                      }) - last.begin());
    if (agree) next = agree(next);
    if (next == eos_id) break;
    tokens.push_back(next);
  }
  return {tokens.begin() + std::ptrdiff_t(prompt), tokens.end()};
}

}  // namespace ft::train
