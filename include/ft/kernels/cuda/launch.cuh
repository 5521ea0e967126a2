#pragma once
// The CUDA launcher: the device twin of cpu::parallel_for. A functor f(i)
// written for one row or element (FT_HOST_DEVICE, captured by value) runs
// over [0, n) on a grid, one thread per index, grid-striding past the
// largest grid. Only nvcc compiles this header.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "ft/kernels/cuda/check.hpp"

namespace ft::cuda {

template <class F>
__global__ void for_each_index(std::int64_t n, F f) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <class F>
void parallel_for(std::int64_t n, const F& f, cudaStream_t stream = nullptr) {
  if (n <= 0) return;
  constexpr int threads = 256;
  const auto blocks = unsigned(std::min<std::int64_t>((n + threads - 1) / threads, 1 << 16));
  for_each_index<<<blocks, threads, 0, stream>>>(n, f);
  FT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ft::cuda
