#pragma once
// RMSNorm over each attention head of the queries and keys, before the
// rotary embedding (Qwen3's q_norm and k_norm; Gemma 3's scale by 1 + w, the
// functors' weight_offset as in nn/norm.hpp). The fused rows of qkv
// [N, (H + 2G) * D] hold H query heads, G key heads and G value heads of D
// values each; every query head is normalised with one weight [D], every
// key head with another, and the values are left alone.
//
// Forward works in place on qkv and saves what backward reads: the heads'
// input, [N, (H + G) * D], which is also [N * (H + G), D] (one row per head),
// and each head's rstd [N * (H + G)]. Backward turns the gradient of the
// normalised heads, in place in dqkv, into the gradient of their input, and
// adds the two weights' gradients.
#include <cmath>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/column_sums.hpp"
#include "ft/tensor/scratch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// Where head j of token n sits: row r = n * (H + G) + j of the saved input,
// and the matching D values of the fused qkv row.
struct HeadRows {
  index_t H, G, D;

  FT_HOST_DEVICE index_t heads() const { return H + G; }
  FT_HOST_DEVICE index_t qkv_offset(index_t r) const { return r / heads() * (H + 2 * G) * D + r % heads() * D; }
  FT_HOST_DEVICE bool query(index_t r) const { return r % heads() < H; }
};

template <class T>
struct HeadNormForwardRow {
  using A = acc_t<T>;
  T* qkv;
  T* saved;
  A* rstd;
  const T* q_weight;
  const T* k_weight;
  HeadRows at;
  A eps;
  A weight_offset;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    T* x = qkv + at.qkv_offset(r);
    T* keep = saved + r * at.D;
    const T* w = at.query(r) ? q_weight : k_weight;
    A sum = 0;
    for (index_t d = team.rank; d < at.D; d += team.size) {
      keep[d] = x[d];
      sum += A(x[d]) * A(x[d]);
    }
    const A s = A(1) / std::sqrt(team.sum(sum) / A(at.D) + eps);
    for (index_t d = team.rank; d < at.D; d += team.size) x[d] = T(A(keep[d]) * s * (A(w[d]) + weight_offset));
    if (team.rank == 0) rstd[r] = s;
  }
};

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, written over dy.
template <class T>
struct HeadNormBackwardRow {
  using A = acc_t<T>;
  T* dqkv;
  const T* saved;
  const A* rstd;
  const T* q_weight;
  const T* k_weight;
  HeadRows at;
  A weight_offset;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    T* dy = dqkv + at.qkv_offset(r);
    const T* x = saved + r * at.D;
    const T* w = at.query(r) ? q_weight : k_weight;
    const A s = rstd[r];
    A mean_gx = 0;
    for (index_t d = team.rank; d < at.D; d += team.size) mean_gx += A(dy[d]) * (A(w[d]) + weight_offset) * A(x[d]) * s;
    mean_gx = team.sum(mean_gx) / A(at.D);
    for (index_t d = team.rank; d < at.D; d += team.size) {
      const A xhat = A(x[d]) * s;
      dy[d] = T(s * (A(dy[d]) * (A(w[d]) + weight_offset) - xhat * mean_gx));
    }
  }
};

// The two weights' gradients over a span of tokens: task i = span * D + d
// sums column d of every query head into partial_q[i], of every key head
// into partial_k[i] (nn/column_sums.hpp).
template <class T>
struct HeadNormWeightPartial {
  using A = acc_t<T>;
  A* partial_q;
  A* partial_k;
  const T* dqkv;
  const T* saved;
  const A* rstd;
  HeadRows at;
  index_t N, tokens;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t d = i % at.D, n0 = i / at.D * tokens, n1 = n0 + tokens < N ? n0 + tokens : N;
    A dq = 0, dk = 0;
    for (index_t n = n0; n < n1; ++n)
      for (index_t j = 0; j < at.heads(); ++j) {
        const index_t r = n * at.heads() + j;
        const A term = A(dqkv[at.qkv_offset(r) + d]) * A(saved[r * at.D + d]) * rstd[r];
        (j < at.H ? dq : dk) += term;
      }
    partial_q[i] = dq;
    partial_k[i] = dk;
  }
};

template <class Device = device::Cpu, class T>
void head_norm_forward(T* qkv, T* saved, acc_t<T>* rstd, const T* q_weight, const T* k_weight, index_t N, index_t H,
                       index_t G, index_t D, acc_t<T> eps, acc_t<T> weight_offset = 0) {
  const HeadRows at{H, G, D};
  Device::parallel_rows(N * at.heads(), D,
                        HeadNormForwardRow<T>{qkv, saved, rstd, q_weight, k_weight, at, eps, weight_offset});
}

// dqkv holds the gradient of forward's output and leaves with that of its
// input; the weights' gradients (null for a frozen model) are added to.
template <class Device = device::Cpu, class T>
void head_norm_backward(T* dqkv, T* dq_weight, T* dk_weight, const T* saved, const acc_t<T>* rstd, const T* q_weight,
                        const T* k_weight, index_t N, index_t H, index_t G, index_t D,
                        acc_t<T> weight_offset = 0) {
  using A = acc_t<T>;
  const HeadRows at{H, G, D};
  if (dq_weight) {  // from the output's gradient, before it is overwritten
    const index_t tokens = column_span_rows<Device>(N), spans = (N + tokens - 1) / tokens;
    memory::Scratch<A, typename Device::Memory> partial_q(spans * D), partial_k(spans * D);
    Device::parallel_for(spans * D, HeadNormWeightPartial<T>{partial_q.data(), partial_k.data(), dqkv, saved, rstd,
                                                             at, N, tokens});
    Device::parallel_for(D, ColumnSpansSum<T>{dq_weight, partial_q.data(), spans, D});
    Device::parallel_for(D, ColumnSpansSum<T>{dk_weight, partial_k.data(), spans, D});
  }
  Device::parallel_rows(N * at.heads(), D,
                        HeadNormBackwardRow<T>{dqkv, saved, rstd, q_weight, k_weight, at, weight_offset});
}

}  // namespace ft::nn
