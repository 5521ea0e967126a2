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
// vector), the partials then added one after another -- never with a
// reduction whose combine order varies. The column means of q are sums down
// each column in spans of Device::column_rows rows (every row on the CPU),
// the spans added in order. A step thus gives the same bits with any number
// of threads, and a resumed run stays bit-exact. Sums accumulate in double.
//
// Every pass is a functor over the state in the device's memory (device/);
// the scalars a step needs (lr_t, the clipping divisor) are computed there
// too, by one task, so a step on a GPU never waits for the host.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/column_sums.hpp"
#include "ft/optim/chunk_squares.hpp"
#include "ft/tensor/array.hpp"
#include "ft/tensor/scratch.hpp"
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

// The state of one tensor, in a memory space (a device's, or the host's).
template <class S = float, memory::memory_space Space = memory::Host>
struct AdafactorState {
  memory::Array<S, Space> row, col;  // factored: running means of q over each row / column, matrix after matrix
  memory::Array<S, Space> full;      // not factored: running q per element
  memory::Array<S, Space> momentum;  // with beta1
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

// rho of the definition above: lr_t before the parameter's scale.
inline double adafactor_rho(const AdafactorOptions& o, std::int64_t step) {
  if (!o.relative_step) return o.lr.value_or(0.0);
  return std::min(o.warmup_init ? 1e-6 * double(step) : 1e-2, 1.0 / std::sqrt(double(step)));
}

template <class S = float, memory::memory_space Space = memory::Host>
AdafactorState<S, Space> adafactor_state(const Shape& shape, const AdafactorOptions& o) {
  check_adafactor_options(o);
  const AdafactorLayout l(shape);
  using Values = memory::Array<S, Space>;  // zero-filled
  AdafactorState<S, Space> s;
  if (l.factored) {
    s.row = Values(std::size_t(l.batch * l.rows));
    s.col = Values(std::size_t(l.batch * l.cols));
  } else {
    s.full = Values(std::size_t(l.size()));
  }
  if (o.beta1) s.momentum = Values(std::size_t(l.size()));
  return s;
}

namespace detail {

inline constexpr index_t adafactor_chunk = 4096;  // partial sums of a vector

// q = g^2 + eps1, the quantity the second moment averages.
template <class G, class A>
FT_HOST_DEVICE A adafactor_q(const G* g, index_t k, A eps1) {
  return A(g[k]) * A(g[k]) + eps1;
}

// row_r = b2_t row_r + (1 - b2_t) mean_j q_rj, one team per row.
template <class G, class S>
struct AdafactorRowMoment {
  using A = acc_t<S>;
  S* row;
  const G* g;
  index_t C;
  A keep, add, eps1;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    double sum = 0;
    for (index_t j = team.rank; j < C; j += team.size) sum += double(adafactor_q(g, r * C + j, eps1));
    sum = team.sum(sum);
    if (team.rank == 0) row[r] = S(keep * A(row[r]) + add * A(sum / double(C)));
  }
};

// Sums of q down Width columns over one span of rows, into partials
// [batch, spans, C]. Width columns per task keep the CPU's reads along
// cache lines; a GPU takes one column per thread.
template <class G, class A, int Width>
struct AdafactorColumnPartial {
  const G* g;
  double* partial;
  index_t R, C, rows, spans, blocks;
  A eps1;

  FT_HOST_DEVICE void operator()(index_t task) const {
    const index_t b = task / (spans * blocks), span = task / blocks % spans, j0 = task % blocks * Width;
    const index_t width = C - j0 < Width ? C - j0 : Width;
    const index_t i0 = span * rows, i1 = i0 + rows < R ? i0 + rows : R;
    double sum[Width] = {};
    for (index_t i = i0; i < i1; ++i)
      for (index_t j = 0; j < width; ++j) sum[j] += double(adafactor_q(g, (b * R + i) * C + j0 + j, eps1));
    for (index_t j = 0; j < width; ++j) partial[(b * spans + span) * C + j0 + j] = sum[j];
  }
};

// col_c = b2_t col_c + (1 - b2_t) mean_i q_ic from the spans' partials, in order.
template <class S>
struct AdafactorColumnMoment {
  using A = acc_t<S>;
  S* col;
  const double* partial;
  index_t R, C, spans;
  A keep, add;

  FT_HOST_DEVICE void operator()(index_t bc) const {
    const index_t b = bc / C, j = bc % C;
    double sum = 0;
    for (index_t span = 0; span < spans; ++span) sum += partial[(b * spans + span) * C + j];
    col[bc] = S(keep * A(col[bc]) + add * A(sum / double(R)));
  }
};

// full_k = b2_t full_k + (1 - b2_t) q_k.
template <class G, class S>
struct AdafactorFullMoment {
  using A = acc_t<S>;
  S* full;
  const G* g;
  A keep, add, eps1;

  FT_HOST_DEVICE void operator()(index_t k) const { full[k] = S(keep * A(full[k]) + add * adafactor_q(g, k, eps1)); }
};

// The mean of each matrix's row moments, one task per matrix.
template <class S>
struct AdafactorRowMean {
  using A = acc_t<S>;
  A* mean;
  const S* row;
  index_t R;

  FT_HOST_DEVICE void operator()(index_t b) const {
    double sum = 0;
    for (index_t i = 0; i < R; ++i) sum += double(A(row[b * R + i]));
    mean[b] = A(sum / double(R));
  }
};

// rsqrt(row_r / mean(row)) and rsqrt(col_c): the factors of u = factor_r factor_c g.
template <class S>
struct AdafactorFactors {
  using A = acc_t<S>;
  A *row_factor, *col_factor;
  const S *row, *col;
  const A* mean;
  index_t R, rows;  // rows: batch R; the tasks past them are columns

  FT_HOST_DEVICE void operator()(index_t t) const {
    if (t < rows)
      row_factor[t] = A(1) / std::sqrt(A(row[t]) / mean[t / R]);
    else
      col_factor[t - rows] = A(1) / std::sqrt(A(col[t - rows]));
  }
};

// The raw update u of element k: rsqrt of its second moment (factored or
// not) times its gradient. The same expression feeds RMS(u) and the step.
template <class G, class S>
struct AdafactorRawUpdate {
  using A = acc_t<S>;
  const G* g;
  const A *row_factor, *col_factor;  // factored
  const S* full;                     // not factored
  index_t R, C;
  bool factored;

  FT_HOST_DEVICE A operator()(index_t k) const {
    if (!factored) return A(1) / std::sqrt(A(full[k])) * A(g[k]);
    const index_t r = k / C, j = k - r * C;
    return row_factor[r] * col_factor[(r / R) * C + j] * A(g[k]);
  }
};

// lr_t and the clipping divisor from the two ordered sums of squares, by one
// task: scalars = {lr_t, max(1, RMS(u) / clip_threshold)}.
struct AdafactorScalars {
  double* scalars;
  const double* parameter_partial;  // null without scale_parameter
  const double* update_partial;
  index_t parts;
  double n, rho, eps2, clip_threshold;

  FT_HOST_DEVICE void operator()(index_t) const {
    double scale = 1;
    if (parameter_partial) {
      double sum = 0;
      for (index_t c = 0; c < parts; ++c) sum += parameter_partial[c];
      const double rms = std::sqrt(sum) / std::sqrt(n);
      scale = eps2 < rms ? rms : eps2;
    }
    double sum = 0;
    for (index_t c = 0; c < parts; ++c) sum += update_partial[c];
    const double clip = std::sqrt(sum) / std::sqrt(n) / clip_threshold;
    scalars[0] = scale * rho;
    scalars[1] = clip < 1.0 ? 1.0 : clip;
  }
};

// u = lr_t u / divisor; with beta1 m = beta1 m + (1 - beta1) u, u = m; p -= weight_decay lr_t p + u.
template <class T, class G, class S>
struct AdafactorApply {
  using A = acc_t<S>;
  T* p;
  S* momentum;  // null without beta1
  AdafactorRawUpdate<G, S> raw;
  const double* scalars;
  A beta1, one_minus_beta1;
  double weight_decay;

  FT_HOST_DEVICE void operator()(index_t k) const {
    const A rate = A(scalars[0]), divisor = A(scalars[1]);
    A u = raw(k) / divisor * rate;
    if (momentum) {
      momentum[k] = S(beta1 * A(momentum[k]) + one_minus_beta1 * u);
      u = A(momentum[k]);
    }
    A param = A(p[k]);
    if (weight_decay != 0) param = param + A(-weight_decay * scalars[0]) * param;
    p[k] = T(param - u);
  }
};

}  // namespace detail

// One step on a device, the state in its memory; `step` counts from 1.
template <class Device = device::Cpu, class T, class G, class S, class Space>
void adafactor_step(T* p, const G* g, const Shape& shape, AdafactorState<S, Space>& s, const AdafactorOptions& o,
                    std::int64_t step) {
  static_assert(std::is_same_v<Space, typename Device::Memory>, "the state must live in the device's memory");
  using A = acc_t<S>;
  static_assert(std::is_same_v<A, acc_t<T>>, "the state accumulates in the parameters' type");
  using Memory = typename Device::Memory;
  const AdafactorLayout l(shape);
  const index_t n = l.size(), R = l.rows, C = l.cols;
  const auto want = [](const memory::Array<S, Space>& v, index_t size) { return index_t(v.size()) == size; };
  if (!(l.factored ? want(s.row, l.batch * R) && want(s.col, l.batch * C) : want(s.full, n)) ||
      !want(s.momentum, o.beta1 ? n : 0))
    throw Error("adafactor: the state does not fit a parameter of shape " + shape.str() + " with these options");
  if (n == 0) return;
  // Partial sums by matrix row, or by chunk of a vector.
  const index_t chunk = l.factored ? C : detail::adafactor_chunk, parts = (n + chunk - 1) / chunk;
  memory::Scratch<double, Memory> sums(2 * parts + 2);
  double *parameter_partial = sums.data(), *update_partial = sums.data() + parts, *scalars = sums.data() + 2 * parts;
  if (o.scale_parameter)
    Device::parallel_rows(parts, chunk, ChunkSquares<Elements<T>>{{p}, n, chunk, parameter_partial});

  const double beta2t = 1.0 - std::pow(double(step), o.decay_rate);
  const A keep = A(beta2t), add = A(1.0 - beta2t), eps1 = A(o.eps1);
  // The second moment, and the factors whose product with g is the raw update.
  const index_t factor_count = l.factored ? l.batch * (R + C + 1) : 0;
  memory::Scratch<A, Memory> factors(factor_count);
  A *row_factor = factors.data(), *col_factor = row_factor + l.batch * R, *mean = col_factor + l.batch * C;
  if (l.factored) {
    Device::parallel_rows(l.batch * R, C, detail::AdafactorRowMoment<G, S>{s.row.data(), g, C, keep, add, eps1});
    constexpr int width = Device::column_rows > 0 ? 1 : 64;
    const index_t rows = nn::column_span_rows<Device>(R);
    const index_t spans = (R + rows - 1) / rows, blocks = (C + width - 1) / width;
    memory::Scratch<double, Memory> column_partial(l.batch * spans * C);
    Device::parallel_for(l.batch * spans * blocks, detail::AdafactorColumnPartial<G, A, width>{
                                                       g, column_partial.data(), R, C, rows, spans, blocks, eps1});
    Device::parallel_for(l.batch * C, detail::AdafactorColumnMoment<S>{s.col.data(), column_partial.data(), R, C,
                                                                        spans, keep, add});
    Device::parallel_for(l.batch, detail::AdafactorRowMean<S>{mean, s.row.data(), R});
    Device::parallel_for(l.batch * (R + C), detail::AdafactorFactors<S>{row_factor, col_factor, s.row.data(),
                                                                         s.col.data(), mean, R, l.batch * R});
  } else {
    Device::parallel_for(n, detail::AdafactorFullMoment<G, S>{s.full.data(), g, keep, add, eps1});
  }
  const detail::AdafactorRawUpdate<G, S> raw{g, row_factor, col_factor, s.full.data(), R, C, l.factored};
  Device::parallel_rows(parts, chunk, ChunkSquares<detail::AdafactorRawUpdate<G, S>>{raw, n, chunk, update_partial});

  Device::parallel_for(1, detail::AdafactorScalars{scalars, o.scale_parameter ? parameter_partial : nullptr,
                                                   update_partial, parts, double(n), adafactor_rho(o, step), o.eps2,
                                                   o.clip_threshold});
  const double beta1 = o.beta1.value_or(0.0);
  Device::parallel_for(n, detail::AdafactorApply<T, G, S>{p, o.beta1 ? s.momentum.data() : nullptr, raw, scalars,
                                                          A(beta1), A(1.0 - beta1), o.weight_decay});
}

}  // namespace ft::optim
