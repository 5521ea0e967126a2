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

inline void check(cudaError_t status, const char* call, std::size_t bytes = 0) {
  if (status == cudaSuccess) return;
  int device = -1;
  cudaGetDevice(&device);
  cudaGetLastError();  // a failed call leaves its error pending; the next check must not report it again
  const std::string what = std::string(call) + " failed on CUDA device " + std::to_string(device) + ": " +
                           cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(what, bytes);
  throw Error(what);
}

}  // namespace ft::cuda

// FT_CUDA_CHECK(cudaMemcpy(...)): the call's own text names it in the error.
#define FT_CUDA_CHECK(call) ::ft::cuda::check((call), #call)
