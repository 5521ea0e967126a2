#pragma once
// A precision policy fixes the two dtypes of the buffers a Trainer holds:
//   storage  the model's weights as forward and backward use them: the
//            inputs of matrix products (accumulated in f32) and each
//            micro-batch's parameter gradients
//   master   the copy the optimizer updates, and the step's gradient it
//            reads (summed over micro-batches and ranks); equal to storage
//            when there is no master copy
// and whether the loss is scaled to keep f16 gradients from underflowing.
// These are the engine's own dtypes (train::Engine<storage, master>), so
// what a plan or an estimate says of a precision is what the engine holds.
#include <concepts>
#include <string_view>

#include "ft/core/dtype.hpp"
#include "ft/core/policy.hpp"

namespace ft::precision {
struct Policy {};  // base tag of every precision policy
}

namespace ft {

/// A precision: the `storage` dtype of the weights forward and backward use,
/// the `master` dtype the optimizer updates, and whether the loss is scaled.
/// ft's own: precision::FP32, BF16True, BF16Mixed, FP16Mixed, named as the
/// second policy of a Trainer:
/// @snippet custom_trainer/main.cpp trainer
template <class P>
concept precision_policy = named_policy<P> && std::derived_from<P, precision::Policy> && requires {
  { P::storage } -> std::convertible_to<DType>;
  { P::master } -> std::convertible_to<DType>;
  { P::loss_scaling } -> std::convertible_to<bool>;
};

}  // namespace ft

namespace ft::precision {

struct FP32 : Policy {
  static constexpr std::string_view name = "fp32";
  static constexpr std::string_view type_name = "ft::precision::FP32";
  static constexpr DType storage = DType::f32, master = DType::f32;
  static constexpr bool loss_scaling = false;
};

// Everything in bf16, the optimizer included: half the memory of FP32, at the
// cost of updates smaller than bf16's resolution being lost.
struct BF16True : Policy {
  static constexpr std::string_view name = "bf16-true";
  static constexpr std::string_view type_name = "ft::precision::BF16True";
  static constexpr DType storage = DType::bf16, master = DType::bf16;
  static constexpr bool loss_scaling = false;
};

// bf16 weights and compute, with f32 master weights and an f32 step gradient,
// so small updates accumulate exactly.
struct BF16Mixed : Policy {
  static constexpr std::string_view name = "bf16-mixed";
  static constexpr std::string_view type_name = "ft::precision::BF16Mixed";
  static constexpr DType storage = DType::bf16, master = DType::f32;
  static constexpr bool loss_scaling = false;
};

// f16 compute with f32 master weights and a dynamic loss scale: a step whose
// gradients overflow is skipped and the scale lowered.
struct FP16Mixed : Policy {
  static constexpr std::string_view name = "fp16-mixed";
  static constexpr std::string_view type_name = "ft::precision::FP16Mixed";
  static constexpr DType storage = DType::f16, master = DType::f32;
  static constexpr bool loss_scaling = true;
};

static_assert(precision_policy<FP32> && precision_policy<BF16True> &&
              precision_policy<BF16Mixed> && precision_policy<FP16Mixed>);

}  // namespace ft::precision
