#pragma once
// The CPU standing in for another device, for tests on a machine without a
// GPU. Its buffers live in a memory space of their own (host memory, counted
// apart from the host's, cached by size class as a GPU's is), so Trainer, the engine and the parallel runtimes
// take every path they take on a GPU: batches uploaded, checkpoints copied
// through the host, NCCL-style device buffers in the collectives, state kept
// apart when offloaded. Its kernels are the CPU's own (attention included),
// so a run on it must match a CPU run bit for bit; any difference is the
// device paths' doing.
#include <string>
#include <string_view>

#include <ft/device/cpu.hpp>
#include <ft/device/cpu/attention.hpp>
#include <ft/tensor/caching_allocator.hpp>
#include <ft/tensor/memory.hpp>

namespace ft::testing {

// What the cache reserves from: host memory, with launch.memory_limit.
struct CpuAsDeviceReserve : memory::AlignedHostMemory<CpuAsDeviceReserve> {
  static constexpr std::string_view name = "cpu-as-device";
};

// As memory::CudaDevice: the caching allocator's blocks, stats() the allocated figure.
struct CpuAsDeviceMemory {
  static constexpr std::string_view name = "cpu-as-device";
  // Never destroyed, as a GPU's: buffers in other statics may be freed after it would be.
  static memory::CachingAllocator<CpuAsDeviceReserve>& cache() {
    static auto* allocator = new memory::CachingAllocator<CpuAsDeviceReserve>();
    return *allocator;
  }
  static memory::Stats& stats() { return cache().allocated(); }
  static std::size_t& limit() { return CpuAsDeviceReserve::limit(); }
  static void* allocate(std::size_t bytes) { return cache().allocate(bytes); }
  static void deallocate(void* p, std::size_t bytes) { cache().deallocate(p, bytes); }
  static void zero(void* p, std::size_t bytes) { CpuAsDeviceReserve::zero(p, bytes); }
};
static_assert(memory::memory_space<CpuAsDeviceMemory>);

struct CpuAsDevice : device::Cpu {
  static constexpr std::string_view name = "cpu-as-device";
  static constexpr std::string_view type_name = "ft::testing::CpuAsDevice";
  using Memory = CpuAsDeviceMemory;
  static std::string description() { return "the CPU, through the paths of a device with memory of its own"; }
  template <element T>
  static bool attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents,
                                const nn::AttentionShape& s) {
    cpu::attention_forward(out, lse, qkv, documents, s);
    return true;
  }
  template <element T>
  static bool attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                                 const std::int32_t* documents, const nn::AttentionShape& s) {
    cpu::attention_backward(dqkv, dout, out, lse, qkv, documents, s);
    return true;
  }
};
static_assert(device::device<CpuAsDevice>);

}  // namespace ft::testing
