#pragma once
// The validation loss: every validation row once, in batches, no gradient.
// Each rank takes its share of the batches; the sums are added over ranks
// (the loss is computed once per batch, where the model's head is).
#include <algorithm>
#include <cmath>
#include <limits>
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
// `batch(g)` makes this rank's micro-batch g of `mine`.
template <element T, class M, class D, class Batch, class Each>
void forward_pass(Run<T, M, D>& run, std::int64_t mine, Batch&& batch, models::SequenceObjective* objective,
                  const std::string& what, Progress* bar, Each&& each) {
  run.adapter->set_training(false, 0);
  const auto batches = std::int64_t(run.comm->max(double(mine), what));
  for (std::int64_t g = 0; g < batches; ++g) {
    data::MicroBatch m = batch(std::min(g, mine - 1));
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
  const data::BatchPlan& plan = *run.eval_plan;
  auto batch = [&](std::int64_t g) {
    data::MicroBatch m = plan.micro_batch(g);
    if (run.preference) prepare_pairs(*run.preference, run.reference, m, true);
    return m;
  };
  if (run.preference && run.preference->adds_nll()) {  // the term is the mean over all validation pairs' tokens
    double counts[2] = {0, 0};
    for (std::int64_t g = 0; g < plan.pass_batches(); ++g) {
      const data::MicroBatch m = batch(g);
      counts[0] += double(m.batch.pairs);
      counts[1] += run.preference->nll_tokens(m.batch);
    }
    run.parallel->data_group().all_reduce_sum(std::span<double>(counts), "the validation's pairs").wait();
    run.preference->normalise_nll(counts[0], counts[1]);
  }
  forward_pass(run, plan.pass_batches(), batch, run.preference.get(), "the validation batches", nullptr,
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
    for (std::size_t f = 0; f < preference_metric_count(run.preference->kind()); ++f)
      j[preference_metric_names[f]] = metrics[f];
    j["pairs"] = std::int64_t(scored);
    return j;
  }
  j["perplexity"] = std::exp(j["loss"].get<double>());
  j["tokens"] = std::int64_t(scored);
  return j;
}

// The reference's log-probability of the pairs `rows` of `plan` (each rank
// names those it needs), from forward passes of the model as it is now, in
// batches of the evaluation's size: a table with two entries a pair of the
// plan (its chosen, then its rejected example), NaN for pairs no rank needs.
// Every rank gets the whole table.
template <element T, class M, class D>
std::vector<double> reference_pass(Run<T, M, D>& run, const data::BatchPlan& plan, std::vector<std::int64_t> rows,
                                   const std::string& what) {
  const recipe::Recipe& r = run.recipe;
  const auto size = std::size_t(r.train.per_device_eval_batch_size > 0 ? r.train.per_device_eval_batch_size
                                                                       : r.train.per_device_train_batch_size);
  // The pairs any rank needs, shared out over the data shards so that each
  // is scored once (the ranks of a pipeline share a shard, and its last
  // stage scores).
  std::vector<double> needed(std::size_t(plan.rows()), 0.0);
  for (std::int64_t row : rows) needed[std::size_t(row)] = 1;
  run.comm->all_reduce_sum(std::span<double>(needed), "the pairs the reference scores").wait();
  const data::Shard shard = run.parallel->data_shard();
  rows.clear();
  std::int64_t k = 0;
  for (std::size_t row = 0; row < needed.size(); ++row)
    if (needed[row] > 0 && k++ % shard.world == shard.rank) rows.push_back(std::int64_t(row));
  const auto mine = std::int64_t((rows.size() + size - 1) / size);
  auto batch = [&](std::int64_t g) {
    if (rows.empty()) return plan.batch_of_rows({0});  // a rank with no pairs still joins the job's forwards
    const auto first = rows.begin() + std::ptrdiff_t(std::size_t(g) * size);
    return plan.batch_of_rows({first, first + std::ptrdiff_t(std::min(size, rows.size() - std::size_t(g) * size))});
  };
  std::vector<double> table(std::size_t(plan.corpus().size()), 0.0), scored(table.size(), 0.0);
  SequenceLogps recorder;
  Progress bar("reference (" + what + ")", long(mine));
  forward_pass(run, mine, batch, &recorder, "the reference's " + what + " batches",
               run.comm->rank() == 0 ? &bar : nullptr, [&](const data::MicroBatch& m, double) {
                 const std::vector<double> logps = recorder.take();
                 if (logps.empty()) return;  // the head is on another rank
                 for (std::size_t i = 0; i < m.rows.size(); ++i) {
                   const auto pair = std::size_t(m.rows[i]);
                   table[2 * pair] = logps[i];
                   table[2 * pair + 1] = logps[m.rows.size() + i];
                   scored[2 * pair] = scored[2 * pair + 1] = 1;
                 }
               });
  bar.finish();
  run.comm->all_reduce_sum(std::span<double>(table), "the reference's log-probabilities").wait();
  run.comm->all_reduce_sum(std::span<double>(scored), "the pairs the reference scored").wait();
  for (std::size_t i = 0; i < table.size(); ++i)
    if (scored[i] == 0) table[i] = std::numeric_limits<double>::quiet_NaN();  // not needed by this run
  return table;
}

}  // namespace ft::train
