#pragma once
// What a block lets an adapter do: add to the output of each of its linear
// layers, and add to their input gradients in backward. LoRA is one such
// adapter (ft/adapters/lora.hpp); the block knows nothing else about it.
//
// A block calls forward(slot, expert, y, x) right after the slot's base GEMM
// wrote y (before rotary embedding touches q and k), and backward(slot,
// expert, dx, dy, x) next to the base linear's backward, with the same dy
// and the input x the forward saw. The two expert slots are called once per
// routed expert, over that expert's run of sorted rows; `expert` is 0 for
// the other slots. Parameter gradients the adapter keeps are its own business.
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::models {

// The fused linear layers of a block, in HF's terms:
//   qkv      q_proj, k_proj, v_proj (GPT-NeoX: query_key_value)
//   o        o_proj (dense)
//   mlp_in   gate_proj and up_proj (dense_h_to_4h)
//   mlp_out  down_proj (dense_4h_to_h); with a mixture of experts, the shared expert's
//   router           a mixture of experts' router (gate)
//   shared_gate      Qwen2-MoE's shared_expert_gate
//   experts_gate_up  a routed expert's gate and up rows (experts.gate_up_proj)
//   experts_down     a routed expert's down projection (experts.down_proj)
enum class LinearSlot { qkv, o, mlp_in, mlp_out, router, shared_gate, experts_gate_up, experts_down };

// Device: where the pointers it is given live.
template <element T, class Device = device::Cpu>
class LinearAdapter {
public:
  virtual ~LinearAdapter() = default;
  // y[N, out] += adapter(x[N, in]).
  virtual void forward(LinearSlot slot, index_t expert, T* y, const T* x, index_t N) = 0;
  // dx[N, in] += d adapter / d x applied to dy[N, out]; adds the adapter's parameter gradients.
  virtual void backward(LinearSlot slot, index_t expert, T* dx, const T* dy, const T* x, index_t N) = 0;
};

}  // namespace ft::models
