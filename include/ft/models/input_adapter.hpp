#pragma once
// What the embedding stage lets an adapter do: supply the vectors of a batch's
// virtual tokens (Batch::virtual_tokens, the first positions of every row),
// and take their gradient in backward. Prompt tuning is one such adapter
// (ft/adapters/prompt_tuning.hpp); the model knows nothing else about it.
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/models/batch.hpp"

namespace ft::models {

// Device: where the pointers it is given live.
template <element T, class Device = device::Cpu>
class InputAdapter {
public:
  virtual ~InputAdapter() = default;
  // Overwrites the rows of y [B * T, C] that hold virtual tokens.
  virtual void forward(T* y, const Batch& batch) = 0;
  // Adds the gradient of the adapter's parameters, from the gradient of y.
  virtual void backward(const T* dy, const Batch& batch) = 0;
};

}  // namespace ft::models
