#pragma once
// An optimizer policy owns the state layout and the update of a flat shard of
// parameters: its `runtime<M>` (runtime.hpp), or `runtime<M, Device>` for a
// runtime that also steps on devices other than the CPU, is made from the
// shard's tensors, its size and the recipe's [train] section.
// `state_bytes` is the state it keeps per trainable parameter when
// the master dtype is f32 (per-element state is kept in bf16 under a bf16
// master, so it halves there); it is what a Trainer's plan multiplies by,
// unless the policy says what a run's [train] settings make of it
// (`state_bytes_with(train)`: SGD keeps nothing without momentum).
// `elementwise_state` says its state is one value per parameter (or none), so
// ZeRO may cut a buffer anywhere; otherwise (state per tensor, as factored
// or block-quantised moments) shards hold whole tensors. A policy that does
// not say is treated as per tensor, which is always correct.
#include <concepts>
#include <string_view>

#include "ft/core/policy.hpp"

namespace ft::device {
struct Cpu;
}

namespace ft::optim {
struct Policy {};  // base tag of every optimizer policy

template <class M, class Device = device::Cpu>
class SgdRuntime;
template <class M, class Device = device::Cpu>
class AdamWRuntime;
template <class M, class Device = device::Cpu>
class LionRuntime;
template <class M, class Device = device::Cpu>
class AdafactorRuntime;
template <class Scheme, class M, class Device>
class QuantizedAdamWRuntime;
struct EightBitMoments;
struct FourBitMoments;
}  // namespace ft::optim

namespace ft {

/// An optimizer: the state bytes it keeps per trainable parameter and the
/// runtime that steps a flat shard of parameters. ft's own: optim::SGD,
/// AdamW, Adafactor, AdamW8bit, AdamW4bit, Lion. One of your own, as a
/// plugin brings it:
/// @snippet third_party_plugin/my_plugin.cpp optimizer
template <class O>
concept optimizer_policy = named_policy<O> && std::derived_from<O, optim::Policy> && requires {
  { O::state_bytes } -> std::convertible_to<double>;
  typename O::template runtime<float>;
};

}  // namespace ft

namespace ft::optim {

// Plain SGD keeps one momentum buffer (none when momentum is 0).
struct SGD : Policy {
  static constexpr std::string_view name = "sgd";
  static constexpr std::string_view type_name = "ft::optim::SGD";
  static constexpr bool elementwise_state = true;
  static constexpr double state_bytes = 4;
  // What a run with these [train] settings keeps (recipe::TrainSection).
  template <class TrainSection>
  static constexpr double state_bytes_with(const TrainSection& t) {
    return t.momentum != 0 ? state_bytes : 0;
  }
  template <class M, class Device = device::Cpu>
  using runtime = SgdRuntime<M, Device>;
};

// AdamW keeps first and second moments.
struct AdamW : Policy {
  static constexpr std::string_view name = "adamw";
  static constexpr std::string_view type_name = "ft::optim::AdamW";
  static constexpr bool elementwise_state = true;
  static constexpr double state_bytes = 8;
  template <class M, class Device = device::Cpu>
  using runtime = AdamWRuntime<M, Device>;
};

// Adafactor factors the second moment of a matrix into row and column sums, so
// without momentum its state is negligible next to the weights.
struct Adafactor : Policy {
  static constexpr std::string_view name = "adafactor";
  static constexpr std::string_view type_name = "ft::optim::Adafactor";
  static constexpr bool elementwise_state = false;
  static constexpr double state_bytes = 0;
  template <class M, class Device = device::Cpu>
  using runtime = AdafactorRuntime<M, Device>;
};

// AdamW with both moments quantised block-wise to 8 bits (plus one f32 scale
// per 256-element block per moment; see adamw8bit.hpp).
struct AdamW8bit : Policy {
  static constexpr std::string_view name = "adamw8bit";
  static constexpr std::string_view type_name = "ft::optim::AdamW8bit";
  static constexpr bool elementwise_state = false;
  static constexpr double state_bytes = 2 + 2 * 4.0 / 256;
  template <class M, class Device = device::Cpu>
  using runtime = QuantizedAdamWRuntime<EightBitMoments, M, Device>;
};

// AdamW with both moments quantised block-wise to 4 bits, torchao's
// AdamW4bit (a code per element, packed two to a byte, plus one f32 scale per
// 128-element block per moment; see adamw4bit.hpp).
struct AdamW4bit : Policy {
  static constexpr std::string_view name = "adamw4bit";
  static constexpr std::string_view type_name = "ft::optim::AdamW4bit";
  static constexpr bool elementwise_state = false;
  static constexpr double state_bytes = 1 + 2 * 4.0 / 128;
  template <class M, class Device = device::Cpu>
  using runtime = QuantizedAdamWRuntime<FourBitMoments, M, Device>;
};

// Lion keeps one momentum buffer and updates by its sign.
struct Lion : Policy {
  static constexpr std::string_view name = "lion";
  static constexpr std::string_view type_name = "ft::optim::Lion";
  static constexpr bool elementwise_state = true;
  static constexpr double state_bytes = 4;
  template <class M, class Device = device::Cpu>
  using runtime = LionRuntime<M, Device>;
};

// Whether O's state is one value per parameter; a policy that does not say is per tensor.
template <class O>
constexpr bool elementwise_state_of = [] {
  if constexpr (requires { O::elementwise_state; }) return bool(O::elementwise_state);
  else return false;
}();

static_assert(optimizer_policy<SGD> && optimizer_policy<AdamW> && optimizer_policy<Adafactor> &&
              optimizer_policy<AdamW8bit> && optimizer_policy<AdamW4bit> && optimizer_policy<Lion>);

}  // namespace ft::optim
