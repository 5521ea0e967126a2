#pragma once
// The gpu_* properties of ado's SFTTrainer actuator for a benchmark run: the utilisation, memory in
// use and power of the GPUs the run takes, sampled by ftrun bench while the
// run goes (as ado's actuator samples them beside its runs), each
// reported as the min, mean and max over the run of the mean over its GPUs:
//   gpu_compute_utilization_*   percent of the time a kernel was running
//   gpu_memory_utilization_*    percent of the GPU's memory in use
//   gpu_power_percent_*         percent of the enforced power limit
//   gpu_power_watts_*
//   gpu_memory_utilization_peak the largest memory share of any one GPU
// A run that takes no GPU reports them all as 0, as ado does.
//
// The figures come from NVML, which the NVIDIA driver installs
// (libnvidia-ml.so.1). ftrun opens it only when a run takes a GPU, so ftrun
// builds and runs where there is none.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ftrun {

struct GpuProperty {
  std::string name;
  double value = 0;
};

// ado's gpu_* properties for a run that uses no GPU: every one 0.
std::vector<GpuProperty> no_gpu_properties();

// The names NVML gives this machine's GPUs ("NVIDIA H100 PCIe"), in index
// order. Throws ft::Error when NVML cannot be opened or sees no GPU.
std::vector<std::string> gpu_names();

class GpuMonitor {
public:
  // Samples, every `period` until finish(), the GPUs that `ranks` ranks on
  // this machine take: local rank r takes the r-th GPU CUDA shows
  // (CUDA_VISIBLE_DEVICES, by index or UUID; else all, by index), modulo
  // their count. Throws ft::Error naming the NVML call that failed.
  GpuMonitor(int ranks, std::chrono::milliseconds period);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Stops sampling; the properties by ado's names. Throws ft::Error
  // when no sample could be taken, with the reason.
  std::vector<GpuProperty> finish();

private:
  struct Sampler;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace ftrun
