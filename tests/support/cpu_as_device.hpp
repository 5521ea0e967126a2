#pragma once
// The CPU standing in for another device, for tests on a machine without a
// GPU. Its buffers live in a memory space of their own (host memory, counted
// apart from the host's), so Trainer, the engine and the parallel runtimes
// take every path they take on a GPU: batches uploaded, checkpoints copied
// through the host, NCCL-style device buffers in the collectives, state kept
// apart when offloaded. Its kernels are the CPU's own (attention included),
// so a run on it must match a CPU run bit for bit; any difference is the
// device paths' doing.
#include <string>
#include <string_view>

#include <ft/device/cpu.hpp>
#include <ft/nn/attention.hpp>
#include <ft/tensor/memory.hpp>

namespace ft::testing {

struct CpuAsDeviceMemory : memory::AlignedHostMemory<CpuAsDeviceMemory> {
  static constexpr std::string_view name = "cpu-as-device";
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
    nn::attention_forward(out, lse, qkv, documents, s);
    return true;
  }
  template <element T>
  static bool attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                                 const std::int32_t* documents, const nn::AttentionShape& s) {
    nn::attention_backward(dqkv, dout, out, lse, qkv, documents, s);
    return true;
  }
};
static_assert(device::device<CpuAsDevice>);

}  // namespace ft::testing
