#pragma once
// RMSNorm (Llama) and LayerNorm (GPT-NeoX) over the last dimension C.
//
//   RMSNorm:   y = w * x * rstd,               rstd = 1 / sqrt(mean(x^2) + eps)
//   LayerNorm: y = w * (x - mean) * rstd + b,  rstd = 1 / sqrt(var(x) + eps)
//
// Gemma's RMSNorm scales by 1 + w (the functors' weight_offset), added in
// the accumulation type as HF adds it in float32; w's gradient is the same.
//
// Forward saves mean (LayerNorm only) and rstd per row, in the accumulation
// type, so backward needs only x. The same functors run on the CPU
// launcher and a GPU grid.
#include <cmath>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/column_sums.hpp"
#include "ft/nn/layer_options.hpp"
#include "ft/tensor/scratch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// One row per call, its columns shared by a team of lanes (launch.hpp):
// one lane on the CPU, a warp or a block on a GPU.
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
  A weight_offset;  // 1 for Gemma's (1 + w), else 0

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    const T* x = in + n * C;
    A mu = 0;
    if (mean) {
      for (index_t c = team.rank; c < C; c += team.size) mu += A(x[c]);
      mu = team.sum(mu) / A(C);
    }
    A var = 0;
    for (index_t c = team.rank; c < C; c += team.size) {
      A d = A(x[c]) - mu;
      var += d * d;
    }
    A r = A(1) / std::sqrt(team.sum(var) / A(C) + eps);
    for (index_t c = team.rank; c < C; c += team.size) {
      A y = (A(x[c]) - mu) * r * (A(weight[c]) + weight_offset);
      if (bias) y += A(bias[c]);
      out[n * C + c] = T(y);
    }
    if (team.rank != 0) return;
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
  A weight_offset;  // as NormForwardRow's

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    const T* x = in + n * C;
    const T* dy = dout + n * C;
    A mu = mean ? mean[n] : A(0), r = rstd[n];
    A mean_g = 0, mean_gx = 0;
    for (index_t c = team.rank; c < C; c += team.size) {
      A g = A(dy[c]) * (A(weight[c]) + weight_offset);
      mean_g += g;
      mean_gx += g * (A(x[c]) - mu) * r;
    }
    mean_g = mean ? team.sum(mean_g) / A(C) : A(0);
    mean_gx = team.sum(mean_gx) / A(C);
    for (index_t c = team.rank; c < C; c += team.size) {
      A xhat = (A(x[c]) - mu) * r;
      A g = A(dy[c]) * (A(weight[c]) + weight_offset);
      din[n * C + c] = T(A(din[n * C + c]) + r * (g - mean_g - xhat * mean_gx));
    }
  }
};

// dw and db summed over rows in spans (nn/column_sums.hpp): each task sums
// one column over one span of `rows` rows into partials [spans, C].
template <class T>
struct NormParamPartial {
  using A = acc_t<T>;
  A* partial_w;
  A* partial_b;  // may be null
  const T* dout;
  const T* in;
  const A* mean;
  const A* rstd;
  index_t N, C, rows;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t c = i % C, n0 = i / C * rows, n1 = n0 + rows < N ? n0 + rows : N;
    A dw = 0, db = 0;
    for (index_t n = n0; n < n1; ++n) {
      A mu = mean ? mean[n] : A(0);
      A dy = A(dout[n * C + c]);
      dw += dy * (A(in[n * C + c]) - mu) * rstd[n];
      db += dy;
    }
    partial_w[i] = dw;
    if (partial_b) partial_b[i] = db;
  }
};

// The 1 of Gemma's 1 + w.
template <class A>
A norm_weight_offset(NormKind kind) {
  return kind == NormKind::rms_unit_offset ? A(1) : A(0);
}

template <class Device = device::Cpu, class T>
void norm_forward(NormKind kind, T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* in, const T* weight,
                  const T* bias, index_t N, index_t C, acc_t<T> eps) {
  Device::parallel_rows(N, C, NormForwardRow<T>{out, kind == NormKind::layer ? mean : nullptr, rstd, in, weight,
                                          kind == NormKind::layer ? bias : nullptr, C, eps,
                                          norm_weight_offset<acc_t<T>>(kind)});
}

// dweight/dbias may be null for a frozen norm.
template <class Device = device::Cpu, class T>
void norm_backward(NormKind kind, T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                   const acc_t<T>* mean, const acc_t<T>* rstd, index_t N, index_t C) {
  using A = acc_t<T>;
  const A* mu = kind == NormKind::layer ? mean : nullptr;
  Device::parallel_rows(N, C, NormBackwardInputRow<T>{din, dout, in, weight, mu, rstd, C, norm_weight_offset<A>(kind)});
  if (!dweight) return;
  if (kind != NormKind::layer) dbias = nullptr;
  const index_t rows = column_span_rows<Device>(N), spans = (N + rows - 1) / rows;
  memory::Scratch<A, typename Device::Memory> partial_w(spans * C), partial_b(dbias ? spans * C : 0);
  Device::parallel_for(spans * C, NormParamPartial<T>{partial_w.data(), dbias ? partial_b.data() : nullptr, dout,
                                                      in, mu, rstd, N, C, rows});
  Device::parallel_for(C, ColumnSpansSum<T>{dweight, partial_w.data(), spans, C});
  if (dbias) Device::parallel_for(C, ColumnSpansSum<T>{dbias, partial_b.data(), spans, C});
}

}  // namespace ft::nn
