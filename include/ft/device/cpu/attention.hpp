#pragma once
// The CPU's causal self-attention (nn/attention_shape.hpp says what a query
// sees), computed tile by tile with an online softmax (the flash-attention
// scheme): no T x T matrix is ever stored. Forward saves only the output
// and one log-sum-exp per query row; backward recomputes the probabilities
// tile by tile from them. Tiles outside a query's visible range are
// skipped, not masked.
//
// Backward runs in two passes so that no two threads write one gradient:
// pass 1 owns a key tile and a key/value head and sums dK, dV over every
// query head of its group and every query tile that sees it; pass 2 owns a
// query tile and sums dQ.
//
// device::Cpu's attention_forward and attention_backward are these; they
// are defined here, so only code that attends compiles them.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/nn/attention_shape.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::cpu {

using nn::AttentionShape;

namespace attention_detail {

constexpr index_t tile = 64;

template <class A>
using Matrix = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using Vector = Eigen::Matrix<A, Eigen::Dynamic, 1>;

// first_key[n] for every token: the earliest key its query may see.
inline std::vector<std::int32_t> first_keys(const AttentionShape& s, const std::int32_t* documents) {
  std::vector<std::int32_t> first(std::size_t(s.B * s.T));
  for (index_t b = 0; b < s.B; ++b) {
    index_t start = 0;
    for (index_t t = 0; t < s.T; ++t) {
      index_t n = b * s.T + t;
      if (documents && t > 0 && documents[n] != documents[n - 1]) start = t;
      index_t k = start;
      if (s.window > 0) k = std::max(k, t - s.window + 1);
      first[std::size_t(n)] = std::int32_t(k);
    }
  }
  return first;
}

// Rows [t0, t1) of one head of a strided buffer, widened to the accumulation type.
template <class T, class A = acc_t<T>>
void load(Matrix<A>& out, const T* base, index_t row_stride, index_t t0, index_t t1, index_t D, A scale = 1) {
  out.resize(t1 - t0, D);
  for (index_t r = 0; r < t1 - t0; ++r)
    for (index_t d = 0; d < D; ++d) out(r, d) = A(base[(t0 + r) * row_stride + d]) * scale;
}

// Whether any (query, key) pair of the tile is invisible: only tiles on the
// diagonal or at a document or window edge need the mask loop.
inline bool needs_mask(const std::int32_t* first, index_t q0, index_t q1, index_t k0, index_t k1) {
  return k1 - 1 > q0 || first[q1 - 1 - q0] > k0;
}

// Sets invisible scores to `value`.
template <class A>
void mask(Matrix<A>& S, const std::int32_t* first, index_t q0, index_t k0, A value) {
  for (index_t r = 0; r < S.rows(); ++r)
    for (index_t c = 0; c < S.cols(); ++c)
      if (k0 + c < first[r] || k0 + c > q0 + r) S(r, c) = value;
}

// Head h's score terms (nn/attention_shape.hpp).
template <class A>
nn::ScoreTerms<A> terms_of(const AttentionShape& s, index_t h) {
  return nn::score_terms<A>(s.alibi, s.softcap, h, s.H);
}

// Turns a tile of scaled q.k into scores: soft-capped, then ALiBi's slope (j - i)
// added for query i and key j. With a cap, `gradient` (when given) receives
// d score / d q.k for backward.
template <class A>
void finish_scores(Matrix<A>& S, const nn::ScoreTerms<A>& terms, index_t q0, index_t k0, Matrix<A>* gradient = nullptr) {
  if (terms.cap > 0) {
    S = (S.array() / terms.cap).tanh() * terms.cap;
    if (gradient) *gradient = (1 - (S.array() / terms.cap).square()).matrix();
  }
  if (terms.slope == 0) return;
  for (index_t r = 0; r < S.rows(); ++r)
    for (index_t c = 0; c < S.cols(); ++c) S(r, c) += terms.slope * A(k0 + c - (q0 + r));
}

// Probabilities of a (query tile, key tile) pair from saved log-sum-exps,
// zero outside each query's visible range; with a cap, `gradient` as
// finish_scores gives it. The exponentials are Eigen's vectorised ones.
template <class A>
void probabilities(Matrix<A>& P, Matrix<A>& gradient, const Matrix<A>& Q, const Matrix<A>& K, const A* lse,
                   const std::int32_t* first, index_t q0, index_t k0, const nn::ScoreTerms<A>& terms) {
  using Column = Eigen::Map<const Eigen::Matrix<A, Eigen::Dynamic, 1>>;
  P.noalias() = Q * K.transpose();
  finish_scores(P, terms, q0, k0, &gradient);
  P = (P.colwise() - Column(lse, P.rows())).array().exp().matrix();
  if (needs_mask(first, q0, q0 + P.rows(), k0, k0 + P.cols())) mask(P, first, q0, k0, A(0));
}

// The gradient of a tile's scaled q.k from P: P (dP - delta), through the cap.
template <class A>
void score_gradients(Matrix<A>& P, const Matrix<A>& dP, const A* delta, const Matrix<A>& gradient,
                     const nn::ScoreTerms<A>& terms) {
  for (index_t r = 0; r < P.rows(); ++r) P.row(r).array() *= dP.row(r).array() - delta[r];
  if (terms.cap > 0) P.array() *= gradient.array();
}

}  // namespace attention_detail

template <class T>
void attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents, const AttentionShape& s) {
  using A = acc_t<T>;
  using namespace attention_detail;
  const index_t stride = (s.H + 2 * s.G) * s.D, out_stride = s.H * s.D, group = s.H / s.G;
  const A scale = nn::softmax_scale<A>(s.D, s.scale);
  const A infinity = std::numeric_limits<A>::infinity();
  const std::vector<std::int32_t> first = first_keys(s, documents);
  const index_t q_tiles = (s.T + tile - 1) / tile;

  cpu::parallel_for(s.B * s.H * q_tiles, [&](index_t task) {
    index_t b = task / (s.H * q_tiles), h = task / q_tiles % s.H, q0 = task % q_tiles * tile;
    index_t q1 = std::min(s.T, q0 + tile), rows = q1 - q0, g = h / group;
    const T* row0 = qkv + b * s.T * stride;
    const std::int32_t* fk = first.data() + b * s.T;
    const nn::ScoreTerms<A> terms = terms_of<A>(s, h);
    Matrix<A> Q, K, V, S;
    load(Q, row0 + h * s.D, stride, q0, q1, s.D, scale);
    Matrix<A> O = Matrix<A>::Zero(rows, s.D);
    Vector<A> m = Vector<A>::Constant(rows, -infinity), l = Vector<A>::Zero(rows);

    for (index_t k0 = fk[q0]; k0 < q1; k0 += tile) {
      index_t k1 = std::min(q1, k0 + tile);
      load(K, row0 + (s.H + g) * s.D, stride, k0, k1, s.D);
      load(V, row0 + (s.H + s.G + g) * s.D, stride, k0, k1, s.D);
      S.noalias() = Q * K.transpose();
      finish_scores(S, terms, q0, k0);
      if (needs_mask(fk + q0, q0, q1, k0, k1)) mask(S, fk + q0, q0, k0, -infinity);
      // Online softmax: rescale what was accumulated to the new row maxima.
      Vector<A> m_new = m.cwiseMax(S.rowwise().maxCoeff());
      // A row with nothing visible yet keeps max -inf; shift it by 0 so its
      // exponentials are exp(-inf) = 0 rather than NaN.
      Vector<A> shift = (m_new.array() == -infinity).select(Vector<A>::Zero(rows), m_new);
      Vector<A> rescale = (m.array() - shift.array()).exp();
      S = (S.colwise() - shift).array().exp().matrix();
      l = l.cwiseProduct(rescale) + S.rowwise().sum();
      O = rescale.asDiagonal() * O;
      m = m_new;
      O.noalias() += S * V;
    }
    for (index_t r = 0; r < rows; ++r) {
      index_t n = b * s.T + q0 + r;
      for (index_t d = 0; d < s.D; ++d) out[n * out_stride + h * s.D + d] = T(O(r, d) / l(r));
      lse[(b * s.H + h) * s.T + q0 + r] = m(r) + std::log(l(r));
    }
  });
}

// Adds the gradient of qkv (before rotation is undone) into dqkv.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                        const std::int32_t* documents, const AttentionShape& s) {
  using A = acc_t<T>;
  using namespace attention_detail;
  const index_t stride = (s.H + 2 * s.G) * s.D, out_stride = s.H * s.D, group = s.H / s.G;
  const A scale = nn::softmax_scale<A>(s.D, s.scale);
  const std::vector<std::int32_t> first = first_keys(s, documents);
  const index_t tiles = (s.T + tile - 1) / tile;

  // delta[b, h, i] = sum_d dO * O: the softmax backward's row term.
  std::vector<A> delta(std::size_t(s.B * s.H * s.T));
  cpu::parallel_for(s.B * s.T, [&](index_t n) {
    index_t b = n / s.T, t = n % s.T;
    for (index_t h = 0; h < s.H; ++h) {
      A sum = 0;
      for (index_t d = 0; d < s.D; ++d)
        sum += A(dout[n * out_stride + h * s.D + d]) * A(out[n * out_stride + h * s.D + d]);
      delta[std::size_t((b * s.H + h) * s.T + t)] = sum;
    }
  });

  // Pass 1: dK and dV, one (sequence, key/value head, key tile) per task.
  cpu::parallel_for(s.B * s.G * tiles, [&](index_t task) {
    index_t b = task / (s.G * tiles), g = task / tiles % s.G, k0 = task % tiles * tile;
    index_t k1 = std::min(s.T, k0 + tile);
    const T* row0 = qkv + b * s.T * stride;
    const T* dout0 = dout + b * s.T * out_stride;
    const std::int32_t* fk = first.data() + b * s.T;
    Matrix<A> Q, K, V, dO, P, dP, gradient;
    load(K, row0 + (s.H + g) * s.D, stride, k0, k1, s.D);
    load(V, row0 + (s.H + s.G + g) * s.D, stride, k0, k1, s.D);
    Matrix<A> dK = Matrix<A>::Zero(k1 - k0, s.D), dV = Matrix<A>::Zero(k1 - k0, s.D);
    for (index_t h = g * group; h < (g + 1) * group; ++h) {
      const A* lse_h = lse + (b * s.H + h) * s.T;
      const A* delta_h = delta.data() + (b * s.H + h) * s.T;
      const nn::ScoreTerms<A> terms = terms_of<A>(s, h);
      for (index_t q0 = k0; q0 < s.T; q0 += tile) {
        if (fk[q0] > k1 - 1) break;  // no later query sees this key tile either
        index_t q1 = std::min(s.T, q0 + tile);
        load(Q, row0 + h * s.D, stride, q0, q1, s.D, scale);
        load(dO, dout0 + h * s.D, out_stride, q0, q1, s.D);
        probabilities(P, gradient, Q, K, lse_h + q0, fk + q0, q0, k0, terms);
        dV.noalias() += P.transpose() * dO;
        dP.noalias() = dO * V.transpose();
        score_gradients(P, dP, delta_h + q0, gradient, terms);
        dK.noalias() += P.transpose() * Q;  // Q carries the scale
      }
    }
    for (index_t r = 0; r < k1 - k0; ++r) {
      T* dk = dqkv + (b * s.T + k0 + r) * stride + (s.H + g) * s.D;
      T* dv = dqkv + (b * s.T + k0 + r) * stride + (s.H + s.G + g) * s.D;
      for (index_t d = 0; d < s.D; ++d) {
        dk[d] = T(A(dk[d]) + dK(r, d));
        dv[d] = T(A(dv[d]) + dV(r, d));
      }
    }
  });

  // Pass 2: dQ, one (sequence, query head, query tile) per task.
  cpu::parallel_for(s.B * s.H * tiles, [&](index_t task) {
    index_t b = task / (s.H * tiles), h = task / tiles % s.H, q0 = task % tiles * tile;
    index_t q1 = std::min(s.T, q0 + tile), g = h / group;
    const T* row0 = qkv + b * s.T * stride;
    const std::int32_t* fk = first.data() + b * s.T;
    const A* lse_h = lse + (b * s.H + h) * s.T;
    const A* delta_h = delta.data() + (b * s.H + h) * s.T;
    const nn::ScoreTerms<A> terms = terms_of<A>(s, h);
    Matrix<A> Q, K, V, dO, P, dP, gradient;
    load(Q, row0 + h * s.D, stride, q0, q1, s.D, scale);
    load(dO, dout + b * s.T * out_stride + h * s.D, out_stride, q0, q1, s.D);
    Matrix<A> dQ = Matrix<A>::Zero(q1 - q0, s.D);
    for (index_t k0 = fk[q0]; k0 < q1; k0 += tile) {
      index_t k1 = std::min(q1, k0 + tile);
      load(K, row0 + (s.H + g) * s.D, stride, k0, k1, s.D);
      load(V, row0 + (s.H + s.G + g) * s.D, stride, k0, k1, s.D);
      probabilities(P, gradient, Q, K, lse_h + q0, fk + q0, q0, k0, terms);
      dP.noalias() = dO * V.transpose();
      score_gradients(P, dP, delta_h + q0, gradient, terms);
      dQ.noalias() += P * K;
    }
    for (index_t r = 0; r < q1 - q0; ++r) {
      T* dq = dqkv + (b * s.T + q0 + r) * stride + h * s.D;
      for (index_t d = 0; d < s.D; ++d) dq[d] = T(A(dq[d]) + dQ(r, d) * scale);
    }
  });
}

}  // namespace ft::cpu

namespace ft::device {

template <element T>
bool Cpu::attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents,
                            const nn::AttentionShape& s) {
  cpu::attention_forward(out, lse, qkv, documents, s);
  return true;
}

template <element T>
bool Cpu::attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                             const std::int32_t* documents, const nn::AttentionShape& s) {
  cpu::attention_backward(dqkv, dout, out, lse, qkv, documents, s);
  return true;
}

}  // namespace ft::device
