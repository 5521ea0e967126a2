#pragma once
// Host values where a device's kernels read them: copied into an array in
// the device's memory that grows to the largest copy seen, so a loop whose
// sizes repeat (a training step's batch, a decode step's rows) allocates
// once. The array is the caller's, kept from call to call.
#include <vector>

#include "ft/tensor/array.hpp"

namespace ft::device {

template <class Device, class V>
const V* upload(memory::Array<V, typename Device::Memory>& to, const std::vector<V>& from) {
  using Array = memory::Array<V, typename Device::Memory>;
  if (to.size() < from.size()) to = Array(from.size(), typename Array::Uninitialized{});
  Device::from_host(to.data(), from.data(), from.size() * sizeof(V));
  return to.data();
}

}  // namespace ft::device
