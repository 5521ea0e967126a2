// The CUDA build works end to end: a kernel built for sm_80/sm_90 runs and
// gives the host's answer. Exits 77 (ctest: skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "support/gpu_check.hpp"

__global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  ft::testing::skip_without_gpu();
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = float(i % 97), y[i] = float(i % 13);
  float *dx = nullptr, *dy = nullptr;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  axpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
  std::vector<float> out(n);
  cudaError_t err = cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  for (int i = 0; i < n; ++i)
    if (out[i] != 2.0f * x[i] + y[i]) {
      std::printf("mismatch at %d: %f\n", i, out[i]);
      return 1;
    }
  std::puts("CUDA axpy: passed");
  return 0;
}
