// ft's GPU kernels one by one:
//  - causal attention (device/cuda/flash_attention.cuh) forward and
//    backward in TFLOP/s, at the shapes tools/bench_torch_cuda.py gives
//    PyTorch's SDPA (bf16, 16 heads of 128, 16384 tokens per call; and
//    head_dim 64);
//  - the memory-bound layer functors (norm, MLP, residual, RoPE, LM-head
//    rows) at a 1B Llama's shape, in GB/s of the bytes they must move,
//    against a device-to-device copy;
//  - the optimizer steps (AdamW with f32 moments, 8-bit AdamW) over 2^28
//    f32 master weights, in GB/s of the bytes they must move.
//
//   bench_cuda_kernels [attention] [layers] [optimizer]   (all three by default)
//
// FLOPs: forward 4 B H T^2 D / 2 (scores and weighted sum over the causal
// half); backward counted as 2.5 forwards, as flash-attention benchmarks do
// (ft's backward runs 7 products where a backward with atomic dQ runs 5, so
// its own work is 3.5 forwards).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <ft/device/cuda.cuh>
#include <ft/nn/attention_rows.hpp>
#include <ft/nn/cross_entropy.hpp>
#include <ft/nn/mlp.hpp>
#include <ft/nn/norm.hpp>
#include <ft/nn/residual.hpp>
#include <ft/nn/rope.hpp>
#include <ft/optim/adamw8bit.hpp>
#include <ft/optim/update.hpp>

#include "timing.cuh"

namespace {

template <class T>
T* device_random(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> host(n);
  for (T& x : host) x = T(normal(rng));
  T* p = static_cast<T*>(ft::memory::CudaDevice::allocate(n * sizeof(T)));
  ft::device::Cuda::from_host(p, host.data(), n * sizeof(T));
  return p;
}

void run(ft::index_t B, ft::index_t T, ft::index_t H, ft::index_t G, ft::index_t D) {
  using ft::bf16;
  const ft::nn::AttentionShape s{B, T, H, G, D, 0};
  const std::size_t N = std::size_t(B * T);
  bf16* qkv = device_random<bf16>(N * std::size_t((H + 2 * G) * D), 1);
  bf16* out = device_random<bf16>(N * std::size_t(H * D), 2);
  bf16* dout = device_random<bf16>(N * std::size_t(H * D), 3);
  bf16* dqkv = device_random<bf16>(N * std::size_t((H + 2 * G) * D), 4);
  float* lse = device_random<float>(std::size_t(B * H * T), 5);
  const double flops = 4.0 * double(B * H) * double(T) * double(T) * double(D) / 2;
  const double forward = ft::bench::median_seconds(
      [&] { ft::nn::attention_forward_on<ft::device::Cuda>(out, lse, qkv, nullptr, s); });
  const double backward = ft::bench::median_seconds([&] {
    ft::nn::attention_backward_on<ft::device::Cuda>(dqkv, dout, out, lse, qkv, nullptr, s);
  });
  std::printf("| ft flash | %lld x %lld | %lld/%lld x %lld | %.0f | %.0f | %.0f | %.2f | %.2f |\n", (long long)B,
              (long long)T, (long long)H, (long long)G, (long long)D, flops / forward / 1e12,
              2.5 * flops / backward / 1e12, 3.5 * flops / (forward + backward) / 1e12, forward * 1e3,
              backward * 1e3);
  for (void* p : {(void*)qkv, (void*)out, (void*)dout, (void*)dqkv})
    ft::memory::CudaDevice::deallocate(p, 0);
  ft::memory::CudaDevice::deallocate(lse, 0);
}

// One line: a kernel's median time and the bandwidth of `bytes` it must move.
template <class F>
void layer(const char* name, double bytes, F&& run) {
  const double s = ft::bench::median_seconds(run);
  std::printf("| %s | %.1f | %.0f |\n", name, s * 1e6, bytes / s / 1e9);
}

// The layer functors at a 1B Llama's shape: 8192 rows of 2048, MLP width
// 8192, 32 + 2 x 8 heads of 64; the LM head's rows over a 128256 vocabulary.
void layers() {
  using ft::bf16;
  using Cuda = ft::device::Cuda;
  const ft::index_t N = 8192, C = 2048, F = 8192, H = 32, G = 8, D = 64, V = 128256, R = 1024;
  bf16* x = device_random<bf16>(std::size_t(N * C), 6);
  bf16* y = device_random<bf16>(std::size_t(N * C), 7);
  bf16* dy = device_random<bf16>(std::size_t(N * C), 8);
  bf16* w = device_random<bf16>(std::size_t(C), 9);
  bf16* dw = device_random<bf16>(std::size_t(C), 10);
  float* rstd = device_random<float>(std::size_t(N), 11);
  bf16* mlp_in = device_random<bf16>(std::size_t(N * 2 * F), 12);
  bf16* dmlp_in = device_random<bf16>(std::size_t(N * 2 * F), 13);
  bf16* h = device_random<bf16>(std::size_t(N * F), 14);
  bf16* qkv = device_random<bf16>(std::size_t(N * (H + 2 * G) * D), 15);
  bf16* logits = device_random<bf16>(std::size_t(R * V), 16);
  std::vector<std::int32_t> host(static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = std::int32_t(i % 2048);
  auto* positions = static_cast<std::int32_t*>(ft::memory::CudaDevice::allocate(host.size() * 4));
  Cuda::from_host(positions, host.data(), host.size() * 4);
  auto* targets = static_cast<std::int32_t*>(ft::memory::CudaDevice::allocate(std::size_t(R) * 4));
  Cuda::from_host(targets, host.data(), std::size_t(R) * 4);
  auto* row_loss = static_cast<double*>(ft::memory::CudaDevice::allocate(std::size_t(R) * 8));
  ft::nn::RopeConfig rope;
  rope.rotary_dim = D;
  const std::vector<float> inv = ft::nn::rope_inverse_frequencies(rope);
  float* inv_freq = device_random<float>(inv.size(), 17);
  Cuda::from_host(inv_freq, inv.data(), inv.size() * 4);
  const double row_bytes = double(N * C) * 2;

  std::printf("\n| layer kernel (1B shape, bf16) | us | GB/s |\n|---|---|---|\n");
  layer("device-to-device copy", 2 * row_bytes, [&] { Cuda::copy(y, x, std::size_t(N * C) * 2); });
  layer("rms norm forward", 2 * row_bytes, [&] {
    ft::nn::norm_forward<Cuda>(ft::nn::NormKind::rms, y, (float*)nullptr, rstd, x, w, (bf16*)nullptr, N, C, 1e-5f);
  });
  layer("rms norm backward (input)", 4 * row_bytes, [&] {
    ft::nn::norm_backward<Cuda>(ft::nn::NormKind::rms, y, (bf16*)nullptr, (bf16*)nullptr, dy, x, w, (float*)nullptr,
                                rstd, N, C);
  });
  layer("rms norm backward (input, weight)", 5 * row_bytes, [&] {
    ft::nn::norm_backward<Cuda>(ft::nn::NormKind::rms, y, dw, (bf16*)nullptr, dy, x, w, (float*)nullptr, rstd, N, C);
  });
  layer("residual add", 3 * row_bytes, [&] { ft::nn::add_into<Cuda>(y, x, N * C); });
  layer("swiglu forward", 3.0 * double(N * F) * 2, [&] {
    ft::nn::mlp_forward<Cuda>(h, mlp_in, N, F, true, ft::nn::Activation::silu);
  });
  layer("swiglu backward", 7.0 * double(N * F) * 2, [&] {
    ft::nn::mlp_backward<Cuda>(dmlp_in, h, mlp_in, N, F, true, ft::nn::Activation::silu);
  });
  layer("rope forward", 2.0 * double(N * (H + G) * D) * 2, [&] {
    ft::nn::rope_forward<Cuda>(qkv, positions, ft::nn::RopeTables{{inv_freq, inv.size()}}, N, H, G, D);
  });
  layer("lm head rows (1024 x 128256)", 3.0 * double(R * V) * 2, [&] {
    Cuda::parallel_rows(R, V, ft::nn::CrossEntropyRow<bf16>{logits, targets, row_loss, V, 1e-4f, true});
  });
}

// One step over 2^28 f32 master weights and gradients (a 1B model's
// trainable state is four of them): AdamW reads and writes the weights and
// two f32 moments and reads the gradient, 28 bytes an element; 8-bit AdamW
// moves one byte per moment instead of four, 16 bytes an element.
void optimizer_steps() {
  using Cuda = ft::device::Cuda;
  const ft::index_t n = ft::index_t(1) << 28;
  float* p = device_random<float>(std::size_t(n), 18);
  float* g = device_random<float>(std::size_t(n), 19);
  ft::memory::Array<float, ft::memory::CudaDevice> m{std::size_t(n)}, v{std::size_t(n)};  // zero-filled
  auto state = ft::optim::adamw8bit_state<float, ft::memory::CudaDevice>(n);
  ft::memory::Array<ft::optim::DynamicMap, ft::memory::CudaDevice> maps(2);
  Cuda::from_host(maps.data(), ft::optim::host_dynamic_maps(), maps.bytes());
  ft::optim::Hyperparameters h;
  h.weight_decay = 0.01;
  std::int64_t step = 0;
  std::printf("\n| optimizer step (2^28 f32 weights) | us | GB/s |\n|---|---|---|\n");
  layer("adamw, f32 moments", 28.0 * double(n),
        [&] { ft::optim::adamw_step<Cuda>(p, g, m.data(), v.data(), n, h, ++step); });
  step = 0;
  layer("adamw8bit", 16.0 * double(n),
        [&] { ft::optim::adamw8bit_step<Cuda>(p, g, n, state, maps.data(), h, ++step); });
  ft::memory::CudaDevice::deallocate(p, 0);
  ft::memory::CudaDevice::deallocate(g, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const auto wanted = [&](const char* part) {
    if (argc == 1) return true;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == part) return true;
    return false;
  };
  cudaDeviceProp prop{};
  FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s\n", prop.name);
  if (wanted("attention")) {
    std::printf("| kernel | B x T | heads/kv x dim | forward TFLOP/s | backward TFLOP/s | fwd+bwd TFLOP/s | fwd ms | bwd ms |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    run(8, 2048, 16, 16, 128);
    run(2, 8192, 16, 16, 128);
    run(8, 2048, 32, 32, 64);
    run(2, 8192, 32, 32, 64);
    run(8, 2048, 32, 8, 64);  // grouped-query, Llama-3.2-1B's heads
  }
  if (wanted("layers")) layers();
  if (wanted("optimizer")) optimizer_steps();
  return 0;
}
