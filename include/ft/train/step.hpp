#pragma once
// One optimizer step:
//   1. take the step's gradient_accumulation_steps micro-batches from the
//      plan's stream (data/batches.hpp): micro-batch k = step x accumulation
//      + i, so the position in the data is a function of the step
//   2. count the scored tokens of all of them, on every rank; every
//      micro-batch's loss gradient is divided by that total, so the step's
//      gradient is the mean over the whole accumulated global batch, however
//      its tokens fall into micro-batches and ranks (dividing per micro-batch
//      overweights short ones)
//   3. forward + backward each micro-batch; the parallelism's hooks reduce
//      each stage's gradient into the step's (parallel/)
//   4. under fp16, undo the loss scale; a non-finite gradient skips the step
//      and halves the scale, 2000 good steps in a row double it (torch's
//      GradScaler defaults)
//   5. clip the global norm, step the optimizer at the schedule's rate
// With the optimizer fused into backward (one micro-batch, no clipping, no
// loss scale: the Trainer checks) each stage is stepped inside backward.
#include <array>
#include <chrono>
#include <cmath>
#include <ranges>
#include <vector>

#include "ft/core/random.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

struct StepResult {
  double loss = 0, grad_norm = 0, seconds = 0;
  double bubble = 0;  // the share of the step's schedule this rank waited for pipeline peers
  double aux_loss = 0;  // a mixture of experts' load-balancing loss, the job's mean over scored tokens
  // Preference tuning: the step's mean over its micro-batches of each metric (train/preference.hpp).
  std::array<double, preference_metrics> preference{};
  std::int64_t samples = 0, tokens = 0, dataset_tokens = 0, scored = 0;  // the job's, all ranks
  bool skipped = false;
};

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

template <element T, class M, class D>
StepResult train_step(Run<T, M, D>& run, std::int64_t step, double lr) {
  const auto start = std::chrono::steady_clock::now();
  D::Memory::stats().reset_peak();
  const recipe::Recipe& r = run.recipe;
  parallel::Runtime<T, M, D>& parallel = *run.parallel;
  const std::int64_t accumulation = r.train.gradient_accumulation_steps;
  std::vector<models::Batch> batches;
  StepResult s;
  double nll_tokens = 0;  // a preference objective's cross-entropy term's
  for (data::MicroBatch m : run.train_plan->micro_batches(step * accumulation) | std::views::take(accumulation)) {
    if (run.preference) {
      prepare_pairs(*run.preference, run.reference, m, false);
      nll_tokens += run.preference->nll_tokens(m.batch);
    }
    s.dataset_tokens += m.dataset_tokens;
    s.samples += m.batch.pairs > 0 ? m.batch.pairs : m.batch.B;  // a row of the data: a pair, as TRL counts
    s.tokens += m.batch.rows();
    s.scored += m.batch.loss_units();
    batches.push_back(std::move(m.batch));
  }
  // The job's counts: scored tokens (pairs) divide the loss; the others are metrics.
  double counts[5] = {double(s.scored), double(s.tokens), double(s.dataset_tokens), double(s.samples), nll_tokens};
  parallel.data_group().all_reduce_sum(std::span<double>(counts), "the step's token counts").wait();
  s.scored = std::int64_t(counts[0]);
  s.tokens = std::int64_t(counts[1]);
  s.dataset_tokens = std::int64_t(counts[2]);
  s.samples = std::int64_t(counts[3]);
  if (run.preference) run.preference->normalise_nll(counts[0], counts[4]);
  const double divisor = std::max(1.0, counts[0]);
  parallel::StepWork work{.step = step + 1, .batches = batches, .objective = run.preference.get(),
                          .begin_micro_batch = [&](std::size_t k) {
                            run.adapter->set_training(true, derive_key(std::uint64_t(r.seed),
                                                                       std::uint64_t(step * accumulation) + k));
                          }};
  parallel.begin_step();
  double loss_sum = 0;
  if (r.train.fuse_optimizer_with_backward) {
    work.token_count = divisor;
    work.fused = true;
    work.lr = lr;
    work.optimizer_step = ++run.optimizer_step;
    loss_sum = parallel.forward_backward(work);
    s.grad_norm = std::sqrt(parallel.fused_squares());
  } else {
    LossScale& scale = run.loss_scale;
    work.token_count = divisor / scale.value;
    loss_sum = parallel.forward_backward(work);
    if (scale.enabled) parallel.scale_grads(1.0 / scale.value);
    s.grad_norm = parallel.clip(r.train.max_grad_norm);
    if (scale.enabled && !std::isfinite(s.grad_norm)) {
      s.skipped = true;  // overflow in f16: this step's update is dropped, the scale lowered
      scale.value /= 2;
      scale.good_steps = 0;
    } else {
      parallel.step(lr, ++run.optimizer_step);
      if (scale.enabled && ++scale.good_steps == 2000) {
        scale.value *= 2;
        scale.good_steps = 0;
      }
    }
  }
  if (run.preference) s.preference = preference_step_metrics(*run.preference, batches.size(), *run.comm);
  s.bubble = std::max(0.0, parallel.bubble_fraction());
  s.loss = run.comm->sum(loss_sum, "the step's loss") / divisor;
  if (run.model->config().moe.aux_loss_coef > 0)
    s.aux_loss = run.comm->sum(run.model->take_router_aux(), "the step's load-balancing loss") / divisor;
  s.seconds = seconds_since(start);
  return s;
}

}  // namespace ft::train
