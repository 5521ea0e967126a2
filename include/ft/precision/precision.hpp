#pragma once
// A precision policy fixes the dtype of each kind of buffer a Trainer holds:
//   storage  the model's weights as used in forward and backward
//   compute  the inputs of matrix products (accumulation is always f32)
//   grad     parameter gradients
//   master   the copy the optimizer updates (equal to storage when there is no master copy)
// and whether the loss is scaled to keep f16 gradients from underflowing.
#include <concepts>
#include <string_view>

#include "ft/core/dtype.hpp"
#include "ft/core/policy.hpp"

namespace ft::precision {
struct Policy {};  // base tag of every precision policy
}

namespace ft {

template <class P>
concept precision_policy = named_policy<P> && std::derived_from<P, precision::Policy> && requires {
  { P::storage } -> std::convertible_to<DType>;
  { P::compute } -> std::convertible_to<DType>;
  { P::grad } -> std::convertible_to<DType>;
  { P::master } -> std::convertible_to<DType>;
  { P::loss_scaling } -> std::convertible_to<bool>;
};

}  // namespace ft

namespace ft::precision {

struct FP32 : Policy {
  static constexpr std::string_view name = "fp32";
  static constexpr std::string_view type_name = "ft::precision::FP32";
  static constexpr DType storage = DType::f32, compute = DType::f32, grad = DType::f32,
                         master = DType::f32;
  static constexpr bool loss_scaling = false;
};

// Everything in bf16, the optimizer included: half the memory of FP32, at the
// cost of updates smaller than bf16's resolution being lost.
struct BF16True : Policy {
  static constexpr std::string_view name = "bf16-true";
  static constexpr std::string_view type_name = "ft::precision::BF16True";
  static constexpr DType storage = DType::bf16, compute = DType::bf16, grad = DType::bf16,
                         master = DType::bf16;
  static constexpr bool loss_scaling = false;
};

// bf16 weights and compute, with f32 master weights and f32 gradients, so small
// updates accumulate exactly.
struct BF16Mixed : Policy {
  static constexpr std::string_view name = "bf16-mixed";
  static constexpr std::string_view type_name = "ft::precision::BF16Mixed";
  static constexpr DType storage = DType::bf16, compute = DType::bf16, grad = DType::f32,
                         master = DType::f32;
  static constexpr bool loss_scaling = false;
};

// f16 compute with f32 master weights and a dynamic loss scale: a step whose
// gradients overflow is skipped and the scale lowered.
struct FP16Mixed : Policy {
  static constexpr std::string_view name = "fp16-mixed";
  static constexpr std::string_view type_name = "ft::precision::FP16Mixed";
  static constexpr DType storage = DType::f16, compute = DType::f16, grad = DType::f32,
                         master = DType::f32;
  static constexpr bool loss_scaling = true;
};

static_assert(precision_policy<FP32> && precision_policy<BF16True> &&
              precision_policy<BF16Mixed> && precision_policy<FP16Mixed>);

}  // namespace ft::precision
