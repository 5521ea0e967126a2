#pragma once
// Token embedding: out[n, :] = table[ids[n], :].
#include <cstdint>

#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

template <class T>
void embedding_forward(T* out, const std::int32_t* ids, const T* table, index_t N, index_t C) {
  cpu::parallel_for(N, [&](index_t n) {
    const T* row = table + index_t(ids[n]) * C;
    for (index_t c = 0; c < C; ++c) out[n * C + c] = row[c];
  });
}

// Rows with the same id would race if split by row, so threads split the
// channels instead and each walks every row.
template <class T>
void embedding_backward(T* dtable, const std::int32_t* ids, const T* dout, index_t N, index_t C) {
  constexpr index_t block = 64;
  cpu::parallel_for((C + block - 1) / block, [&](index_t cb) {
    index_t c0 = cb * block, c1 = std::min(C, c0 + block);
    for (index_t n = 0; n < N; ++n) {
      T* drow = dtable + index_t(ids[n]) * C;
      for (index_t c = c0; c < c1; ++c) drow[c] = T(acc_t<T>(drow[c]) + acc_t<T>(dout[n * C + c]));
    }
  });
}

}  // namespace ft::nn
