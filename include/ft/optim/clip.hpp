#pragma once
// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: the norm
// is taken over every gradient buffer together, and all are scaled by
// max_norm / (norm + 1e-6) when that is below one. Returns the norm before
// clipping (what trainers log as grad_norm).
#include <cmath>
#include <span>
#include <vector>
#include <algorithm>

#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

template <class G>
struct GradientBuffer {
  G* data;
  index_t size;
};

// Sum of squares in fixed chunks added in a fixed order: the same bits for
// any thread count or schedule (an OpenMP reduction combines in whatever
// order threads finish), which bit-exact resume relies on.
template <class G>
double sum_of_squares(const G* x, index_t n) {
  constexpr index_t chunk = 1 << 14;
  const index_t chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(std::size_t(chunks), 0.0);
  cpu::parallel_for(chunks, [&](index_t c) {
    double s = 0;
    for (index_t i = c * chunk, end = std::min(n, i + chunk); i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[std::size_t(c)] = s;
  });
  double sum = 0;
  for (double s : partial) sum += s;
  return sum;
}

// Scales every buffer by max_norm / (norm + 1e-6) when that is below one;
// `norm` is the global norm, which ranks holding parts of the gradient
// compute together.
template <class G>
void clip_to_norm(std::span<const GradientBuffer<G>> buffers, double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coefficient < 1.0)
    for (const auto& b : buffers)
      cpu::parallel_for(b.size, [&](index_t i) { b.data[i] = G(acc_t<G>(b.data[i]) * acc_t<G>(coefficient)); });
}

template <class G>
double clip_grad_norm(std::span<const GradientBuffer<G>> buffers, double max_norm) {
  double sum = 0;
  for (const auto& b : buffers) sum += sum_of_squares(b.data, b.size);
  const double norm = std::sqrt(sum);
  clip_to_norm(buffers, norm, max_norm);
  return norm;
}

}  // namespace ft::optim
