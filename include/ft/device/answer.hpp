#pragma once
// A run on a device first asks the device to describe itself, so that a
// machine without one stops in one line naming the setting that chose it,
// before any data or weights are read, rather than at the first allocation
// with the CUDA runtime's words alone.
#include <string>
#include <type_traits>

#include "ft/core/error.hpp"
#include "ft/device/cpu.hpp"

namespace ft::device {

// setting: how the device was chosen, as the user wrote it ("strategy.device = \"cuda\"", "--device cuda").
template <class Device>
void require_answer(const std::string& setting) {
  if constexpr (!std::is_same_v<Device, Cpu>) {
    try {
      (void)Device::description();
    } catch (const Error& e) {
      throw Error(setting + ", but no device of that kind answers: " + e.what());
    }
  }
}

}  // namespace ft::device
