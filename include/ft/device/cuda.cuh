#pragma once
// The CUDA device: buffers in the caching allocator's device memory, functors
// on a grid of the current stream. Only nvcc compiles this header (the
// launcher is a kernel template); host code that only allocates uses
// tensor/cuda_memory.hpp.
#include <string_view>

#include "ft/device/cpu.hpp"
#include "ft/kernels/cuda/launch.cuh"
#include "ft/tensor/cuda_memory.hpp"

namespace ft::device {

struct Cuda {
  static constexpr std::string_view name = "cuda";
  using Memory = memory::CudaDevice;
  template <class F>
  static void parallel_for(index_t n, const F& f) {
    cuda::parallel_for(n, f);
  }
};
static_assert(device<Cuda>);

}  // namespace ft::device
