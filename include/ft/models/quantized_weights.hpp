#pragma once
// A frozen model's layers kept quantized (QLoRA's 4-bit base, or a GPTQ
// model's): each quantized HF tensor of a block stays packed
// (quant/packed_weight.hpp) between uses,
// and the stage's values exist only while the stage runs. Before a stage's
// forward or backward its buffer is made and filled, each quantized tensor
// dequantized into its rows and every other tensor of the stage (norms,
// biases) copied from the rows kept at load; after, the buffer is dropped.
// So the model holds its packed weights, its small tensors whole, and one
// or two layers' values at a time, as PEFT's QLoRA dequantizes a layer's
// weight for each product and drops it.
//
// Dequantizing is the format's reference (bitsandbytes': code value times
// absmax in float32, rounded to the weight's dtype; GPTQ's in fp16), then
// converted to the model's element type, as their products cast the weight
// to the input's dtype.
#include <algorithm>
#include <memory>
#include <vector>

#include "ft/models/parameters.hpp"
#include "ft/models/weight_map.hpp"
#include "ft/quant/packed_weight.hpp"

namespace ft::models {

template <element T, class Device>
class QuantizedWeights {
  using Memory = typename Device::Memory;

public:
  // One HF tensor of a quantized stage: packed, or its rows kept as loaded.
  struct Part {
    index_t offset = 0;  // of its first row in the stage's buffer
    index_t rows = 0, cols = 1;
    RowOrder order = RowOrder::same;
    index_t heads = 0;  // for order
    std::shared_ptr<const quant::PackedWeight> packed;
    Tensor<T, Memory> kept;
  };

  bool any() const { return !stages_.empty(); }
  bool holds(index_t s) const { return std::size_t(s + 1) < stages_.size() && !stages_[std::size_t(s + 1)].empty(); }
  void add(index_t s, Part part) {
    if (stages_.size() <= std::size_t(s + 1)) stages_.resize(std::size_t(s + 2));
    stages_[std::size_t(s + 1)].push_back(std::move(part));
  }
  const std::vector<Part>& parts(index_t s) const { return stages_[std::size_t(s + 1)]; }

  // Makes stage s's values from its parts (the buffer must have none).
  void fill(ParameterBuffer<T, Memory>& buffer, index_t s) {
    buffer.allocate_zeroed_values();
    for (const Part& p : parts(s)) {
      T* into = buffer.values().data() + p.offset;
      const std::size_t count = std::size_t(p.rows * p.cols);
      if (!p.packed) {
        Device::copy(into, p.kept.data(), count * sizeof(T));
        continue;
      }
      host_.resize(count);
      p.packed->dequantize(host_);
      staged_.resize(count);
      for (index_t r = 0; r < p.rows; ++r) {
        const float* from = host_.data() + hf_row(p.order, r, p.rows, p.heads) * p.cols;
        std::transform(from, from + p.cols, staged_.data() + r * p.cols, [](float v) { return T(v); });
      }
      Device::from_host(into, staged_.data(), count * sizeof(T));
    }
  }

  // What the packed weights and kept rows hold.
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& stage : stages_)
      for (const Part& p : stage) n += p.packed ? p.packed->bytes() : std::size_t(p.kept.numel()) * sizeof(T);
    return n;
  }

private:
  std::vector<std::vector<Part>> stages_;  // by stage index + 1
  std::vector<float> host_;                // one tensor dequantized, HF's row order
  std::vector<T> staged_;                  // the same in T, ft's row order
};

}  // namespace ft::models
