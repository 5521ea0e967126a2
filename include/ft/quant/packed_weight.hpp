#pragma once
// A frozen weight kept in a quantized form between uses: bitsandbytes'
// 4-bit blocks (four_bit_weight.hpp) or GPTQ's groups (gptq_weight.hpp).
// What a 4-bit base asks of one: the weight as its format dequantizes it,
// in HF's layout ([out, in] for a linear weight), and the bytes it holds.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ft::quant {

class PackedWeight {
public:
  virtual ~PackedWeight() = default;
  // The weight's HF shape.
  virtual const std::vector<std::int64_t>& hf_shape() const = 0;
  // Every value of the weight, as its format's reference dequantizes it.
  virtual void dequantize(std::span<float> out) const = 0;
  // What the packed form holds in memory.
  virtual std::size_t bytes() const = 0;
};

}  // namespace ft::quant
