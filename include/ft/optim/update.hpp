#pragma once
// The element-wise updates of the optimizers that keep per-element state,
// written once as host/device functors over flat buffers: a parameter shard
// (storage type T), its gradient (G) and f32 state. Definitions follow the
// references users compare against:
//
//   SGD    torch.optim.SGD:   g += wd p; b = mu b + (1 - dampening) g (b = g on
//          the first step); g = nesterov ? g + mu b : b; p -= lr g
//   AdamW  torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1 - b1) g;
//          v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
//   Lion   Chen et al. 2023:  p *= 1 - lr wd; p -= lr sign(b1 m + (1 - b1) g);
//          m = b2 m + (1 - b2) g
//
// The step count t starts at 1. Arithmetic is in f32 (double when T is
// double, for tests). State is kept in S: f32 normally, bf16 when a run keeps
// everything in bf16 (precision::BF16True).
#include <cmath>
#include <cstdint>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

struct Hyperparameters {
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW; Lion uses beta1 0.9, beta2 0.99
  double momentum = 0.0, dampening = 0.0;         // SGD
  bool nesterov = false;
};

template <class T, class G, class S = acc_t<T>>
struct SgdUpdate {
  using A = acc_t<T>;
  T* p;
  const G* g;
  S* buffer;  // momentum buffer; unused when momentum is 0
  A lr, weight_decay, momentum, dampening;
  bool nesterov, first;

  FT_HOST_DEVICE void operator()(index_t i) const {
    A grad = A(g[i]) + weight_decay * A(p[i]);
    if (momentum != A(0)) {
      A b = first ? grad : momentum * A(buffer[i]) + (A(1) - dampening) * grad;
      buffer[i] = S(b);
      grad = nesterov ? grad + momentum * b : b;
    }
    p[i] = T(A(p[i]) - lr * grad);
  }
};

template <class T, class G, class S = acc_t<T>>
struct AdamWUpdate {
  using A = acc_t<T>;
  T* p;
  const G* g;
  S *m, *v;
  A lr, weight_decay, beta1, beta2, eps, bias1, bias2_sqrt;  // bias1 = 1 - b1^t, bias2_sqrt = sqrt(1 - b2^t)

  FT_HOST_DEVICE void operator()(index_t i) const {
    A grad = A(g[i]);
    A param = A(p[i]) * (A(1) - lr * weight_decay);
    A m_i = beta1 * A(m[i]) + (A(1) - beta1) * grad;
    A v_i = beta2 * A(v[i]) + (A(1) - beta2) * grad * grad;
    m[i] = S(m_i);
    v[i] = S(v_i);
    A denom = std::sqrt(v_i) / bias2_sqrt + eps;
    p[i] = T(param - lr / bias1 * m_i / denom);
  }
};

template <class T, class G, class S = acc_t<T>>
struct LionUpdate {
  using A = acc_t<T>;
  T* p;
  const G* g;
  S* m;
  A lr, weight_decay, beta1, beta2;

  FT_HOST_DEVICE void operator()(index_t i) const {
    A grad = A(g[i]);
    A param = A(p[i]) * (A(1) - lr * weight_decay);
    A c = beta1 * A(m[i]) + (A(1) - beta1) * grad;
    A sign = c > A(0) ? A(1) : c < A(0) ? A(-1) : A(0);
    p[i] = T(param - lr * sign);
    m[i] = S(beta2 * A(m[i]) + (A(1) - beta2) * grad);
  }
};

// One step over a flat shard, on a device (device/cpu.hpp); `step` counts from 1.
template <class Device = device::Cpu, class T, class G, class S = acc_t<T>>
void sgd_step(T* p, const G* g, S* buffer, index_t n, const Hyperparameters& h, std::int64_t step) {
  using A = acc_t<T>;
  Device::parallel_for(n, SgdUpdate<T, G, S>{p, g, buffer, A(h.lr), A(h.weight_decay), A(h.momentum), A(h.dampening),
                                       h.nesterov, step == 1});
}

template <class Device = device::Cpu, class T, class G, class S = acc_t<T>>
void adamw_step(T* p, const G* g, S* m, S* v, index_t n, const Hyperparameters& h, std::int64_t step) {
  using A = acc_t<T>;
  A bias1 = A(1) - std::pow(A(h.beta1), A(step)), bias2 = A(1) - std::pow(A(h.beta2), A(step));
  Device::parallel_for(n, AdamWUpdate<T, G, S>{p, g, m, v, A(h.lr), A(h.weight_decay), A(h.beta1), A(h.beta2), A(h.eps),
                                         bias1, std::sqrt(bias2)});
}

template <class Device = device::Cpu, class T, class G, class S = acc_t<T>>
void lion_step(T* p, const G* g, S* m, index_t n, const Hyperparameters& h) {
  using A = acc_t<T>;
  Device::parallel_for(n, LionUpdate<T, G, S>{p, g, m, A(h.lr), A(h.weight_decay), A(h.beta1), A(h.beta2)});
}

}  // namespace ft::optim
