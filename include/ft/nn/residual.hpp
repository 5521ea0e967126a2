#pragma once
// The residual connection, y += x element-wise, on any device, and the
// scaling of a branch before it joins (Granite's residual_multiplier).
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"

namespace ft::nn {

template <class T>
struct AddInto {
  T* y;
  const T* x;
  FT_HOST_DEVICE void operator()(index_t i) const { y[i] = T(acc_t<T>(y[i]) + acc_t<T>(x[i])); }
};

template <class T>
struct ScaleInto {
  T* y;
  const T* x;
  acc_t<T> factor;
  FT_HOST_DEVICE void operator()(index_t i) const { y[i] = T(acc_t<T>(x[i]) * factor); }
};

template <class Device = device::Cpu, class T>
void add_into(T* y, const T* x, index_t count) {
  Device::parallel_for(count, AddInto<T>{y, x});
}

// y = factor * x; y may be x.
template <class Device = device::Cpu, class T>
void scale_into(T* y, const T* x, acc_t<T> factor, index_t count) {
  Device::parallel_for(count, ScaleInto<T>{y, x, factor});
}

}  // namespace ft::nn
