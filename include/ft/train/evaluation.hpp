#pragma once
// The validation loss: every validation row once, in batches, no gradient.
// Each rank takes its share of the batches; the sums are added over ranks
// (the loss is computed once per batch, where the model's head is).
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/progress.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

// Forward passes over one pass of a plan's batches on every rank: `each`
// is called with each micro-batch and its forward's loss. Ranks may hold one
// batch more or less of the pass; all run as many forwards as the largest
// share (ZeRO-3's gathers are collectives), and a rank past its share
// repeats its last batch, which `each` is not called for.
template <element T, class M, class D, class Each>
void forward_pass(Run<T, M, D>& run, const data::BatchPlan& plan, models::SequenceObjective* objective,
                  const std::string& what, Progress* bar, Each&& each) {
  run.adapter->set_training(false, 0);
  const std::int64_t mine = plan.pass_batches();
  const auto batches = std::int64_t(run.comm->max(double(mine), what));
  for (std::int64_t g = 0; g < batches; ++g) {
    data::MicroBatch m = plan.micro_batch(std::min(g, mine - 1));
    if (objective && objective == run.preference.get()) run.reference.attach(m, &plan == run.eval_plan.get());
    const double l = run.parallel->evaluate(m.batch, objective);
    if (bar) bar->update(long(g + 1));
    if (g < mine) each(m, l);
  }
}

// The metrics record of an evaluation at `step`; null when the run has no
// validation data. Under preference tuning the loss is the mean over the
// validation pairs, and the metrics are TRL's, of all pairs together.
template <element T, class M, class D>
nlohmann::ordered_json evaluate(Run<T, M, D>& run, std::int64_t step) {
  if (!run.eval_plan) return nullptr;
  double loss = 0, scored = 0;
  PreferenceSums sums;
  forward_pass(run, *run.eval_plan, run.preference.get(), "the validation batches", nullptr,
               [&](const data::MicroBatch& m, double l) {
                 loss += l;
                 scored += double(m.batch.loss_units());
                 if (!run.preference) return;
                 for (const PreferenceSums& s : run.preference->take())
                   for (std::size_t f = 0; f < PreferenceSums::fields; ++f) sums.v[f] += s.v[f];
               });
  if (run.preference) run.preference->take();  // the repeated batches' sums
  loss = run.comm->sum(loss, "the validation loss");
  scored = run.parallel->data_group().sum(scored, "the validation tokens");
  nlohmann::ordered_json j;
  j["step"] = step;
  j["loss"] = loss / std::max(1.0, scored);
  if (run.preference) {
    run.comm->all_reduce_sum(std::span<double>(sums.v), "the validation's preference metrics").wait();
    const auto metrics = preference_metrics_of(sums);
    for (std::size_t f = 0; f < preference_metrics; ++f) j[preference_metric_names[f]] = metrics[f];
    j["pairs"] = std::int64_t(scored);
    return j;
  }
  j["perplexity"] = std::exp(j["loss"].get<double>());
  j["tokens"] = std::int64_t(scored);
  return j;
}

// The reference's log-probability of every example of `plan`'s corpus (a
// pair's chosen, then its rejected), from one forward pass of the model as
// it is now; each rank scores its share, and the job adds them up (each
// example is scored on exactly one rank, the one with its share and the head).
template <element T, class M, class D>
std::vector<double> reference_pass(Run<T, M, D>& run, const data::BatchPlan& training_like, const std::string& what) {
  const recipe::Recipe& r = run.recipe;
  const std::int64_t rows = r.train.per_device_eval_batch_size > 0 ? r.train.per_device_eval_batch_size
                                                                   : r.train.per_device_train_batch_size;
  const data::BatchPlan plan(training_like.corpus(), rows, r.data.max_seq_length, false, run.text.pad_id,
                             std::uint64_t(r.seed), data::Cover::one_pass, run.adapter->virtual_tokens(),
                             run.parallel->data_shard(), true);
  std::vector<double> table(std::size_t(plan.corpus().size()), 0.0);
  SequenceLogps recorder;
  Progress bar("reference (" + what + ")", long(plan.pass_batches()));
  forward_pass(run, plan, &recorder, "the reference's " + what + " batches", run.comm->rank() == 0 ? &bar : nullptr,
               [&](const data::MicroBatch& m, double) {
                 const std::vector<double> logps = recorder.take();
                 if (logps.empty()) return;  // the head is on another rank
                 for (std::size_t i = 0; i < m.rows.size(); ++i) {
                   const auto pair = std::size_t(m.rows[i]);
                   table[2 * pair] = logps[i];
                   table[2 * pair + 1] = logps[m.rows.size() + i];
                 }
               });
  bar.finish();
  run.comm->all_reduce_sum(std::span<double>(table), "the reference's log-probabilities").wait();
  return table;
}

}  // namespace ft::train
