#pragma once
// The validation loss: every validation row once, in batches, no gradient.
// Each rank takes its share of the batches; the sums are added over ranks
// (the loss is computed once per batch, where the model's head is).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "ft/train/run.hpp"

namespace ft::train {

// The metrics record of an evaluation at `step`; null when the run has no validation data.
template <element T, class M, class D>
nlohmann::ordered_json evaluate(Run<T, M, D>& run, std::int64_t step) {
  if (!run.eval_plan) return nullptr;
  run.adapter->set_training(false, 0);
  double loss = 0, scored = 0;
  // Ranks may hold one batch more or less of the pass; all run as many
  // forwards as the largest share (ZeRO-3's gathers are collectives), and a
  // rank past its share repeats its last batch without counting it.
  const std::int64_t mine = run.eval_plan->pass_batches();
  const auto batches = std::int64_t(run.comm->max(double(mine), "the validation batches"));
  comm::Communicator& data = run.parallel->data_group();
  for (std::int64_t g = 0; g < batches; ++g) {
    const data::MicroBatch m = run.eval_plan->micro_batch(std::min(g, mine - 1));
    const double l = run.parallel->evaluate(m.batch);
    if (g >= mine) continue;
    loss += l;
    scored += double(m.batch.scored_tokens());
  }
  loss = run.comm->sum(loss, "the validation loss");
  scored = data.sum(scored, "the validation tokens");
  nlohmann::ordered_json j;
  j["step"] = step;
  j["loss"] = loss / std::max(1.0, scored);
  j["perplexity"] = std::exp(j["loss"].get<double>());
  j["tokens"] = std::int64_t(scored);
  return j;
}

}  // namespace ft::train
