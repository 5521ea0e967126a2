#pragma once
// Activation functions with their derivatives, as HF names them in
// config.json (`hidden_act`): silu (Llama's SwiGLU), gelu (exact, erf),
// gelu_new / gelu_pytorch_tanh (the tanh approximation).
#include <cmath>

#include "ft/core/host_device.hpp"
#include "ft/nn/layer_options.hpp"

namespace ft::nn {

template <class A>
FT_HOST_DEVICE A activate(Activation act, A x) {
  switch (act) {
    case Activation::silu: return x / (A(1) + std::exp(-x));
    case Activation::gelu: return A(0.5) * x * (A(1) + std::erf(x * A(0.70710678118654752440)));
    case Activation::gelu_tanh: {
      A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
      return A(0.5) * x * (A(1) + std::tanh(inner));
    }
  }
  return x;
}

template <class A>
FT_HOST_DEVICE A activate_derivative(Activation act, A x) {
  switch (act) {
    case Activation::silu: {
      A sig = A(1) / (A(1) + std::exp(-x));
      return sig * (A(1) + x * (A(1) - sig));
    }
    case Activation::gelu: {
      A cdf = A(0.5) * (A(1) + std::erf(x * A(0.70710678118654752440)));
      A pdf = std::exp(A(-0.5) * x * x) * A(0.39894228040143267794);
      return cdf + x * pdf;
    }
    case Activation::gelu_tanh: {
      A k = A(0.79788456080286535588);
      A inner = k * (x + A(0.044715) * x * x * x);
      A th = std::tanh(inner);
      return A(0.5) * (A(1) + th) + A(0.5) * x * (A(1) - th * th) * k * (A(1) + A(3 * 0.044715) * x * x);
    }
  }
  return A(1);
}

}  // namespace ft::nn
