#pragma once
// The MLP's elementwise middle, between its input and output projections.
//
//   gated (SwiGLU, Llama): in = [gate | up] per row, [N, 2F];  h = act(gate) * up
//   plain (GPT-NeoX):      in = [N, F];                         h = act(in)
//
// Llama's gate_proj and up_proj are one [2F, C] weight in ft, so one GEMM
// makes both halves.
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/activation.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// One row per call, its F columns shared by a team of lanes
// (device/cpu/launch.hpp): the plain loop on the CPU, a warp or a block on
// a GPU.
template <class T>
struct MlpForwardRow {
  using A = acc_t<T>;
  T* h;
  const T* in;
  index_t F;
  bool gated;
  Activation act;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    const T* x = in + n * (gated ? 2 * F : F);
    for (index_t f = team.rank; f < F; f += team.size) {
      A a = activate(act, A(x[f]));
      h[n * F + f] = T(gated ? a * A(x[F + f]) : a);
    }
  }
};

template <class T>
struct MlpBackwardRow {
  using A = acc_t<T>;
  T* din;
  const T* dh;
  const T* in;
  index_t F;
  bool gated;
  Activation act;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    index_t width = gated ? 2 * F : F;
    const T* x = in + n * width;
    T* dx = din + n * width;
    for (index_t f = team.rank; f < F; f += team.size) {
      A g = A(dh[n * F + f]);
      A up = gated ? A(x[F + f]) : A(1);
      dx[f] = T(A(dx[f]) + g * up * activate_derivative(act, A(x[f])));
      if (gated) dx[F + f] = T(A(dx[F + f]) + g * activate(act, A(x[f])));
    }
  }
};

template <class Device = device::Cpu, class T>
void mlp_forward(T* h, const T* in, index_t N, index_t F, bool gated, Activation act) {
  Device::parallel_rows(N, F, MlpForwardRow<T>{h, in, F, gated, act});
}

template <class Device = device::Cpu, class T>
void mlp_backward(T* din, const T* dh, const T* in, index_t N, index_t F, bool gated, Activation act) {
  Device::parallel_rows(N, F, MlpBackwardRow<T>{din, dh, in, F, gated, act});
}

}  // namespace ft::nn
