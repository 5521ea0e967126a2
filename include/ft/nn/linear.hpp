#pragma once
// Linear layer with HF's weight layout: out[N, O] = in[N, I] * W[O, I]^T + b[O].
// The bias is optional (null).
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/column_sums.hpp"
#include "ft/tensor/scratch.hpp"

namespace ft::nn {

// One row per call (its columns shared by a team of lanes): out[n, :] += bias.
template <class T>
struct BiasAddRow {
  T* out;
  const T* bias;
  index_t O;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    for (index_t o = team.rank; o < O; o += team.size) out[n * O + o] = T(acc_t<T>(out[n * O + o]) + acc_t<T>(bias[o]));
  }
};

// Index s O + o: column o of dout summed over span s of `rows` rows
// (nn/column_sums.hpp).
template <class T>
struct BiasGradPartial {
  acc_t<T>* partials;
  const T* dout;
  index_t N, O, rows;

  FT_HOST_DEVICE void operator()(index_t i) const {
    const index_t o = i % O, n0 = i / O * rows, n1 = n0 + rows < N ? n0 + rows : N;
    acc_t<T> sum = 0;
    for (index_t n = n0; n < n1; ++n) sum += acc_t<T>(dout[n * O + o]);
    partials[i] = sum;
  }
};

template <class Device = device::Cpu, class T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, index_t N, index_t I, index_t O) {
  Device::template gemm<T>(Op::none, Op::transpose, N, O, I, 1, in, I, weight, I, 0, out, O);
  if (bias) Device::parallel_rows(N, O, BiasAddRow<T>{out, bias, O});
}

// Any of din, dweight, dbias may be null when that gradient is not wanted
// (a frozen weight, the first layer's input).
template <class Device = device::Cpu, class T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight, index_t N,
                     index_t I, index_t O) {
  if (din) Device::template gemm<T>(Op::none, Op::none, N, I, O, 1, dout, O, weight, I, 1, din, I);
  if (dweight) Device::template gemm<T>(Op::transpose, Op::none, O, I, N, 1, dout, O, in, I, 1, dweight, I);
  if (!dbias) return;
  const index_t rows = column_span_rows<Device>(N), spans = (N + rows - 1) / rows;
  memory::Scratch<acc_t<T>, typename Device::Memory> partials(spans * O);
  Device::parallel_for(spans * O, BiasGradPartial<T>{partials.data(), dout, N, O, rows});
  Device::parallel_for(O, ColumnSpansSum<T>{dbias, partials.data(), spans, O});
}

}  // namespace ft::nn
