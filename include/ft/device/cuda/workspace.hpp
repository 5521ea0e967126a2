#pragma once
// Sizes by which the CUDA device allocates, in plain C++ so that the memory
// estimate, built without CUDA, counts what the device will take:
//   blas_workspace_bytes  the workspace cuBLASLt's algorithms may use, one
//                         per host thread that runs products
//                         (device/cuda/gemm.hpp), allocated by the first
//                         product and kept for the run
//   column_rows           rows each task sums in a column sum
//                         (nn/column_sums.hpp): columns alone are too few
//                         threads for a GPU
//   gemm_peak_size        the square products that measure the GEMM peak,
//                         in the run's storage dtype, whose tensor cores set it
#include <cstddef>

#include "ft/tensor/shape.hpp"  // index_t

namespace ft::cuda {
inline constexpr std::size_t blas_workspace_bytes = std::size_t(32) << 20;
inline constexpr index_t column_rows = 128;
inline constexpr index_t gemm_peak_size = 8192;
}  // namespace ft::cuda
