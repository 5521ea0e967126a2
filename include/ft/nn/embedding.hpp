#pragma once
// Token embedding: out[n, :] = table[ids[n], :].
#include <cstdint>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

template <class T>
struct EmbeddingForwardRow {
  T* out;
  const std::int32_t* ids;
  const T* table;
  index_t C;

  FT_HOST_DEVICE void operator()(index_t n) const {
    const T* row = table + index_t(ids[n]) * C;
    for (index_t c = 0; c < C; ++c) out[n * C + c] = row[c];
  }
};

// Rows with the same id would race if split by row, so tasks split the
// channels instead (`width` per task) and each walks every row.
template <class T>
struct EmbeddingBackwardColumns {
  T* dtable;
  const std::int32_t* ids;
  const T* dout;
  index_t N, C, width;

  FT_HOST_DEVICE void operator()(index_t task) const {
    const index_t c0 = task * width, c1 = c0 + width < C ? c0 + width : C;
    for (index_t n = 0; n < N; ++n) {
      T* drow = dtable + index_t(ids[n]) * C;
      for (index_t c = c0; c < c1; ++c) drow[c] = T(acc_t<T>(drow[c]) + acc_t<T>(dout[n * C + c]));
    }
  }
};

template <class Device = device::Cpu, class T>
void embedding_forward(T* out, const std::int32_t* ids, const T* table, index_t N, index_t C) {
  Device::parallel_for(N, EmbeddingForwardRow<T>{out, ids, table, C});
}

template <class Device = device::Cpu, class T>
void embedding_backward(T* dtable, const std::int32_t* ids, const T* dout, index_t N, index_t C) {
  constexpr index_t width = 64;
  Device::parallel_for((C + width - 1) / width, EmbeddingBackwardColumns<T>{dtable, ids, dout, N, C, width});
}

}  // namespace ft::nn
