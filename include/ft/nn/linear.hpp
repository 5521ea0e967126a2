#pragma once
// Linear layer with HF's weight layout: out[N, O] = in[N, I] * W[O, I]^T + b[O].
// The bias is optional (null).
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"

namespace ft::nn {

template <class T>
struct BiasAddRow {
  T* out;
  const T* bias;
  index_t O;

  FT_HOST_DEVICE void operator()(index_t n) const {
    for (index_t o = 0; o < O; ++o) out[n * O + o] = T(acc_t<T>(out[n * O + o]) + acc_t<T>(bias[o]));
  }
};

// dbias[o] += the sum of column o of dout over the N rows.
template <class T>
struct BiasGradColumn {
  T* dbias;
  const T* dout;
  index_t N, O;

  FT_HOST_DEVICE void operator()(index_t o) const {
    acc_t<T> sum = 0;
    for (index_t n = 0; n < N; ++n) sum += acc_t<T>(dout[n * O + o]);
    dbias[o] = T(acc_t<T>(dbias[o]) + sum);
  }
};

template <class Device = device::Cpu, class T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, index_t N, index_t I, index_t O) {
  Device::template gemm<T>(Op::none, Op::transpose, N, O, I, 1, in, I, weight, I, 0, out, O);
  if (bias) Device::parallel_for(N, BiasAddRow<T>{out, bias, O});
}

// Any of din, dweight, dbias may be null when that gradient is not wanted
// (a frozen weight, the first layer's input).
template <class Device = device::Cpu, class T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight, index_t N,
                     index_t I, index_t O) {
  if (din) Device::template gemm<T>(Op::none, Op::none, N, I, O, 1, dout, O, weight, I, 1, din, I);
  if (dweight) Device::template gemm<T>(Op::transpose, Op::none, O, I, N, 1, dout, O, in, I, 1, dweight, I);
  if (dbias) Device::parallel_for(O, BiasGradColumn<T>{dbias, dout, N, O});
}

}  // namespace ft::nn
