#pragma once
// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: the norm
// is taken over every gradient buffer together, and all are scaled by
// max_norm / (norm + 1e-6) when that is below one. Returns the norm before
// clipping (what trainers log as grad_norm). Buffers live on a device
// (device/cpu.hpp); the functions take it as their first template argument.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/optim/chunk_squares.hpp"
#include "ft/tensor/shape.hpp"
#include "ft/tensor/scratch.hpp"

namespace ft::optim {

template <class G>
struct GradientBuffer {
  G* data;
  index_t size;
};

template <class G>
struct ScaleElements {
  G* x;
  acc_t<G> factor;
  FT_HOST_DEVICE void operator()(index_t i) const { x[i] = G(acc_t<G>(x[i]) * factor); }
};

// Sum of squares over buffers in fixed chunks added in a fixed order (the
// chunks of a buffer, then the buffers): the same bits for any thread count
// or schedule (an OpenMP reduction combines in whatever order threads
// finish), which bit-exact resume relies on. The chunks' sums of every
// buffer come back to the host in one copy, one wait for the device a step.
template <class Device = device::Cpu, class G>
double sum_of_squares(std::span<const GradientBuffer<G>> buffers) {
  constexpr index_t chunk = 1 << 14;
  auto chunks_of = [](const GradientBuffer<G>& b) { return (b.size + chunk - 1) / chunk; };
  index_t total = 0;
  for (const auto& b : buffers) total += chunks_of(b);
  if (total == 0) return 0;
  memory::Scratch<double, typename Device::Memory> partial(total);
  index_t at = 0;
  for (const auto& b : buffers) {
    Device::parallel_rows(chunks_of(b), chunk,
                          ChunkSquares<Elements<G>>{{b.data}, b.size, chunk, partial.data() + at});
    at += chunks_of(b);
  }
  std::vector<double> host(static_cast<std::size_t>(total));
  Device::to_host(host.data(), partial.data(), host.size() * sizeof(double));
  double sum = 0;
  at = 0;
  for (const auto& b : buffers) {
    double s = 0;
    for (index_t c = 0; c < chunks_of(b); ++c) s += host[std::size_t(at++)];
    sum += s;
  }
  return sum;
}

template <class Device = device::Cpu, class G>
double sum_of_squares(const G* x, index_t n) {
  const GradientBuffer<G> one{const_cast<G*>(x), n};
  return sum_of_squares<Device>(std::span<const GradientBuffer<G>>(&one, 1));
}

// Multiplies n values by `factor`.
template <class Device = device::Cpu, class G>
void scale(G* x, index_t n, double factor) {
  Device::parallel_for(n, ScaleElements<G>{x, acc_t<G>(factor)});
}

// Scales every buffer by max_norm / (norm + 1e-6) when that is below one;
// `norm` is the global norm, which ranks holding parts of the gradient
// compute together.
template <class Device = device::Cpu, class G>
void clip_to_norm(std::span<const GradientBuffer<G>> buffers, double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coefficient < 1.0)
    for (const auto& b : buffers) scale<Device>(b.data, b.size, coefficient);
}

template <class Device = device::Cpu, class G>
double clip_grad_norm(std::span<const GradientBuffer<G>> buffers, double max_norm) {
  const double norm = std::sqrt(sum_of_squares<Device>(buffers));
  clip_to_norm<Device>(buffers, norm, max_norm);
  return norm;
}

}  // namespace ft::optim
