#pragma once
// FLOPs a training step needs, and what this machine can do, for MFU.
//
// A token costs 2 FLOPs per matmul weight forward, 2 more for the input
// gradient, and 2 more for the weight gradient when the weight trains (the
// usual 6N of full fine-tuning; 4N under LoRA or prompt tuning, whose frozen
// weights need no weight gradient). Attention adds 4 T C per layer forward
// (scores and weighted sum, causal half of T^2 counted as T^2 / 2 twice) and
// twice that backward. The peak is measured, not taken from a data sheet: the
// best of a few large GEMMs on the device that trains (f32 through this
// machine's BLAS on the CPU).
#include <algorithm>
#include <chrono>
#include <type_traits>
#include <vector>

#include "ft/core/host_device.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::train {

// Weights a token is multiplied by (in a sparse layer, the experts it takes).
inline double matmul_parameters(const models::TransformerConfig& c) {
  double blocks = 0;
  for (index_t l = 0; l < c.num_layers; ++l)
    blocks += double(c.hidden_size) * double(c.qkv_width() + c.num_heads * c.head_dim) +
              double(c.mlp_matmul_weights(l));
  return blocks + double(c.vocab_size) * double(c.hidden_size);
}

// FLOPs per token of one forward + backward over rows of T tokens; extra_matmul
// counts trainable parameters beside the frozen ones (LoRA matrices).
inline double flops_per_token(const models::TransformerConfig& c, index_t T, bool trains_base_weights,
                              double extra_matmul = 0) {
  const double base = matmul_parameters(c) * (trains_base_weights ? 6.0 : 4.0);
  const double attention = 6.0 * double(c.num_layers) * double(T) * double(c.num_heads * c.head_dim);
  return base + 6.0 * extra_matmul + attention;
}

template <class T>
struct FillWith {
  T* x;
  T value;
  FT_HOST_DEVICE void operator()(index_t i) const { x[i] = value; }
};

// FLOP/s of the best of a few n^3 GEMMs in T on a device.
template <class Device = device::Cpu, element T = float>
double measure_gemm_peak(index_t n = 2048, int repeats = 5) {
  using Matrix = Tensor<T, typename Device::Memory>;
  Matrix a(Shape{n * n}, typename Matrix::Uninitialized{}), b(a.shape(), typename Matrix::Uninitialized{}),
      c(a.shape(), typename Matrix::Uninitialized{});
  for (const Matrix* m : {&a, &b, &c}) Device::parallel_for(n * n, FillWith<T>{m->data(), T(0.5f)});
  T first{};
  auto product = [&] {
    Device::template gemm<T>(Op::none, Op::none, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
    Device::to_host(&first, c.data(), sizeof(T));  // waits for the device
  };
  product();  // warm up
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    product();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) / s);
  }
  return best;
}

}  // namespace ft::train
