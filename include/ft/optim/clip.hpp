#pragma once
// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: the norm
// is taken over every gradient buffer together, and all are scaled by
// max_norm / (norm + 1e-6) when that is below one. Returns the norm before
// clipping (what trainers log as grad_norm).
#include <cmath>
#include <span>

#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

template <class G>
struct GradientBuffer {
  G* data;
  index_t size;
};

template <class G>
double clip_grad_norm(std::span<const GradientBuffer<G>> buffers, double max_norm) {
  double sum = 0;
  for (const auto& b : buffers) {
    double part = 0;
#pragma omp parallel for reduction(+ : part) schedule(static)
    for (index_t i = 0; i < b.size; ++i) part += double(b.data[i]) * double(b.data[i]);
    sum += part;
  }
  const double norm = std::sqrt(sum);
  const double coefficient = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coefficient < 1.0)
    for (const auto& b : buffers)
      cpu::parallel_for(b.size, [&](index_t i) { b.data[i] = G(acc_t<G>(b.data[i]) * acc_t<G>(coefficient)); });
  return norm;
}

}  // namespace ft::optim
