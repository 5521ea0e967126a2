#pragma once
// A stage of a model: the embedding, one block, or the head. A stage holds
// weights only; what its forward leaves for its backward lives in the
// micro-batch's Context. Stage s (the index StageHooks use: -1 the
// embedding, 0..L-1 the blocks, L the head) reads context.stream(s) and
// writes context.stream(s + 1); the embedding reads the batch's ids instead,
// the head writes the loss. A schedule (Transformer's sequential
// forward_backward, or a pipeline's) only decides which stage runs on which
// context when.
#include <string>

#include "ft/models/context.hpp"
#include "ft/models/parameters.hpp"

namespace ft::models {

template <element T, class Device = device::Cpu>
class Stage {
public:
  using Parameters = ParameterBuffer<T, typename Device::Memory>;

  virtual ~Stage() = default;
  virtual Parameters& parameters() = 0;
  // What this stage's parameter names start with ("layers.3.").
  virtual std::string prefix() const = 0;
  virtual void forward(Context<T, Device>& context) = 0;
  // context.gradient() holds the gradient of the stage's output and leaves
  // with the gradient of its input; parameter gradients are added to the
  // stage's buffer.
  virtual void backward(Context<T, Device>& context) = 0;
  // The weight gradients a backward left for later (zero-bubble schedules:
  // Context::defer_weight_gradients); nothing for a stage that never defers.
  virtual void weight_gradients(Context<T, Device>&) {}
};

}  // namespace ft::models
