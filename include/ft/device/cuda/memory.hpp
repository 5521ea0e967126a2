#pragma once
// The CUDA memory spaces, on the protocol of tensor/memory.hpp (allocate,
// deallocate, zero, stats), so buffers and tensors can name where they live:
//   CudaDevice  device memory through the caching allocator: stats() is the
//               allocated figure, reserved() what is held from cudaMalloc;
//   CudaPinned  page-locked host memory, which offload copies to and from
//               (the copies run at full speed and overlap compute).
// One process drives one device (a rank per GPU), so the cache serves the
// current device. Needs the CUDA runtime's C API, not nvcc.
#include <cstddef>
#include <cstring>
#include <string_view>

#include <cuda_runtime_api.h>

#include "ft/device/cuda/check.hpp"
#include "ft/tensor/caching_allocator.hpp"
#include "ft/tensor/memory.hpp"

namespace ft::memory {

namespace detail {
struct CudaMalloc {
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    cuda::check(cudaMalloc(&p, bytes), "cudaMalloc", bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t) { cuda::check(cudaFree(p), "cudaFree"); }
};
}  // namespace detail

struct CudaDevice {
  static constexpr std::string_view name = "cuda";

  // Never destroyed: at exit the CUDA context may already be gone.
  static CachingAllocator<detail::CudaMalloc>& cache() {
    static auto* allocator = new CachingAllocator<detail::CudaMalloc>();
    return *allocator;
  }
  static Stats& stats() { return cache().allocated(); }
  static Stats& reserved() { return cache().reserved(); }
  static void* allocate(std::size_t bytes) { return cache().allocate(bytes); }
  static void deallocate(void* p, std::size_t bytes) { cache().deallocate(p, bytes); }
  // Ordered on the default stream before the kernels that read the buffer.
  static void zero(void* p, std::size_t bytes) {
    if (bytes) cuda::check(cudaMemsetAsync(p, 0, bytes), "cudaMemsetAsync", bytes);
  }
};

struct CudaPinned {
  static constexpr std::string_view name = "pinned";

  static Stats& stats() {
    static Stats s;
    return s;
  }
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cuda::check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc", bytes);
    stats().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) {
    if (!p) return;
    cuda::check(cudaFreeHost(p), "cudaFreeHost");
    stats().remove(bytes);
  }
  static void zero(void* p, std::size_t bytes) {
    if (bytes) std::memset(p, 0, bytes);
  }
};

static_assert(memory_space<CudaDevice>);
static_assert(memory_space<CudaPinned>);

}  // namespace ft::memory
