#pragma once
// Adafactor (Shazeer & Stern 2018) as transformers.optimization.Adafactor
// defines it, since that is what users compare against. Per tensor of n
// elements, at step t (from 1):
//
//   rho  = lr, or with relative_step min(warmup_init ? 1e-6 t : 1e-2, 1 / sqrt t)
//   lr_t = rho * (scale_parameter ? max(eps2, RMS(p)) : 1)      RMS(x) = |x|_2 / sqrt(n)
//   b2_t = 1 - t^decay_rate;  q = g^2 + eps1
//   stack of R x C matrices (rank >= 2, the last two dimensions):
//     row_i = b2_t row_i + (1 - b2_t) mean_j q_ij;  col_j = b2_t col_j + (1 - b2_t) mean_i q_ij
//     u_ij  = rsqrt(row_i / mean(row)) rsqrt(col_j) g_ij
//   rank 0 or 1:  full = b2_t full + (1 - b2_t) q;  u = rsqrt(full) g
//   u = lr_t u / max(1, RMS(u) / clip_threshold)
//   with beta1:   m = beta1 m + (1 - beta1) u;  u = m
//   p = p - weight_decay lr_t p - u
//
// Without beta1 there is no first moment, so an R x C matrix keeps R + C
// numbers of state. Arithmetic is in f32 (double when T is double, for
// tests); state is kept in S: f32 (transformers too keeps f32 state for 16-bit
// parameters), or bf16 when a run keeps everything in bf16.
//
// RMS(p) and RMS(u) are sums over the whole tensor. They are taken in a fixed
// order -- one partial sum per matrix row (per 4096-element chunk for a
// vector), each on one thread, then the partials added one after another --
// never with an OpenMP reduction, whose combine order varies. A step thus gives
// the same bits with any number of threads, and a resumed run stays bit-exact.
// Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

struct AdafactorOptions {
  std::optional<double> lr;          // the external rate; unset with relative_step
  double eps1 = 1e-30, eps2 = 1e-3;  // added to g^2; floor of the parameter scale
  double clip_threshold = 1.0;       // the largest RMS an update may have
  double decay_rate = -0.8;          // b2_t = 1 - t^decay_rate
  std::optional<double> beta1;       // unset: no first moment (and no state for it)
  double weight_decay = 0.0;
  bool scale_parameter = true;  // scale the rate by the parameter's RMS
  bool relative_step = true;    // use a time-dependent rate instead of lr
  bool warmup_init = false;     // with relative_step: rise as 1e-6 t
};

template <class S = float>
struct AdafactorState {
  memory::HostVector<S> row, col;  // factored: running means of q over each row / column, matrix after matrix
  memory::HostVector<S> full;      // not factored: running q per element
  memory::HostVector<S> momentum;  // with beta1
};

// How a shape is seen: `batch` matrices of rows x cols when factored.
struct AdafactorLayout {
  index_t batch = 1, rows = 1, cols = 1;
  bool factored = false;

  explicit AdafactorLayout(const Shape& shape) {
    factored = shape.rank >= 2;
    if (!factored) {
      rows = shape.numel();
      return;
    }
    for (int d = 0; d < shape.rank - 2; ++d) batch *= shape[d];
    rows = shape[shape.rank - 2];
    cols = shape[shape.rank - 1];
  }
  index_t size() const { return batch * rows * cols; }
};

inline void check_adafactor_options(const AdafactorOptions& o) {
  if (o.lr && o.relative_step)
    throw Error("adafactor: lr cannot be combined with relative_step = true; unset lr or set relative_step = false");
  if (!o.lr && !o.relative_step) throw Error("adafactor: relative_step = false needs an lr");
  if (o.warmup_init && !o.relative_step) throw Error("adafactor: warmup_init = true requires relative_step = true");
  if (!(o.clip_threshold > 0)) throw Error("adafactor: clip_threshold must be above 0");
  if (o.beta1 && !(*o.beta1 >= 0 && *o.beta1 < 1)) throw Error("adafactor: beta1 must be in [0, 1)");
}

// lr_t of the definition above; what a trainer logs as the learning rate.
inline double adafactor_learning_rate(const AdafactorOptions& o, std::int64_t step, double parameter_rms) {
  double rho = o.lr.value_or(0.0);
  if (o.relative_step) rho = std::min(o.warmup_init ? 1e-6 * double(step) : 1e-2, 1.0 / std::sqrt(double(step)));
  const double scale = o.scale_parameter ? std::max(o.eps2, parameter_rms) : 1.0;
  return scale * rho;
}

template <class S = float>
AdafactorState<S> adafactor_state(const Shape& shape, const AdafactorOptions& o) {
  check_adafactor_options(o);
  const AdafactorLayout l(shape);
  AdafactorState<S> s;
  if (l.factored) {
    s.row.assign(std::size_t(l.batch * l.rows), S(0.0f));
    s.col.assign(std::size_t(l.batch * l.cols), S(0.0f));
  } else {
    s.full.assign(std::size_t(l.size()), S(0.0f));
  }
  if (o.beta1) s.momentum.assign(std::size_t(l.size()), S(0.0f));
  return s;
}

namespace detail {

inline constexpr index_t adafactor_chunk = 4096;  // partial sums of a vector
inline constexpr index_t adafactor_column_block = 64;

// The sum of part(0) + part(1) + ... in that order; the parts run in parallel.
template <class F>
double ordered_sum(index_t parts, const F& part) {
  std::vector<double> partial(std::size_t(parts), 0.0);
  cpu::parallel_for(parts, [&](index_t q) { partial[std::size_t(q)] = part(q); });
  double sum = 0;
  for (double x : partial) sum += x;
  return sum;
}

}  // namespace detail

// One step; `step` counts from 1.
template <class T, class G, class S>
void adafactor_step(T* p, const G* g, const Shape& shape, AdafactorState<S>& s, const AdafactorOptions& o,
                    std::int64_t step) {
  using A = acc_t<T>;
  const AdafactorLayout l(shape);
  const index_t n = l.size(), R = l.rows, C = l.cols;
  const auto want = [](const memory::HostVector<S>& v, index_t size) { return index_t(v.size()) == size; };
  if (!(l.factored ? want(s.row, l.batch * R) && want(s.col, l.batch * C) : want(s.full, n)) ||
      !want(s.momentum, o.beta1 ? n : 0))
    throw Error("adafactor: the state does not fit a parameter of shape " + shape.str() + " with these options");
  if (n == 0) return;
  const index_t chunks = (n + detail::adafactor_chunk - 1) / detail::adafactor_chunk;
  const auto chunk_sum = [&](index_t q, const auto& term) {
    double sum = 0;
    for (index_t k = q * detail::adafactor_chunk; k < std::min(n, (q + 1) * detail::adafactor_chunk); ++k)
      sum += term(k);
    return sum;
  };

  double parameter_rms = 0;
  if (o.scale_parameter) {
    const auto square = [&](index_t k) { return double(A(p[k])) * double(A(p[k])); };
    const double sum =
        l.factored ? detail::ordered_sum(l.batch * R,
                                         [&](index_t r) {
                                           double part = 0;
                                           for (index_t k = r * C; k < (r + 1) * C; ++k) part += square(k);
                                           return part;
                                         })
                   : detail::ordered_sum(chunks, [&](index_t c) { return chunk_sum(c, square); });
    parameter_rms = std::sqrt(sum) / std::sqrt(double(n));
  }
  const double lr = adafactor_learning_rate(o, step, parameter_rms);
  const double beta2t = 1.0 - std::pow(double(step), o.decay_rate);
  const A keep = A(beta2t), add = A(1.0 - beta2t), eps1 = A(o.eps1);
  const auto q = [&](index_t k) { return A(g[k]) * A(g[k]) + eps1; };

  // Second moment, and the factors whose product with g is the raw update u.
  std::vector<A> row_factor, col_factor;
  if (l.factored) {
    S* row = s.row.data();
    S* col = s.col.data();
    cpu::parallel_for(l.batch * R, [&](index_t r) {
      double sum = 0;
      for (index_t j = 0; j < C; ++j) sum += double(q(r * C + j));
      row[r] = S(keep * A(row[r]) + add * A(sum / double(C)));
    });
    const index_t blocks = (C + detail::adafactor_column_block - 1) / detail::adafactor_column_block;
    cpu::parallel_for(l.batch * blocks, [&](index_t bb) {
      const index_t b = bb / blocks, j0 = (bb % blocks) * detail::adafactor_column_block;
      const index_t width = std::min(detail::adafactor_column_block, C - j0);
      double sum[detail::adafactor_column_block] = {};
      for (index_t i = 0; i < R; ++i)
        for (index_t j = 0; j < width; ++j) sum[j] += double(q((b * R + i) * C + j0 + j));
      for (index_t j = 0; j < width; ++j) {
        S& c = col[b * C + j0 + j];
        c = S(keep * A(c) + add * A(sum[j] / double(R)));
      }
    });
    row_factor.resize(std::size_t(l.batch * R));
    col_factor.resize(std::size_t(l.batch * C));
    for (index_t b = 0; b < l.batch; ++b) {
      double sum = 0;
      for (index_t i = 0; i < R; ++i) sum += double(A(row[b * R + i]));
      const A mean = A(sum / double(R));
      for (index_t i = 0; i < R; ++i)
        row_factor[std::size_t(b * R + i)] = A(1) / std::sqrt(A(row[b * R + i]) / mean);
    }
    for (index_t c = 0; c < l.batch * C; ++c) col_factor[std::size_t(c)] = A(1) / std::sqrt(A(col[c]));
  } else {
    S* full = s.full.data();
    cpu::parallel_for(n, [&](index_t k) { full[k] = S(keep * A(full[k]) + add * q(k)); });
  }
  // The raw update u of a matrix element (r counts rows across the stack) and
  // of a vector element; each is the same expression in both passes below.
  const A* rf = row_factor.data();
  const A* cf = col_factor.data();
  const S* full = s.full.data();
  const auto matrix_u = [&](index_t r, index_t j) { return rf[r] * cf[(r / R) * C + j] * A(g[r * C + j]); };
  const auto vector_u = [&](index_t k) { return A(1) / std::sqrt(A(full[k])) * A(g[k]); };
  const auto square = [](A u) { return double(u) * double(u); };
  const double sum_u =
      l.factored ? detail::ordered_sum(l.batch * R,
                                       [&](index_t r) {
                                         double part = 0;
                                         for (index_t j = 0; j < C; ++j) part += square(matrix_u(r, j));
                                         return part;
                                       })
                 : detail::ordered_sum(chunks, [&](index_t c) {
                     return chunk_sum(c, [&](index_t k) { return square(vector_u(k)); });
                   });
  const double update_rms = std::sqrt(sum_u) / std::sqrt(double(n));

  const A divisor = A(std::max(update_rms / o.clip_threshold, 1.0)), rate = A(lr);
  const A beta1 = A(o.beta1.value_or(0.0)), one_minus_beta1 = A(1.0 - o.beta1.value_or(0.0));
  const A decay = A(-o.weight_decay * lr);
  S* m = s.momentum.data();
  const auto apply = [&](index_t k, A u) {
    u = u / divisor * rate;
    if (o.beta1) {
      m[k] = S(beta1 * A(m[k]) + one_minus_beta1 * u);
      u = A(m[k]);
    }
    A param = A(p[k]);
    if (o.weight_decay != 0) param = param + decay * param;
    p[k] = T(param - u);
  };
  if (l.factored)
    cpu::parallel_for(l.batch * R, [&](index_t r) {
      for (index_t j = 0; j < C; ++j) apply(r * C + j, matrix_u(r, j));
    });
  else
    cpu::parallel_for(n, [&](index_t k) { apply(k, vector_u(k)); });
}

}  // namespace ft::optim
