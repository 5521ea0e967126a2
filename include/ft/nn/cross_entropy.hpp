#pragma once
// The LM head fused with cross-entropy, computed in chunks of rows so the
// full [N, V] logits never exist: for each chunk, logits = h W^T, then per
// row the loss and (when training) d logits = (softmax - onehot) / count,
// then dh += dlogits W and dW += dlogits^T h (soft-capped logits, Gemma 2's,
// take the cap's derivative on the way back). Only one chunk of logits is
// alive at a time (`chunk_rows` x V), whatever N is.
//
// targets[n] = -100 scores nothing and gives no gradient (HF's ignore
// index). The loss returned is the *sum* over scored rows; gradients are
// divided by `token_count`, which the caller passes: under gradient
// accumulation it is the scored tokens of the whole accumulated batch, so
// every micro-batch's gradient is already in the final scale. An objective
// over whole sequences (models/sequence_objective.hpp) reads each row's loss
// and mean logit from a pass without backward, then weighs each row's
// gradient in a second pass (row_weights).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "ft/core/host_device.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/scratch.hpp"

namespace ft::nn {

constexpr std::int32_t ignore_index = -100;

struct CrossEntropyOptions {
  index_t chunk_rows = 256;
  double token_count = 1;  // the divisor of the gradients
  bool backward = true;    // false: loss only (evaluation)
  double logit_scale = 1;  // logits = logit_scale * h W^T (Granite's 1 / logits_scaling)
  double softcap = 0;      // > 0: logits become softcap tanh(logits / softcap) (Gemma 2)
  // Host arrays of N, each optional: every row's gradient is multiplied by
  // row_weights[n]; row_loss[n] and row_logit_mean[n] receive each row's
  // loss and mean logit (0 for an ignored row).
  const double* row_weights = nullptr;
  double* row_loss = nullptr;
  double* row_logit_mean = nullptr;
};

// Soft-caps rows of logits in place: cap tanh(z / cap).
template <class T>
struct SoftcapRow {
  using A = acc_t<T>;
  T* logits;
  index_t V;
  A cap;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    T* z = logits + r * V;
    for (index_t v = team.rank; v < V; v += team.size) z[v] = T(cap * std::tanh(A(z[v]) / cap));
  }
};

// One row of a chunk of logits: its loss, and in place (when training) its
// gradient (softmax - onehot) * scale; an ignored row scores nothing and
// gets a zero gradient. The row's columns are shared by a team of lanes
// (device/cpu/launch.hpp): one on the CPU, where f32 and f64 rows take
// Eigen's vectorised max, exp and sum, a warp or a block on a GPU.
template <class T>
struct CrossEntropyRow {
  using A = acc_t<T>;
  T* logits;
  const std::int32_t* targets;
  double* row_loss;
  index_t V;
  A scale;
  bool backward;
  A cap = 0;  // > 0: the logits were soft-capped at it, and the gradient goes back through tanh
  const A* row_weight = nullptr;  // each row's scale is scale * row_weight[r]
  double* logit_mean = nullptr;   // receives each row's mean logit

  // d capped / d logit, from the capped value.
  FT_HOST_DEVICE A through_cap(A capped) const {
    if (!(cap > 0)) return A(1);
    const A t = capped / cap;
    return A(1) - t * t;
  }

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    T* z = logits + r * V;
    const std::int32_t target = targets[r];
    if (team.rank == 0) row_loss[r] = 0;
    if (logit_mean && team.rank == 0) logit_mean[r] = 0;
    if (target == ignore_index) {
      for (index_t v = team.rank; v < V; v += team.size) z[v] = T(0.0f);
      return;
    }
    const A scale = row_weight ? this->scale * row_weight[r] : this->scale;
#ifndef __CUDA_ARCH__
    if constexpr (std::is_same_v<T, A> && Team::size == 1) {
      Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>> row(z, V);
      if (logit_mean) logit_mean[r] = double(row.sum()) / double(V);
      A lse = row.maxCoeff();
      lse += std::log((row - lse).exp().sum());
      row_loss[r] = double(lse - row(target));
      if (!backward) return;
      const A target_factor = through_cap(row(target));
      if (cap > 0) row = (row - lse).exp() * scale * (1 - (row / cap).square());
      else row = (row - lse).exp() * scale;
      row(target) -= scale * target_factor;
      return;
    }
#endif
    // Every lane reads the target's logit before any lane overwrites the row.
    const A target_logit = A(z[target]);
    A max = A(z[team.rank < V ? team.rank : 0]);
    for (index_t v = team.rank; v < V; v += team.size) max = A(z[v]) > max ? A(z[v]) : max;
    max = team.max(max);
    if (logit_mean) {
      A total = 0;
      for (index_t v = team.rank; v < V; v += team.size) total += A(z[v]);
      total = team.sum(total);
      if (team.rank == 0) logit_mean[r] = double(total) / double(V);
    }
    A sum = 0;
    for (index_t v = team.rank; v < V; v += team.size) sum += std::exp(A(z[v]) - max);
    const A lse = max + std::log(team.sum(sum));
    if (team.rank == 0) row_loss[r] = double(lse - target_logit);
    if (!backward) return;
    for (index_t v = team.rank; v < V; v += team.size) {
      const A p = std::exp(A(z[v]) - lse);
      z[v] = T((p - (v == target ? A(1) : A(0))) * scale * through_cap(A(z[v])));
    }
  }
};

// Returns the summed loss. dh, dweight may be null (frozen head, no backward).
// logits_out [N, V], when not null, receives the logits (tests, generation).
// Every pointer is in the device's memory.
template <class Device = device::Cpu, class T>
double lm_head_cross_entropy(T* dh, T* dweight, const T* h, const T* weight, const std::int32_t* targets,
                             index_t N, index_t C, index_t V, const CrossEntropyOptions& options,
                             T* logits_out = nullptr) {
  using A = acc_t<T>;
  const index_t chunk = std::max<index_t>(1, options.chunk_rows), most = std::min(chunk, N);
  memory::Scratch<T, typename Device::Memory> logits(most * V);
  memory::Scratch<double, typename Device::Memory> row_loss(most);
  auto host_loss = std::vector<double>(std::size_t(most));
  // Only an objective over sequences asks for these.
  memory::Scratch<A, typename Device::Memory> row_weight(options.row_weights ? most : 0);
  memory::Scratch<double, typename Device::Memory> logit_mean(options.row_logit_mean ? most : 0);
  std::vector<A> host_weight(options.row_weights ? std::size_t(most) : 0);
  const A scale = A(1.0 / options.token_count), logit_scale = A(options.logit_scale);
  double total = 0;

  for (index_t n0 = 0; n0 < N; n0 += chunk) {
    index_t rows = std::min(chunk, N - n0);
    Device::template gemm<T>(Op::none, Op::transpose, rows, V, C, logit_scale, h + n0 * C, C, weight, C, 0,
                             logits.data(), V);
    if (options.softcap > 0) Device::parallel_rows(rows, V, SoftcapRow<T>{logits.data(), V, A(options.softcap)});
    if (logits_out) Device::copy(logits_out + n0 * V, logits.data(), std::size_t(rows * V) * sizeof(T));
    if (options.row_weights) {
      for (index_t r = 0; r < rows; ++r) host_weight[std::size_t(r)] = A(options.row_weights[n0 + r]);
      Device::from_host(row_weight.data(), host_weight.data(), std::size_t(rows) * sizeof(A));
    }
    Device::parallel_rows(rows, V, CrossEntropyRow<T>{logits.data(), targets + n0, row_loss.data(), V, scale,
                                                      options.backward, A(options.softcap),
                                                      options.row_weights ? row_weight.data() : nullptr,
                                                      options.row_logit_mean ? logit_mean.data() : nullptr});
    Device::to_host(host_loss.data(), row_loss.data(), std::size_t(rows) * sizeof(double));
    for (index_t r = 0; r < rows; ++r) total += host_loss[std::size_t(r)];
    if (options.row_loss) std::copy_n(host_loss.begin(), rows, options.row_loss + n0);
    if (options.row_logit_mean)
      Device::to_host(options.row_logit_mean + n0, logit_mean.data(), std::size_t(rows) * sizeof(double));

    if (!options.backward) continue;
    // logits now hold d loss / d (scaled logits); the scale carries through to h and W.
    if (dh)
      Device::template gemm<T>(Op::none, Op::none, rows, C, V, logit_scale, logits.data(), V, weight, C, 1,
                               dh + n0 * C, C);
    if (dweight)
      Device::template gemm<T>(Op::transpose, Op::none, V, C, rows, logit_scale, logits.data(), V, h + n0 * C, C, 1,
                               dweight, C);
  }
  return total;
}

}  // namespace ft::nn
