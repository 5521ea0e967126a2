#pragma once
// The run's figures at its end, by the names HF's Trainer prints and ado's
// SFTTrainer actuator measures: train_runtime, train_samples_per_second, train_steps_per_second,
// train_tokens_per_second (padding included), train_tokens_per_gpu_per_second,
// dataset_tokens_per_second (padding excluded) and its per-GPU share (a
// "GPU" is a rank on any device), cpu_compute_utilization (100 = one core),
// cpu_memory_utilization (of the machine's memory), and peak memory by kind:
// the device allocator's peak over every step, the process's resident peak,
// the trainable state. The job's figures: throughput of all ranks, memory the
// largest rank's, CPU utilization the ranks' mean.
//
// Throughput counts the measured steps only (stopping.hpp: an auto-stop
// warm-up is left out), from the end of the last step before them to the end
// of the last one, evaluations and checkpoints between included as HF counts
// them. A run that ends inside its warm-up measures every step.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/comm/communicator.hpp"
#include "ft/core/process.hpp"
#include "ft/train/step.hpp"

namespace ft::train {

class RunSummary {
public:
  RunSummary() { all_.cpu_begin = measured_.cpu_begin = cpu_seconds(); }

  // After every step: `seconds` since training began, `measured` from StopRule,
  // `peak_bytes` the device allocator's peak during the step.
  void add(const StepResult& s, double seconds, bool measured, std::size_t peak_bytes) {
    const double cpu = cpu_seconds();
    all_.add(s, seconds, cpu);
    if (measured) measured_.add(s, seconds, cpu);
    else measured_ = Span{.begin = seconds, .end = seconds, .cpu_begin = cpu, .cpu_end = cpu};
    peak_bytes_ = std::max(peak_bytes_, peak_bytes);
    ++steps_;
  }

  // Steps this process ran (a resumed run counts from where it resumed).
  std::int64_t steps() const { return steps_; }

  // The summary record; every rank calls it (it gathers the ranks' figures).
  nlohmann::ordered_json take(std::int64_t step, const std::string& stopped_by, std::size_t state_bytes,
                              double flops_per_token, double peak_flops, comm::Communicator& comm) const {
    const Span& span = measured_.steps > 0 ? measured_ : all_;
    const double seconds = std::max(span.end - span.begin, 1e-9);
    constexpr std::size_t fields = 4;
    const double mine[fields] = {span.cpu_end - span.cpu_begin, double(peak_bytes_), double(max_rss_bytes()),
                                 double(state_bytes)};
    std::vector<double> all(std::size_t(comm.size()) * fields);
    const std::vector<std::size_t> counts(std::size_t(comm.size()), fields);
    comm.all_gather(std::span<const double>(mine), std::span<double>(all), counts, "the run's summary").wait();
    double cpu = 0, largest[fields] = {};
    for (int r = 0; r < comm.size(); ++r) {
      cpu += all[std::size_t(r) * fields];
      for (std::size_t f = 1; f < fields; ++f) largest[f] = std::max(largest[f], all[std::size_t(r) * fields + f]);
    }
    const double ranks = comm.size();
    const double machine = double(meminfo_bytes("MemTotal"));

    nlohmann::ordered_json j;
    j["step"] = step;
    j["train_runtime"] = seconds;
    j["train_samples_per_second"] = double(span.samples) / seconds;
    j["train_steps_per_second"] = double(span.steps) / seconds;
    j["train_tokens_per_second"] = double(span.tokens) / seconds;
    j["train_tokens_per_gpu_per_second"] = double(span.tokens) / seconds / ranks;
    j["dataset_tokens_per_second"] = double(span.dataset_tokens) / seconds;
    j["dataset_tokens_per_second_per_gpu"] = double(span.dataset_tokens) / seconds / ranks;
    j["mfu"] = flops_per_token * double(span.tokens) / seconds / (peak_flops * ranks);
    j["cpu_compute_utilization"] = 100.0 * cpu / ranks / seconds;
    if (machine > 0) j["cpu_memory_utilization"] = 100.0 * largest[2] / machine;
    j["peak_memory_bytes"] = std::int64_t(largest[1]);
    j["max_rss_bytes"] = std::int64_t(largest[2]);
    j["state_bytes"] = std::int64_t(largest[3]);
    j["measured_steps"] = span.steps;
    j["warmup_steps"] = steps_ - span.steps;
    j["stopped_by"] = stopped_by;
    return j;
  }

private:
  // Consecutive steps and what they processed.
  struct Span {
    double begin = 0, end = 0, cpu_begin = 0, cpu_end = 0;
    std::int64_t steps = 0, samples = 0, tokens = 0, dataset_tokens = 0;
    void add(const StepResult& s, double seconds, double cpu) {
      end = seconds;
      cpu_end = cpu;
      ++steps;
      samples += s.samples;
      tokens += s.tokens;
      dataset_tokens += s.dataset_tokens;
    }
  };
  Span all_, measured_;
  std::int64_t steps_ = 0;
  std::size_t peak_bytes_ = 0;
};

}  // namespace ft::train
