#pragma once
// The workspace cuBLASLt's algorithms may use, one per host thread that runs
// products (kernels/cuda/gemm.hpp), allocated by the first product and kept
// for the run. Plain C++ so that the memory estimate, built without CUDA,
// counts it.
#include <cstddef>

namespace ft::cuda {
inline constexpr std::size_t blas_workspace_bytes = std::size_t(32) << 20;
}
