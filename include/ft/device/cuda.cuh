#pragma once
// The CUDA device: buffers in the caching allocator's device memory, functors
// on a grid of the current stream. Only nvcc compiles this header (the
// launcher is a kernel template); host code that only allocates uses
// device/cuda/memory.hpp.
#include <cstdio>
#include <string>
#include <string_view>

#include "ft/comm/world.hpp"
#include "ft/device/cpu.hpp"
#include "ft/device/cuda/flash_attention.cuh"
#include "ft/device/cuda/gemm.hpp"
#include "ft/device/cuda/launch.cuh"
#include "ft/device/cuda/memory.hpp"
#if defined(FT_WITH_NCCL)
#include "ft/device/cuda/nccl.hpp"
#endif

namespace ft::device {

struct Cuda {
  static constexpr std::string_view name = "cuda";
  static constexpr std::string_view type_name = "ft::device::Cuda";
  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)": the current device, for a run's header.
  static std::string description() {
    int index = 0;
    FT_CUDA_CHECK(cudaGetDevice(&index));
    cudaDeviceProp p{};
    FT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
    char text[320];
    std::snprintf(text, sizeof text, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                  double(p.totalGlobalMem) / double(1ull << 30));
    return text;
  }
  // The job's communicator: with NCCL (a build that defines FT_WITH_NCCL
  // and links it) device buffers move between GPUs, each rank on its own;
  // without it a job is one rank.
  static std::unique_ptr<comm::Communicator> join_job(double timeout_seconds) {
#if defined(FT_WITH_NCCL)
    return comm::join_job_on_gpus(timeout_seconds);
#else
    if (comm::job_place().size > 1)
      throw Error("a job of several ranks on GPUs needs NCCL, and this build of the CUDA plugin has none");
    return comm::join_job(timeout_seconds);
#endif
  }
  using Memory = memory::CudaDevice;
  template <class F>
  static void parallel_for(index_t n, const F& f) {
    cuda::parallel_for(n, f);
  }
  template <class F>
  static void parallel_rows(index_t n, index_t columns, const F& f) {
    cuda::parallel_rows(n, columns, f);
  }
  static constexpr index_t column_rows = cuda::column_rows;
  static constexpr index_t gemm_peak_size = cuda::gemm_peak_size;
  template <element T>
  using gemm_peak_element = T;
  template <element T>
  static void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, acc_t<T> alpha, const T* A, index_t lda,
                   const T* B, index_t ldb, acc_t<T> beta, T* C, index_t ldc) {
    blas().template gemm<T>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  static void copy(void* to, const void* from, std::size_t bytes) {
    FT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice));
  }
  static void to_host(void* to, const void* from, std::size_t bytes) {
    FT_CUDA_CHECK(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToHost));
  }
  static void from_host(void* to, const void* from, std::size_t bytes) {
    FT_CUDA_CHECK(cudaMemcpy(to, from, bytes, cudaMemcpyHostToDevice));
  }
  // Causal attention on tensor cores (bf16, f16; head dimensions 64, 128);
  // false where the shape is not theirs and the caller runs the row functors.
  template <element T>
  static bool attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents,
                                const nn::AttentionShape& s) {
    return cuda::flash::attention_forward(out, lse, qkv, documents, s);
  }
  template <element T>
  static bool attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                                 const std::int32_t* documents, const nn::AttentionShape& s) {
    return cuda::flash::attention_backward(dqkv, dout, out, lse, qkv, documents, s);
  }
  // One cuBLASLt handle, workspace and plan cache per host thread (the plan
  // cache is not shared). Never destroyed: at exit the CUDA context may
  // already be gone.
  static cuda::Blas& blas() {
    thread_local auto* handle = new cuda::Blas();
    return *handle;
  }
};
static_assert(device<Cuda>);

}  // namespace ft::device
