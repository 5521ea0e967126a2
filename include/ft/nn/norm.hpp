#pragma once
// RMSNorm (Llama) and LayerNorm (GPT-NeoX) over the last dimension C.
//
//   RMSNorm:   y = w * x * rstd,               rstd = 1 / sqrt(mean(x^2) + eps)
//   LayerNorm: y = w * (x - mean) * rstd + b,  rstd = 1 / sqrt(var(x) + eps)
//
// Forward saves mean (LayerNorm only) and rstd per row, in the accumulation
// type, so backward needs only x. Each row is one functor call: the same
// functor runs on the CPU launcher and, later, a GPU grid.
#include <cmath>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

enum class NormKind { rms, layer };

template <class T>
struct NormForwardRow {
  using A = acc_t<T>;
  T* out;
  A* mean;  // null for RMSNorm
  A* rstd;
  const T* in;
  const T* weight;
  const T* bias;  // LayerNorm only; may be null
  index_t C;
  A eps;

  FT_HOST_DEVICE void operator()(index_t n) const {
    const T* x = in + n * C;
    A mu = 0;
    if (mean) {
      for (index_t c = 0; c < C; ++c) mu += A(x[c]);
      mu /= A(C);
    }
    A var = 0;
    for (index_t c = 0; c < C; ++c) {
      A d = A(x[c]) - mu;
      var += d * d;
    }
    A r = A(1) / std::sqrt(var / A(C) + eps);
    for (index_t c = 0; c < C; ++c) {
      A y = (A(x[c]) - mu) * r * A(weight[c]);
      if (bias) y += A(bias[c]);
      out[n * C + c] = T(y);
    }
    if (mean) mean[n] = mu;
    rstd[n] = r;
  }
};

// dx for one row: g = dy * w;  dx += rstd * (g - mean(g) [LayerNorm] - xhat * mean(g * xhat)).
template <class T>
struct NormBackwardInputRow {
  using A = acc_t<T>;
  T* din;
  const T* dout;
  const T* in;
  const T* weight;
  const A* mean;  // null for RMSNorm
  const A* rstd;
  index_t C;

  FT_HOST_DEVICE void operator()(index_t n) const {
    const T* x = in + n * C;
    const T* dy = dout + n * C;
    A mu = mean ? mean[n] : A(0), r = rstd[n];
    A mean_g = 0, mean_gx = 0;
    for (index_t c = 0; c < C; ++c) {
      A g = A(dy[c]) * A(weight[c]);
      mean_g += g;
      mean_gx += g * (A(x[c]) - mu) * r;
    }
    mean_g = mean ? mean_g / A(C) : A(0);
    mean_gx /= A(C);
    for (index_t c = 0; c < C; ++c) {
      A xhat = (A(x[c]) - mu) * r;
      A g = A(dy[c]) * A(weight[c]);
      din[n * C + c] = T(A(din[n * C + c]) + r * (g - mean_g - xhat * mean_gx));
    }
  }
};

// dw and db for one channel, summed over all rows (threads split channels so
// that no two write the same parameter).
template <class T>
struct NormBackwardParamColumn {
  using A = acc_t<T>;
  T* dweight;
  T* dbias;  // may be null
  const T* dout;
  const T* in;
  const A* mean;
  const A* rstd;
  index_t N, C;

  FT_HOST_DEVICE void operator()(index_t c) const {
    A dw = 0, db = 0;
    for (index_t n = 0; n < N; ++n) {
      A mu = mean ? mean[n] : A(0);
      A dy = A(dout[n * C + c]);
      dw += dy * (A(in[n * C + c]) - mu) * rstd[n];
      db += dy;
    }
    dweight[c] = T(A(dweight[c]) + dw);
    if (dbias) dbias[c] = T(A(dbias[c]) + db);
  }
};

template <class Device = device::Cpu, class T>
void norm_forward(NormKind kind, T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* in, const T* weight,
                  const T* bias, index_t N, index_t C, acc_t<T> eps) {
  Device::parallel_for(N, NormForwardRow<T>{out, kind == NormKind::layer ? mean : nullptr, rstd, in, weight,
                                         kind == NormKind::layer ? bias : nullptr, C, eps});
}

// dweight/dbias may be null for a frozen norm.
template <class Device = device::Cpu, class T>
void norm_backward(NormKind kind, T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                   const acc_t<T>* mean, const acc_t<T>* rstd, index_t N, index_t C) {
  const acc_t<T>* mu = kind == NormKind::layer ? mean : nullptr;
  Device::parallel_for(N, NormBackwardInputRow<T>{din, dout, in, weight, mu, rstd, C});
  if (dweight)
    Device::parallel_for(C, NormBackwardParamColumn<T>{dweight, kind == NormKind::layer ? dbias : nullptr, dout,
                                                    in, mu, rstd, N, C});
}

}  // namespace ft::nn
