#pragma once
// Timing device work for the GPU benchmarks: the median of repeated runs
// between CUDA events, after warm-up runs (module loading, cuBLASLt's
// plans, the caching allocator's first blocks stay out of the figures).
#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include <ft/device/cuda/check.hpp>

namespace ft::bench {

template <class F>
double median_seconds(F&& run, int warmup = 3, int repeats = 10) {
  for (int i = 0; i < warmup; ++i) run();
  cudaEvent_t start, end;
  FT_CUDA_CHECK(cudaEventCreate(&start));
  FT_CUDA_CHECK(cudaEventCreate(&end));
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    FT_CUDA_CHECK(cudaEventRecord(start));
    run();
    FT_CUDA_CHECK(cudaEventRecord(end));
    FT_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
    seconds.push_back(ms / 1e3);
  }
  FT_CUDA_CHECK(cudaEventDestroy(start));
  FT_CUDA_CHECK(cudaEventDestroy(end));
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace ft::bench
