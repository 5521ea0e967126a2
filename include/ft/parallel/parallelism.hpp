#pragma once
// A parallelism policy says how a run's stages and flat buffers map to ranks.
// The three ZeRO stages shard, in turn, the optimizer state, the gradients and
// the parameters themselves (ZeRO-3 is FSDP's FULL_SHARD, ZeRO-2 its
// SHARD_GRAD_OP); DDP shards nothing and all-reduces gradients; Single is one
// rank.
//
// A policy hands the engine its runtime, `runtime<T, M>` (T the storage
// dtype, M the optimizer's): every data-parallel policy here names
// parallel::DataParallel, which reads the policy's flags; Pipeline names
// parallel::PipelineParallel. A runtime is made from the communicator, the
// recipe and the policy's Sharding. A policy whose runtime also takes a
// device, `runtime<T, M, Device>`, runs on devices other than the CPU.
#include <concepts>
#include <string>
#include <string_view>

#include "ft/core/numeric.hpp"
#include "ft/core/policy.hpp"

namespace ft::device {
struct Cpu;
}

namespace ft::parallel {

// FSDP's names for the data-parallel stages, as the stock policies' names.
inline std::string canonical_name(const std::string& name) {
  if (name == "no_shard") return "ddp";
  if (name == "shard_grad_op") return "zero2";
  if (name == "full_shard") return "zero3";
  return name;
}

struct Policy {};  // base tag of every parallelism policy

template <element T, class M, class Device = device::Cpu>
class DataParallel;
template <element T, class M, class Device = device::Cpu>
class PipelineParallel;
}  // namespace ft::parallel

namespace ft {

/// A parallelism: whether it spans several ranks, which of the optimizer
/// state, gradients and parameters it shards (ZeRO-1, 2, 3), and the runtime
/// that maps stages and buffers to ranks. ft's own: parallel::Single, DDP,
/// ZeRO<1>, ZeRO<2>, ZeRO<3>, Pipeline, named as the third policy of a Trainer:
/// @snippet custom_trainer/main.cpp trainer
template <class P>
concept parallelism_policy = named_policy<P> && std::derived_from<P, parallel::Policy> && requires {
  { P::multi_rank } -> std::convertible_to<bool>;
  { P::shards_optimizer_state } -> std::convertible_to<bool>;
  { P::shards_gradients } -> std::convertible_to<bool>;
  { P::shards_parameters } -> std::convertible_to<bool>;
  typename P::template runtime<float, float>;
};

}  // namespace ft

namespace ft::parallel {

struct Single : Policy {
  static constexpr std::string_view name = "single";
  static constexpr std::string_view type_name = "ft::parallel::Single";
  static constexpr bool multi_rank = false, shards_optimizer_state = false,
                        shards_gradients = false, shards_parameters = false;
  template <element T, class M, class Device = device::Cpu>
  using runtime = DataParallel<T, M, Device>;
};

struct DDP : Policy {
  static constexpr std::string_view name = "ddp";
  static constexpr std::string_view type_name = "ft::parallel::DDP";
  static constexpr bool multi_rank = true, shards_optimizer_state = false,
                        shards_gradients = false, shards_parameters = false;
  template <element T, class M, class Device = device::Cpu>
  using runtime = DataParallel<T, M, Device>;
};

template <int Stage>
struct ZeRO : Policy {
  static_assert(Stage >= 1 && Stage <= 3, "ZeRO has stages 1, 2 and 3");
  static constexpr std::string_view name = Stage == 1 ? "zero1" : Stage == 2 ? "zero2" : "zero3";
  static constexpr std::string_view type_name = Stage == 1   ? "ft::parallel::ZeRO<1>"
                                                : Stage == 2 ? "ft::parallel::ZeRO<2>"
                                                             : "ft::parallel::ZeRO<3>";
  static constexpr bool multi_rank = true, shards_optimizer_state = true,
                        shards_gradients = Stage >= 2, shards_parameters = Stage >= 3;
  template <element T, class M, class Device = device::Cpu>
  using runtime = DataParallel<T, M, Device>;
};

// The model's stages cut over pipeline ranks (pipeline.hpp); replicas of a
// pipeline rank combine as DDP or ZeRO-1 (the recipe's pipeline section).
struct Pipeline : Policy {
  static constexpr std::string_view name = "pipeline";
  static constexpr std::string_view type_name = "ft::parallel::Pipeline";
  static constexpr bool multi_rank = true, shards_optimizer_state = false,
                        shards_gradients = false, shards_parameters = false;
  template <element T, class M, class Device = device::Cpu>
  using runtime = PipelineParallel<T, M, Device>;
};

static_assert(parallelism_policy<Single> && parallelism_policy<DDP> &&
              parallelism_policy<ZeRO<1>> && parallelism_policy<ZeRO<3>>);

}  // namespace ft::parallel
