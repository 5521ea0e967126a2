#pragma once
// The training loop behind Trainer<...>::train(): set up (setup.hpp), then
// step after step (step.hpp), logging averaged metrics every logging_steps,
// evaluating every eval_steps (evaluation.hpp), checkpointing every
// save_steps (checkpointing.hpp); at the end (the last step, or a stop rule
// of stopping.hpp) the run's summary (summary.hpp), a last evaluation, a last
// checkpoint and the adapter's result (a PEFT adapter, an HF model); with
// checkpoint.save_strategy = "no" neither checkpoints nor the result. A
// stopping signal (core/signals.hpp) ends the run after the step in flight
// with a checkpoint of it.
//
// In a job of several ranks every rank runs this loop in step; rank 0 alone
// writes metrics.jsonl, TensorBoard, the run's description, `latest` and the
// final model, and only rank 0 removes temporary files. The metrics are the
// job's: tokens summed over ranks, peak memory the largest rank's.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/comm/world.hpp"
#include "ft/core/bytes.hpp"
#include "ft/core/process.hpp"
#include "ft/core/signals.hpp"
#include "ft/device/answer.hpp"
#include "ft/optim/schedule.hpp"
#include "ft/train/checkpoint.hpp"
#include "ft/train/checkpointing.hpp"
#include "ft/train/evaluation.hpp"
#include "ft/report/metrics.hpp"
#include "ft/train/preview.hpp"
#include "ft/train/run.hpp"
#include "ft/train/setup.hpp"
#include "ft/train/step.hpp"
#include "ft/train/stopping.hpp"
#include "ft/train/summary.hpp"

namespace ft::train {

// A run that cannot go on (NaN loss): the message names the step and the last good checkpoint.
struct TrainingStopped : Error {
  using Error::Error;
};

// A run an operator stopped with a signal after it saved a checkpoint: an
// outcome, neither bad input nor a failure (ftrun exits with code 5).
struct StoppedOnRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

// 134.5M, 2.44M, 58.2K: parameter counts as people say them.
inline std::string count_text(double n) {
  char buffer[32];
  if (n >= 1e9) std::snprintf(buffer, sizeof buffer, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buffer, sizeof buffer, "%.2fM", n / 1e6);
  else std::snprintf(buffer, sizeof buffer, "%.1fK", n / 1e3);
  return buffer;
}

inline std::string format(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", x);
  return buffer;
}

}  // namespace detail

// Device: where the model and the trainable state live (device/cpu.hpp);
// "peak_memory_bytes" is its memory's peak.
template <element T, class M, class Device = device::Cpu>
class Engine {
  using Memory = typename Device::Memory;

public:
  Engine(recipe::Recipe recipe, Policies<T, M, Device> policies) {
    run_.recipe = std::move(recipe);
    run_.policies = std::move(policies);
    run_.loss_scale.enabled = run_.policies.loss_scaling;
    run_.loss_scale.value = run_.loss_scale.enabled ? std::ldexp(1.0, int(run_.recipe.train.initial_scale_power)) : 1.0;
  }

  // Runs the recipe to the end; throws ft::Error for bad input, TrainingStopped
  // when the loss diverges, OutOfMemory (naming the phase) when an allocation fails.
  void run() {
    const recipe::Recipe& r = run_.recipe;
    if constexpr (requires { Memory::limit(); })
      if (!r.launch.memory_limit.empty()) Memory::limit() = parse_bytes(r.launch.memory_limit).value_or(0);
    try {
      run_phases();
    } catch (const OutOfMemory& e) {
      throw out_of_memory(e.what(), e.bytes());
    } catch (const std::bad_alloc&) {
      throw out_of_memory("the system refused an allocation", 0);
    }
  }

private:
  // The failure as one line naming the phase, and as a record in metrics.jsonl.
  OutOfMemory out_of_memory(const std::string& what, std::size_t bytes) {
    const std::string phase = run_.phase;
    if (!run_.out.empty() && (!run_.comm || run_.comm->rank() == 0)) {
      nlohmann::ordered_json j{{"split", "error"},
                               {"error", "out_of_memory"},
                               {"phase", phase},
                               {"requested_bytes", bytes},
                               {"allocated_bytes", Memory::stats().current()},
                               {"peak_memory_bytes", Memory::stats().peak()}};
      std::ofstream(run_.out / "metrics.jsonl", std::ios::app) << j.dump() << "\n";
    }
    return OutOfMemory("out of memory in " + phase + ": " + what, bytes);
  }

  void run_phases() {
    Run<T, M, Device>& run = run_;
    const recipe::Recipe& r = run.recipe;
    device::require_answer<Device>("strategy.device = \"" + std::string(Device::name) + "\"");
    // A device may bring its own transport for its buffers (NCCL on GPUs).
    if constexpr (requires { Device::join_job(0.0); }) comm_ = Device::join_job(r.launch.collective_timeout);
    else comm_ = comm::join_job(r.launch.collective_timeout);
    run.comm = comm_.get();
    comm::Communicator& comm = *comm_;
    run.enter("setup");
    agree_on_run(run);
    run.out = r.output_dir;
    if (comm.rank() == 0) {
      std::filesystem::create_directories(run.out);
      remove_stale_staging(run.out);
    }
    comm.barrier("the output directory", true);  // rank 0 may be deleting a killed run's leftovers
    const std::filesystem::path resume_from = resolve_resume(run.out, r.checkpoint.resume);
    // Before the model exists, so that the measurement's matrices do not add to its memory.
    run.peak_flops = measure_gemm_peak<Device, typename Device::template gemm_peak_element<T>>(Device::gemm_peak_size);

    load_text(run);
    load_data(run);
    build_model(run);
    const std::int64_t setup_peak = largest_peak();  // the measurement's matrices, or the model as loaded
    run.total_steps = total_steps(r, *run.train_plan);
    const optim::Schedule schedule{optim::schedule_from_name(r.train.lr_scheduler_type), r.train.learning_rate,
                                   optim::warmup_steps(r.train.warmup_steps, r.train.warmup_ratio, run.total_steps),
                                   run.total_steps};
    const bool saving = r.checkpoint.save_strategy != "no";
    std::int64_t step = 0;
    if (!resume_from.empty()) {
      step = resume(run, resume_from);
    } else if (const std::filesystem::path from = run.adapter->initial_weights(); !from.empty()) {
      run.adapter->load(from);
      run.parallel->values_loaded();
    }
    Memory::stats().reset_peak();
    start_preference(run, resume_from);
    const std::int64_t reference_peak = run.preference ? largest_peak() : 0;  // a forward pass, as an evaluation's
    if (comm.rank() == 0) describe_run(step);
    // From here SIGINT, SIGTERM and SIGUSR1 stop the run after a step, and
    // SIGUSR2 saves one; the setup record below says so to ftrun control.
    const signals::Listening listening(comm.rank() == 0);

    report::MetricsLog log(run.out, long(run.total_steps), long(step), comm.rank() == 0);
    log.log("setup", {{"step", step}, {"total_steps", run.total_steps}, {"peak_memory_bytes", setup_peak}}, true);
    if (run.reference.seconds > 0)
      log.log("reference", {{"step", step},
                            {"sequences", run.reference.scored()},
                            {"seconds", run.reference.seconds},
                            {"peak_memory_bytes", reference_peak}}, true);
    if (!r.preview.prompt.empty() && step == 0) log.say("before training: " + preview(run));

    Window window;
    StopRule stop(r.train.stop_after_seconds, parse_auto_stop(r.train.auto_stop_method));
    RunSummary summary;
    const auto training_began = std::chrono::steady_clock::now();
    while (step < run.total_steps) {
      run.enter("step " + std::to_string(step + 1));
      const double lr = schedule.rate(step);
      const StepResult s = train_step(run, step, lr);
      ++step;
      window.add(s);
      if (!std::isfinite(s.loss))
        throw TrainingStopped("step " + std::to_string(step) + ": the loss is " + (std::isnan(s.loss) ? "nan" : "inf") +
                              "; stopping. Last good checkpoint: " + run.last_checkpoint +
                              " (lower learning_rate or check the data, then resume from it)");
      const double seconds = seconds_since(training_began);
      summary.add(s, seconds, stop.step_done(seconds), Memory::stats().peak());
      const auto [signal, save_asked] = agree_on_stopping(stop, comm);
      const bool stopped = signal != 0 && step < run.total_steps;
      const bool last = step == run.total_steps || !stop.reason().empty() || stopped;
      std::string shown = "loss " + detail::format(s.loss) + "  lr " + detail::format(lr);
      if (run.preference)  // rewards/margins and rewards/accuracies
        shown += "  margin " + detail::format(s.preference[3]) + "  accuracy " + detail::format(s.preference[2]);
      log.progress(long(step), shown);
      if (step % r.train.logging_steps == 0 || last) {
        std::vector<nlohmann::ordered_json> by_rank;
        log.log("train", window.take(step, run, lr, by_rank));
        for (auto& record : by_rank) {
          const std::string group = "rank" + record["rank"].dump();
          log.log(group, std::move(record), true);
        }
      }
      if (stopped) stop_on_signal(log, step, signal, saving);
      if (last) break;
      if (r.train.eval_steps > 0 && step % r.train.eval_steps == 0) evaluate_into(log, step);
      if (saving && ((r.checkpoint.save_steps > 0 && step % r.checkpoint.save_steps == 0) || save_asked))
        checkpoint_into(log, step);
    }
    log.finish();
    if (summary.steps() > 0) {
      const std::string stopped_by = !stop.reason().empty() ? stop.reason()
                                     : r.train.max_steps > 0 ? "max_steps"
                                                             : "num_train_epochs";
      log.log("summary", summary.take(step, stopped_by, run.parallel->state_bytes(), run.flops_per_token,
                                      run.peak_flops, comm));
    }
    evaluate_into(log, step);
    if (saving) checkpoint_into(log, step);
    if (!r.preview.prompt.empty()) log.say("after training: " + preview(run));
    if (saving) {
      run.enter("the final save");
      Memory::stats().reset_peak();
      auto save_final = [&] {
        if (comm.rank() == 0)
          for (const std::string& line : run.adapter->save_final(run.out)) std::printf("%s\n", line.c_str());
      };
      if (run.adapter->final_save_changes_model()) run.parallel->with_whole_model(save_final);
      else run.parallel->read_model_on_rank0(save_final);
      log.log("save", {{"step", step}, {"what", "final"}, {"peak_memory_bytes", largest_peak()}}, true);
    }
    comm.barrier("the final save", true);
    std::fflush(stdout);
  }

  // What the job does after this step, agreed by its ranks: each rank's
  // clock runs on its own, so rank 0's stop rule is the job's; an operator's
  // signal may reach one rank alone (core/signals.hpp), and then acts on all.
  struct Asked {
    int signal = 0;  // the stopping signal (the lowest rank's that has one), or 0
    bool save = false;
  };
  static Asked agree_on_stopping(StopRule& stop, comm::Communicator& comm) {
    Asked asked{signals::received(), signals::take_save_request()};
    if (comm.size() == 1) return asked;
    static const std::string reasons[] = {"", "stop_after_seconds", "auto_stop_method"};
    const auto* known = std::find(std::begin(reasons), std::end(reasons), stop.reason());
    if (known == std::end(reasons)) throw Error("internal: a stop rule without a code: " + stop.reason());
    constexpr std::size_t fields = 3;
    const double mine[fields] = {double(known - std::begin(reasons)), double(asked.signal), asked.save ? 1.0 : 0.0};
    std::vector<double> all(fields * std::size_t(comm.size()));
    const std::vector<std::size_t> counts(std::size_t(comm.size()), fields);
    comm.all_gather(std::span<const double>(mine), std::span<double>(all), counts, "the decision to stop").wait();
    stop.stop(reasons[std::size_t(all[0])]);
    asked = {};
    for (int rank = 0; rank < comm.size(); ++rank) {
      const double* theirs = &all[fields * std::size_t(rank)];
      if (asked.signal == 0) asked.signal = int(theirs[1]);
      asked.save = asked.save || theirs[2] != 0;
    }
    return asked;
  }

  // Saves where the run is and ends it: the checkpoint is the one a periodic
  // save would write, so resume = "auto" continues exactly.
  [[noreturn]] void stop_on_signal(report::MetricsLog& log, std::int64_t step, int signal, bool saving) {
    log.finish();
    const std::string what = std::string("stopped by ") + signals::name(signal) + " after step " +
                             std::to_string(step) + " of " + std::to_string(run_.total_steps);
    if (saving) checkpoint_into(log, step);
    log.log("stop", {{"step", step}, {"signal", signals::name(signal)}, {"saved", saving}}, true);
    std::fflush(stdout);
    if (!saving)
      throw StoppedOnRequest(what + "; nothing saved (checkpoint.save_strategy = \"no\")");
    throw StoppedOnRequest(what + "; saved " + run_.last_checkpoint + ", from which resume = \"auto\" continues");
  }

  // Averages over the steps since the last log, as HF's Trainer logs.
  struct Window {
    double loss = 0, aux_loss = 0, grad_norm = 0, seconds = 0;
    std::int64_t steps = 0, tokens = 0, dataset_tokens = 0, skipped = 0;
    comm::Traffic traffic_before;  // this rank's traffic when the window began
    static constexpr std::size_t per_rank_fields = 8;
    static constexpr const char* per_rank_names[per_rank_fields] = {
        "peak_memory_bytes",       "max_rss_bytes",           "state_bytes",
        "sent_bytes_per_step",     "received_bytes_per_step", "comm_busy_seconds_per_step",
        "comm_wait_seconds_per_step", "pipeline_bubble"};
    double bubble = 0;  // summed over the window's steps
    std::array<double, preference_metrics> preference{};  // summed over the window's steps
    void add(const StepResult& s) {
      for (std::size_t f = 0; f < preference_metrics; ++f) preference[f] += s.preference[f];
      loss += s.loss;
      aux_loss += s.aux_loss;
      grad_norm += s.grad_norm;
      seconds += s.seconds;
      tokens += s.tokens;
      dataset_tokens += s.dataset_tokens;
      skipped += s.skipped;
      bubble += s.bubble;
      ++steps;
    }
    // The averages as a metrics record; the window starts again empty.
    // In a job of several ranks, `by_rank` gets one record per rank.
    nlohmann::ordered_json take(std::int64_t step, const Run<T, M, Device>& run, double lr,
                                std::vector<nlohmann::ordered_json>& by_rank) {
      nlohmann::ordered_json j;
      j["step"] = step;
      j["epoch"] = double(step * run.recipe.train.gradient_accumulation_steps) / run.train_plan->batches_per_epoch();
      j["loss"] = loss / double(steps);
      if (run.model->config().moe.aux_loss_coef > 0) j["aux_loss"] = aux_loss / double(steps);  // as HF's outputs.aux_loss
      j["learning_rate"] = lr;
      j["grad_norm"] = grad_norm / double(steps);
      if (run.preference)
        for (std::size_t f = 0; f < preference_metric_count(run.preference->kind()); ++f)
          j[preference_metric_names[f]] = preference[f] / double(steps);
      j["train_tokens_per_second"] = double(tokens) / seconds;
      j["dataset_tokens_per_second"] = double(dataset_tokens) / seconds;
      j["mfu"] = run.flops_per_token * double(tokens) / seconds / (run.peak_flops * run.comm->size());
      // Each rank's memory and traffic; the job's line shows the largest.
      comm::Communicator& comm = *run.comm;
      const comm::Traffic traffic = comm.traffic();
      const double mine[per_rank_fields] = {double(Memory::stats().peak()), double(max_rss_bytes()),
                                            double(run.parallel->state_bytes()),
                                            double(traffic.sent - traffic_before.sent) / double(steps),
                                            double(traffic.received - traffic_before.received) / double(steps),
                                            (traffic.busy_seconds - traffic_before.busy_seconds) / double(steps),
                                            (traffic.waited_seconds - traffic_before.waited_seconds) / double(steps),
                                            bubble / double(steps)};
      traffic_before = traffic;
      std::vector<double> all(std::size_t(comm.size()) * per_rank_fields);
      const std::vector<std::size_t> counts(std::size_t(comm.size()), per_rank_fields);
      comm.all_gather(std::span<const double>(mine), std::span<double>(all), counts, "the ranks' figures").wait();
      const bool pipelined = run.parallel->bubble_fraction() >= 0;
      for (std::size_t f = 0; f < per_rank_fields; ++f) {
        if (f == 7) {  // the pipeline's bubble: the ranks' mean
          double sum = 0;
          for (int r = 0; r < comm.size(); ++r) sum += all[std::size_t(r) * per_rank_fields + f];
          if (pipelined) j[per_rank_names[f]] = sum / comm.size();
          continue;
        }
        double largest = 0;
        for (int r = 0; r < comm.size(); ++r) largest = std::max(largest, all[std::size_t(r) * per_rank_fields + f]);
        if (f < 3) j[per_rank_names[f]] = std::int64_t(largest);
        else if (comm.size() > 1) j[per_rank_names[f]] = largest;
      }
      if (comm.size() > 1) {
        j["ranks"] = comm.size();
        for (int r = 0; r < comm.size(); ++r) {
          nlohmann::ordered_json& record = by_rank.emplace_back();
          record["step"] = step;
          record["rank"] = r;
          for (std::size_t f = 0; f < per_rank_fields; ++f)
            if (f != 7 || pipelined) record[per_rank_names[f]] = all[std::size_t(r) * per_rank_fields + f];
        }
      }
      j["seconds_per_step"] = seconds / double(steps);
      if (run.loss_scale.enabled) {
        j["loss_scale"] = run.loss_scale.value;
        j["skipped_steps"] = skipped;
      }
      *this = Window{.traffic_before = traffic_before};
      return j;
    }
  };

  // An evaluation and a save each measure their own peak (a step's is
  // measured by the step): the job's largest rank's, beside the estimate's.
  void evaluate_into(report::MetricsLog& log, std::int64_t step) {
    run_.enter("evaluation at step " + std::to_string(step));
    Memory::stats().reset_peak();
    nlohmann::ordered_json j = evaluate(run_, step);
    if (j.is_null()) return;
    j["peak_memory_bytes"] = largest_peak();
    log.log("eval", j);
  }

  void checkpoint_into(report::MetricsLog& log, std::int64_t step) {
    Memory::stats().reset_peak();
    log.say("saved " + save_checkpoint(run_, step).string());
    log.log("save", {{"step", step}, {"what", "checkpoint"}, {"peak_memory_bytes", largest_peak()}}, true);
  }

  std::int64_t largest_peak() const {
    return std::int64_t(run_.comm->max(double(Memory::stats().peak()), "the ranks' peak memory"));
  }

  void describe_run(std::int64_t step) const {
    const Run<T, M, Device>& run = run_;
    const recipe::Recipe& r = run.recipe;
    const double total = double(run.model->parameter_count()), trained = double(run.parallel->trainable_parameters());
    std::printf("ft train: %s\n", run.policies.trainer.c_str());
    if constexpr (!std::is_same_v<Device, device::Cpu>) std::printf("  device      %s\n", Device::description().c_str());
    std::printf("  model       %s: %s parameters, %s trainable (%.3f%%)\n", r.model.path.c_str(),
                detail::count_text(total).c_str(), detail::count_text(trained).c_str(), 100.0 * trained / total);
    std::printf("  adapter     %s\n", run.policies.adapter_description.c_str());
    const bool pairs = run.preference != nullptr;
    std::printf("  data        %s: %lld %s (%lld skipped), %s micro-batches of %lld x %lld per epoch%s\n",
                r.data.train.c_str(), (long long)(pairs ? run.train_rows / 2 : run.train_rows),
                pairs ? "preference pairs" : "rows", (long long)run.skipped_rows,
                detail::format(run.train_plan->batches_per_epoch()).c_str(),
                (long long)(r.train.per_device_train_batch_size * (pairs ? 2 : 1)), (long long)r.data.max_seq_length,
                r.data.packing ? " (packed)" : "");
    std::printf("  data cache  %s\n", run.data_cache.c_str());
    std::printf("  steps       %lld (x %lld micro-batches)%s\n", (long long)run.total_steps,
                (long long)r.train.gradient_accumulation_steps,
                step > 0 ? (", resuming after step " + std::to_string(step)).c_str() : "");
    std::printf("  output      %s\n", run.out.c_str());
    if (run.comm->size() > 1) {
      std::map<std::string, int> hosts;
      for (int rank = 0; rank < run.comm->size(); ++rank) ++hosts[run.comm->host_of(rank)];
      std::string where;
      for (const auto& [host, ranks] : hosts) where += (where.empty() ? "" : ", ") + host + " x" + std::to_string(ranks);
      std::printf("  ranks       %d on %zu machine(s): %s\n", run.comm->size(), hosts.size(), where.c_str());
    }
    if (r.strategy.optimizer_offload && std::is_same_v<Device, device::Cpu>)
      std::printf("  offload     optimizer_offload: on the CPU backend master weights and optimizer state are in host "
                  "memory already; nothing moves\n");
    else if (r.strategy.optimizer_offload)
      std::printf("  offload     optimizer_offload: master weights and optimizer state in host memory; each step "
                  "copies this rank's gradient there, steps it and copies the weights back\n");
    std::fflush(stdout);
  }

  std::unique_ptr<comm::Communicator> comm_;  // outlives run_, whose parallel runtime holds it
  Run<T, M, Device> run_;
};

// Runs the recipe with these policies to the end. The engine's one entry is a
// function, not inline, so that a program whose dtypes ft compiles once
// (train/compiled.hpp) calls that copy instead of generating the engine again.
template <element T, class M, class Device>
void run_engine(recipe::Recipe recipe, Policies<T, M, Device> policies) {
  Engine<T, M, Device>(std::move(recipe), std::move(policies)).run();
}

}  // namespace ft::train
