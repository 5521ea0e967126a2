#pragma once
// Linear layer with HF's weight layout: out[N, O] = in[N, I] * W[O, I]^T + b[O].
// The bias is optional (null).
#include "ft/kernels/gemm.hpp"

namespace ft::nn {

template <class T>
void linear_forward(T* out, const T* in, const T* weight, const T* bias, index_t N, index_t I, index_t O) {
  gemm<T>(Op::none, Op::transpose, N, O, I, 1, in, I, weight, I, 0, out, O);
  if (bias)
    cpu::parallel_for(N, [&](index_t n) {
      for (index_t o = 0; o < O; ++o) out[n * O + o] = T(acc_t<T>(out[n * O + o]) + acc_t<T>(bias[o]));
    });
}

// Any of din, dweight, dbias may be null when that gradient is not wanted
// (a frozen weight, the first layer's input).
template <class T>
void linear_backward(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight, index_t N,
                     index_t I, index_t O) {
  if (din) gemm<T>(Op::none, Op::none, N, I, O, 1, dout, O, weight, I, 1, din, I);
  if (dweight) gemm<T>(Op::transpose, Op::none, O, I, N, 1, dout, O, in, I, 1, dweight, I);
  if (dbias)
    cpu::parallel_for(O, [&](index_t o) {
      acc_t<T> sum = 0;
      for (index_t n = 0; n < N; ++n) sum += acc_t<T>(dout[n * O + o]);
      dbias[o] = T(acc_t<T>(dbias[o]) + sum);
    });
}

}  // namespace ft::nn
