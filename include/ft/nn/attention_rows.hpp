#pragma once
// Causal attention (nn/attention_shape.hpp: the same inputs, outputs,
// visibility and saved log-sum-exps as each device's kernels) written as
// row functors, so any device's launcher runs it: one query row per index
// forward (an online softmax over the keys it sees, nothing T x T stored),
// and backward one query row per index for dQ and one key row per index for
// dK and dV (summed over the query heads of its group and the queries that
// see it), so no two indices write one gradient. It is the GPU's reference path: correct everywhere, fast
// nowhere (no tiles, no tensor cores); the CPU keeps its tiled version
// (device/cpu/attention.hpp) and a test holds the two together on the CPU.
//
// Head dimension at most 256 (every model family ft loads).
#include <cmath>
#include <cstdint>
#include <limits>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/device/cpu/attention.hpp"
#include "ft/nn/attention_shape.hpp"
#include "ft/tensor/scratch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

namespace attention_rows {

constexpr index_t max_head_dim = 256;

// first[b T + t]: the earliest key token t's query sees (documents, window);
// one sequence per index, walked in order.
struct FirstKeys {
  std::int32_t* first;
  const std::int32_t* documents;  // null: one document per sequence
  index_t T, window;

  FT_HOST_DEVICE void operator()(index_t b) const {
    index_t start = 0;
    for (index_t t = 0; t < T; ++t) {
      const index_t n = b * T + t;
      if (documents && t > 0 && documents[n] != documents[n - 1]) start = t;
      const index_t k = window > 0 && t - window + 1 > start ? t - window + 1 : start;
      first[n] = std::int32_t(k);
    }
  }
};

// Where heads live in the fused qkv rows, and what turns a head's scaled q.k
// into its score.
struct Layout {
  index_t T, H, G, D;
  bool alibi = false;
  double softcap = 0;
  FT_HOST_DEVICE index_t stride() const { return (H + 2 * G) * D; }
  // Query head h's score terms (nn/attention_shape.hpp); taken once per head
  // by each functor, not per score.
  template <class A>
  FT_HOST_DEVICE ScoreTerms<A> terms(index_t h) const {
    return score_terms<A>(alibi, softcap, h, H);
  }
  FT_HOST_DEVICE index_t key(index_t n, index_t g) const { return n * stride() + (H + g) * D; }
  FT_HOST_DEVICE index_t value(index_t n, index_t g) const { return n * stride() + (H + G + g) * D; }
  FT_HOST_DEVICE index_t group_of(index_t h) const { return h / (H / G); }
};

template <class T>
FT_HOST_DEVICE acc_t<T> dot(const T* a, const T* b, index_t D) {
  acc_t<T> s = 0;
  for (index_t d = 0; d < D; ++d) s += acc_t<T>(a[d]) * acc_t<T>(b[d]);
  return s;
}

// Index n H + h: query head h of token n.
template <class T>
struct ForwardRow {
  using A = acc_t<T>;
  T* out;
  A* lse;
  const T* qkv;
  const std::int32_t* first;
  Layout at;
  A scale;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t h = i % at.H, n = i / at.H, b = n / at.T, t = n % at.T, g = at.group_of(h);
    const T* q = qkv + n * at.stride() + h * at.D;
    A acc[max_head_dim];
    for (index_t d = 0; d < at.D; ++d) acc[d] = 0;
    A m = -std::numeric_limits<A>::infinity(), l = 0;
    const ScoreTerms<A> terms = at.terms<A>(h);
    for (index_t j = first[n]; j <= t; ++j) {
      const index_t key = b * at.T + j;
      const A s = terms(dot(q, qkv + at.key(key, g), at.D) * scale, j - t);
      const A m_new = s > m ? s : m;
      const A rescale = std::exp(m - m_new), p = std::exp(s - m_new);
      const T* v = qkv + at.value(key, g);
      l = l * rescale + p;
      for (index_t d = 0; d < at.D; ++d) acc[d] = acc[d] * rescale + p * A(v[d]);
      m = m_new;
    }
    for (index_t d = 0; d < at.D; ++d) out[n * at.H * at.D + h * at.D + d] = T(acc[d] / l);
    lse[(b * at.H + h) * at.T + t] = m + std::log(l);
  }
};

// Index n H + h: delta = dO . O, the softmax backward's row term, at [B, H, T].
template <class T>
struct DeltaRow {
  acc_t<T>* delta;
  const T* dout;
  const T* out;
  Layout at;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t h = i % at.H, n = i / at.H;
    const index_t row = n * at.H * at.D + h * at.D;
    delta[(n / at.T * at.H + h) * at.T + n % at.T] = dot(dout + row, out + row, at.D);
  }
};

// The probability query n (head h) gave key `key`, and the gradient of its scaled q.k.
template <class T>
struct Pair {
  acc_t<T> p, ds;
};
template <class T>
FT_HOST_DEVICE Pair<T> pair(const T* qkv, const T* dout, const acc_t<T>* lse, const acc_t<T>* delta, const Layout& at,
                            acc_t<T> scale, const ScoreTerms<acc_t<T>>& terms, index_t n, index_t h, index_t key) {
  using A = acc_t<T>;
  const index_t b = n / at.T, t = n % at.T, g = at.group_of(h);
  const index_t stat = (b * at.H + h) * at.T + t;
  const A scaled = dot(qkv + n * at.stride() + h * at.D, qkv + at.key(key, g), at.D) * scale;
  const A p = std::exp(terms(scaled, key % at.T - t) - lse[stat]);
  const A dp = dot(dout + n * at.H * at.D + h * at.D, qkv + at.value(key, g), at.D);
  return {p, p * (dp - delta[stat]) * terms.gradient(scaled)};
}

// Index n H + h: adds dQ of query head h of token n.
template <class T>
struct QueryGradRow {
  using A = acc_t<T>;
  T* dqkv;
  const T* dout;
  const A* lse;
  const A* delta;
  const T* qkv;
  const std::int32_t* first;
  Layout at;
  A scale;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t h = i % at.H, n = i / at.H, b = n / at.T, t = n % at.T, g = at.group_of(h);
    A dq[max_head_dim];
    for (index_t d = 0; d < at.D; ++d) dq[d] = 0;
    const ScoreTerms<A> terms = at.terms<A>(h);
    for (index_t j = first[n]; j <= t; ++j) {
      const index_t key = b * at.T + j;
      const A ds = pair(qkv, dout, lse, delta, at, scale, terms, n, h, key).ds;
      const T* k = qkv + at.key(key, g);
      for (index_t d = 0; d < at.D; ++d) dq[d] += ds * A(k[d]);
    }
    T* out = dqkv + n * at.stride() + h * at.D;
    for (index_t d = 0; d < at.D; ++d) out[d] = T(A(out[d]) + dq[d] * scale);
  }
};

// Index n G + g: adds dK and dV of key/value head g of token n, over the
// query heads of its group and every later query of the sequence that sees
// it (first keys never decrease along a sequence, so the first query that
// does not see it ends the walk).
template <class T>
struct KeyValueGradRow {
  using A = acc_t<T>;
  T* dqkv;
  const T* dout;
  const A* lse;
  const A* delta;
  const T* qkv;
  const std::int32_t* first;
  Layout at;
  A scale;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t g = i % at.G, key = i / at.G, b = key / at.T, j = key % at.T, group = at.H / at.G;
    A dk[max_head_dim], dv[max_head_dim];
    for (index_t d = 0; d < at.D; ++d) dk[d] = dv[d] = 0;
    for (index_t h = g * group; h < (g + 1) * group; ++h) {
      const ScoreTerms<A> terms = at.terms<A>(h);
      for (index_t t = j; t < at.T && first[b * at.T + t] <= j; ++t) {
        const index_t n = b * at.T + t;
        const Pair<T> pd = pair(qkv, dout, lse, delta, at, scale, terms, n, h, key);
        const T* q = qkv + n * at.stride() + h * at.D;
        const T* dO = dout + n * at.H * at.D + h * at.D;
        for (index_t d = 0; d < at.D; ++d) {
          dv[d] += pd.p * A(dO[d]);
          dk[d] += pd.ds * A(q[d]);
        }
      }
    }
    T* out_k = dqkv + at.key(key, g);
    T* out_v = dqkv + at.value(key, g);
    for (index_t d = 0; d < at.D; ++d) {
      out_k[d] = T(A(out_k[d]) + dk[d] * scale);
      out_v[d] = T(A(out_v[d]) + dv[d]);
    }
  }
};

inline void check_head_dim(index_t D) {
  if (D > max_head_dim)
    throw Error("attention on this device supports head dimensions up to " + std::to_string(max_head_dim) +
                ", the model has " + std::to_string(D));
}

}  // namespace attention_rows

// As attention_forward, on any device; documents (or null) in its memory.
template <class Device, class T>
void attention_forward_rows(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents, const AttentionShape& s) {
  using namespace attention_rows;
  check_head_dim(s.D);
  memory::Scratch<std::int32_t, typename Device::Memory> first(s.B * s.T);
  Device::parallel_for(s.B, FirstKeys{first.data(), documents, s.T, s.window});
  const Layout at{s.T, s.H, s.G, s.D, s.alibi, s.softcap};
  Device::parallel_for(s.B * s.T * s.H, ForwardRow<T>{out, lse, qkv, first.data(), at, softmax_scale<acc_t<T>>(s.D, s.scale)});
}

// As attention_backward, on any device.
template <class Device, class T>
void attention_backward_rows(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                             const std::int32_t* documents, const AttentionShape& s) {
  using namespace attention_rows;
  using A = acc_t<T>;
  check_head_dim(s.D);
  memory::Scratch<std::int32_t, typename Device::Memory> first(s.B * s.T);
  memory::Scratch<A, typename Device::Memory> delta(s.B * s.H * s.T);
  Device::parallel_for(s.B, FirstKeys{first.data(), documents, s.T, s.window});
  const Layout at{s.T, s.H, s.G, s.D, s.alibi, s.softcap};
  const A scale = softmax_scale<A>(s.D, s.scale);
  Device::parallel_for(s.B * s.T * s.H, DeltaRow<T>{delta.data(), dout, out, at});
  Device::parallel_for(s.B * s.T * s.H, QueryGradRow<T>{dqkv, dout, lse, delta.data(), qkv, first.data(), at, scale});
  Device::parallel_for(s.B * s.T * s.G, KeyValueGradRow<T>{dqkv, dout, lse, delta.data(), qkv, first.data(), at, scale});
}

// A device's causal attention: its own kernels (Device::attention_forward:
// the CPU's tiled ones, a GPU's flash attention) where they take the shape,
// the row functors where they do not.
template <class Device = device::Cpu, class T>
void attention_forward_on(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents, const AttentionShape& s) {
  if (!Device::attention_forward(out, lse, qkv, documents, s)) attention_forward_rows<Device>(out, lse, qkv, documents, s);
}

template <class Device = device::Cpu, class T>
void attention_backward_on(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                           const std::int32_t* documents, const AttentionShape& s) {
  if (!Device::attention_backward(dqkv, dout, out, lse, qkv, documents, s))
    attention_backward_rows<Device>(dqkv, dout, out, lse, qkv, documents, s);
}

}  // namespace ft::nn
