#pragma once
// Every CUDA runtime call is checked: a failure becomes an ft::Error naming
// the call, the device and CUDA's own words, and an allocation failure an
// ft::OutOfMemory, so a run that ran out of device memory ends as that
// outcome. Host code only needs the runtime's C API, not nvcc.
#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "ft/core/error.hpp"

namespace ft::cuda {

// "cudaMalloc(...) failed on CUDA device 0", or "... failed with no usable
// CUDA device" where none can be made current (no driver, no GPU).
inline std::string failed_call(const char* call) {
  int device = -1;
  const bool current = cudaGetDevice(&device) == cudaSuccess;
  cudaGetLastError();  // a failed call leaves its error pending; the next check must not report it again
  return std::string(call) +
         (current ? " failed on CUDA device " + std::to_string(device) : std::string(" failed with no usable CUDA device"));
}

inline void check(cudaError_t status, const char* call, std::size_t bytes = 0) {
  if (status == cudaSuccess) return;
  const std::string what = failed_call(call) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(what, bytes);
  throw Error(what);
}

}  // namespace ft::cuda

// FT_CUDA_CHECK(cudaMemcpy(...)): the call's own text names it in the error.
#define FT_CUDA_CHECK(call) ::ft::cuda::check((call), #call)
