#pragma once
// Sums down columns (a bias's or a norm's parameter gradient over a
// batch's rows) in two passes, so that a GPU has enough threads: a first
// functor sums each column over spans of rows into partials [spans, C],
// then each column adds its spans in order, so the result does not depend
// on the number of threads. On the CPU one span holds every row
// (Device::column_rows), and the sum is the plain loop down the column.
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// gradient[c] += the sum of partials[s * C + c] over the spans s.
template <class T>
struct ColumnSpansSum {
  using A = acc_t<T>;
  T* gradient;
  const A* partials;
  index_t spans, C;

  FT_HOST_DEVICE void operator()(index_t c) const {
    A sum = 0;
    for (index_t s = 0; s < spans; ++s) sum += partials[s * C + c];
    gradient[c] = T(A(gradient[c]) + sum);
  }
};

// Rows per span of a column sum over N rows on Device.
template <class Device>
index_t column_span_rows(index_t N) {
  return Device::column_rows > 0 && Device::column_rows < N ? Device::column_rows : (N > 0 ? N : 1);
}

}  // namespace ft::nn
