#include "gpu_monitor.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include <ft/core/error.hpp>

namespace ftrun {
// Named rather than anonymous: GpuMonitor::Sampler, declared in the header,
// holds these types.
namespace nvml_sampling {

// The part of NVML's C interface that ftrun calls (nvml.h; its ABI is kept
// across driver versions, and the _v2 names are the current entry points).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
constexpr nvmlReturn_t nvml_success = 0;

// The four series, in the order of ado's SFTTrainer actuator; each gives _min, _avg and _max.
constexpr std::array<const char*, 4> series_names = {"gpu_compute_utilization", "gpu_memory_utilization",
                                                     "gpu_power_percent", "gpu_power_watts"};
using Series = std::array<std::vector<double>, series_names.size()>;

std::vector<GpuProperty> properties_of(const Series& series, double memory_peak) {
  std::vector<GpuProperty> out;
  for (std::size_t s = 0; s < series.size(); ++s) {
    const std::vector<double>& v = series[s];
    double sum = 0;
    for (double x : v) sum += x;
    const std::string name = series_names[s];
    out.push_back({name + "_min", v.empty() ? 0.0 : *std::min_element(v.begin(), v.end())});
    out.push_back({name + "_avg", v.empty() ? 0.0 : sum / double(v.size())});
    out.push_back({name + "_max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())});
  }
  out.push_back({"gpu_memory_utilization_peak", memory_peak});
  return out;
}

class Nvml {
public:
  Nvml() : library_(::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL), &::dlclose) {
    if (!library_)
      throw ft::Error(std::string("NVML cannot be opened (") + ::dlerror() +
                      "); the gpu_* properties need the NVIDIA driver's libnvidia-ml.so.1");
    bind(error_string_, "nvmlErrorString");
    bind(init_, "nvmlInit_v2");
    bind(shutdown_, "nvmlShutdown");
    bind(count_, "nvmlDeviceGetCount_v2");
    bind(by_index_, "nvmlDeviceGetHandleByIndex_v2");
    bind(by_uuid_, "nvmlDeviceGetHandleByUUID");
    bind(utilization_, "nvmlDeviceGetUtilizationRates");
    bind(memory_, "nvmlDeviceGetMemoryInfo");
    bind(power_, "nvmlDeviceGetPowerUsage");
    bind(power_limit_, "nvmlDeviceGetEnforcedPowerLimit");
    bind(name_, "nvmlDeviceGetName");
    check(init_(), "nvmlInit_v2");
  }
  ~Nvml() { shutdown_(); }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The GPUs `ranks` local ranks take, each once.
  std::vector<nvmlDevice_t> devices_of(int ranks) const {
    std::vector<std::string> visible;
    const char* listed = std::getenv("CUDA_VISIBLE_DEVICES");
    if (listed) {
      std::stringstream in(listed);
      for (std::string entry; std::getline(in, entry, ',');)
        if (!entry.empty()) visible.push_back(entry);
      if (visible.empty()) throw ft::Error("CUDA_VISIBLE_DEVICES is empty: the run can see no GPU");
    }
    unsigned int count = 0;
    check(count_(&count), "nvmlDeviceGetCount_v2");
    if (!listed && count == 0) throw ft::Error("NVML sees no GPU");
    std::vector<nvmlDevice_t> out;
    for (int r = 0; r < ranks; ++r) {
      nvmlDevice_t d = nullptr;
      if (!listed) {
        check(by_index_(unsigned(r) % count, &d), "nvmlDeviceGetHandleByIndex_v2");
      } else if (const std::string& e = visible[std::size_t(r) % visible.size()];
                 e.find_first_not_of("0123456789") == std::string::npos) {
        check(by_index_(unsigned(std::stoul(e)), &d), "nvmlDeviceGetHandleByIndex_v2(" + e + ")");
      } else {
        check(by_uuid_(e.c_str(), &d), "nvmlDeviceGetHandleByUUID(" + e + ")");
      }
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    }
    return out;
  }

  std::vector<std::string> names() const {
    unsigned int count = 0;
    check(count_(&count), "nvmlDeviceGetCount_v2");
    if (count == 0) throw ft::Error("NVML sees no GPU");
    std::vector<std::string> out;
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t d = nullptr;
      check(by_index_(i, &d), "nvmlDeviceGetHandleByIndex_v2");
      std::array<char, 96> name{};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
      check(name_(d, name.data(), unsigned(name.size())), "nvmlDeviceGetName");
      out.emplace_back(name.data());
    }
    return out;
  }

  struct Reading {
    double compute, memory, power_percent, watts;
  };
  Reading read(nvmlDevice_t d) const {
    nvmlUtilization_t u{};
    nvmlMemory_t m{};
    unsigned int milliwatts = 0, limit = 0;
    check(utilization_(d, &u), "nvmlDeviceGetUtilizationRates");
    check(memory_(d, &m), "nvmlDeviceGetMemoryInfo");
    check(power_(d, &milliwatts), "nvmlDeviceGetPowerUsage");
    check(power_limit_(d, &limit), "nvmlDeviceGetEnforcedPowerLimit");
    return {double(u.gpu), m.total ? 100.0 * double(m.used) / double(m.total) : 0.0,
            limit ? 100.0 * milliwatts / limit : 0.0, milliwatts / 1000.0};
  }

private:
  template <class F>
  void bind(F*& f, const char* name) {
    f = reinterpret_cast<F*>(::dlsym(library_.get(), name));
    if (!f) throw ft::Error(std::string("NVML has no ") + name + "; the driver is older than ftrun supports");
  }
  void check(nvmlReturn_t rc, const std::string& call) const {
    if (rc != nvml_success) throw ft::Error("NVML " + call + " failed: " + error_string_(rc));
  }

  std::unique_ptr<void, int (*)(void*)> library_;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index_)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid_)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*power_limit_)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned int) = nullptr;
};

}  // namespace nvml_sampling

std::vector<GpuProperty> no_gpu_properties() {
  return nvml_sampling::properties_of(nvml_sampling::Series{}, 0.0);
}

std::vector<std::string> gpu_names() { return nvml_sampling::Nvml().names(); }

struct GpuMonitor::Sampler {
  using Nvml = nvml_sampling::Nvml;
  Nvml nvml;
  std::vector<nvml_sampling::nvmlDevice_t> devices;
  std::chrono::milliseconds period;
  nvml_sampling::Series series;
  double memory_peak = 0;
  std::string error;  // the first failed reading's
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;

  Sampler(int ranks, std::chrono::milliseconds p) : devices(nvml.devices_of(ranks)), period(p) {
    thread = std::thread([this] { run(); });
  }

  void run() {
    std::unique_lock lock(mutex);
    do {
      try {
        std::array<double, nvml_sampling::series_names.size()> mean{};
        for (nvml_sampling::nvmlDevice_t d : devices) {
          const Nvml::Reading r = nvml.read(d);
          mean[0] += r.compute;
          mean[1] += r.memory;
          mean[2] += r.power_percent;
          mean[3] += r.watts;
          memory_peak = std::max(memory_peak, r.memory);
        }
        for (std::size_t s = 0; s < mean.size(); ++s) series[s].push_back(mean[s] / double(devices.size()));
      } catch (const ft::Error& e) {
        if (error.empty()) error = e.what();
      }
    } while (!wake.wait_for(lock, period, [this] { return stopping; }));
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
  }
};

GpuMonitor::GpuMonitor(int ranks, std::chrono::milliseconds period)
    : sampler_(std::make_unique<Sampler>(std::max(1, ranks), period)) {}

GpuMonitor::~GpuMonitor() {
  if (sampler_) sampler_->stop();
}

std::vector<GpuProperty> GpuMonitor::finish() {
  sampler_->stop();
  if (sampler_->series[0].empty()) throw ft::Error(sampler_->error);
  return nvml_sampling::properties_of(sampler_->series, sampler_->memory_peak);
}

}  // namespace ftrun
