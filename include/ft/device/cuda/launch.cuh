#pragma once
// The CUDA launcher: the device twin of cpu::parallel_for. A functor f(i)
// written for one row or element (FT_HOST_DEVICE, captured by value) runs
// over [0, n) on a grid, one thread per index, grid-striding past the
// largest grid; a row functor f(row, team) runs a warp or a block per row
// (parallel_rows). Only nvcc compiles this header.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "ft/device/cuda/check.hpp"

namespace ft::cuda {

template <class F>
__global__ void for_each_index(std::int64_t n, F f) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

// A warp as the team that shares a row (device/cpu/launch.hpp's SoloTeam
// on the CPU): 32 lanes walk the row's columns together, coalesced, and
// reduce with shuffles; every lane gets the result.
struct WarpTeam {
  static constexpr std::int64_t size = 32;
  std::int64_t rank;
  template <class A>
  __host__ __device__ A sum(A x) const {
#ifdef __CUDA_ARCH__
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
#endif
    return x;
  }
  template <class A>
  __host__ __device__ A max(A x) const {
#ifdef __CUDA_ARCH__
    for (int offset = 16; offset > 0; offset /= 2) {
      const A other = __shfl_xor_sync(0xffffffffu, x, offset);
      x = other > x ? other : x;
    }
#endif
    return x;
  }
};

// A block of threads as the team, for rows too wide for a warp and too few
// to fill the device (an LM head's rows over the vocabulary): lanes reduce
// by warp, the warps' results meet in shared memory and every lane adds
// them in the same order.
template <int Threads>
struct BlockTeam {
  static constexpr std::int64_t size = Threads;
  std::int64_t rank;
  double* partials;  // Threads / 32 values of shared memory

  template <class A>
  __host__ __device__ A sum(A x) const {
    return combine(WarpTeam{rank % 32}.sum(x), [](A a, A b) { return a + b; });
  }
  template <class A>
  __host__ __device__ A max(A x) const {
    return combine(WarpTeam{rank % 32}.max(x), [](A a, A b) { return b > a ? b : a; });
  }

private:
  template <class A, class Op>
  __host__ __device__ A combine(A warp_result, Op op) const {
#ifdef __CUDA_ARCH__
    A* shared = reinterpret_cast<A*>(partials);
    if (rank % 32 == 0) shared[rank / 32] = warp_result;
    __syncthreads();
    A result = shared[0];
    for (int w = 1; w < Threads / 32; ++w) result = op(result, shared[w]);
    __syncthreads();  // the partials are free for the next reduction
    return result;
#else
    return warp_result;
#endif
  }
};

template <class F>
__global__ void for_each_row(std::int64_t n, F f) {
  const std::int64_t warp = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x / 32;
  for (std::int64_t row = warp; row < n; row += stride) f(row, WarpTeam{std::int64_t(threadIdx.x % 32)});
}

template <int Threads, class F>
__global__ void __launch_bounds__(Threads) for_each_wide_row(std::int64_t n, F f) {
  __shared__ double partials[Threads / 32];
  for (std::int64_t row = blockIdx.x; row < n; row += gridDim.x) f(row, BlockTeam<Threads>{threadIdx.x, partials});
}

// f(row, team) for rows [0, n) of `columns` values: a warp per row, or a
// block of 256 threads per row for rows of 1024 values or more, and for rows
// of 256 or more when they are too few to fill the device with warps (a
// decode step's one row per sequence). A lane's loads wait on memory one
// after another, so on a device left idle, a row's time is the number of
// values each lane walks: 3 of a 576-wide row for a block, 18 for a warp.
template <class F>
void parallel_rows(std::int64_t n, std::int64_t columns, const F& f, cudaStream_t stream = nullptr) {
  if (n <= 0) return;
  constexpr std::int64_t few_rows = 2048;
  if (columns >= 1024 || (columns >= 256 && n < few_rows)) {
    for_each_wide_row<256><<<unsigned(std::min<std::int64_t>(n, 1 << 16)), 256, 0, stream>>>(n, f);
  } else {
    constexpr int threads = 256, rows_per_block = threads / 32;
    const auto blocks = unsigned(std::min<std::int64_t>((n + rows_per_block - 1) / rows_per_block, 1 << 16));
    for_each_row<<<blocks, threads, 0, stream>>>(n, f);
  }
  FT_CUDA_CHECK(cudaGetLastError());
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
