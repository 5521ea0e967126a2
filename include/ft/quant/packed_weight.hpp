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
  // Rows [first, first + out.size() / columns()) of the weight, in HF's
  // layout, as its format's reference dequantizes them: a layer is made a
  // panel of rows at a time, into memory the caches hold.
  virtual void dequantize_rows(std::int64_t first, std::span<float> out) const = 0;
  // Every value of the weight.
  void dequantize(std::span<float> out) const { dequantize_rows(0, out); }
  // Values in one row (the product of the dimensions after the first).
  std::int64_t columns() const {
    std::int64_t n = 1;
    for (std::size_t d = 1; d < hf_shape().size(); ++d) n *= hf_shape()[d];
    return n;
  }
  // What the packed form holds in memory.
  virtual std::size_t bytes() const = 0;
};

}  // namespace ft::quant
