#pragma once
// A linear weight as GPTQ stores it (GPTQModel, AutoGPTQ, transformers'
// GPTQ integration): `bits`-bit codes packed 32 / bits to an int32 word, the
// k-th of a word at bit bits * k, along the input for the codes
// (qweight [in * bits / 32, out]) and along the output for the zero points
// (qzeros [groups, out * bits / 32]); an fp16 scale per group and output
// (scales [groups, out]); the group of each input row (g_idx [in], any
// order under act-order, desc_act). The weight is
//   W[o, i] = scales[g, o] * (q[i, o] - zero[g, o]),   g = g_idx[i],
// in fp16 as GPTQ's reference kernel computes it (the integer difference
// times the fp16 scale, rounded to fp16). The "gptq" checkpoint format
// stores each zero point less one, as AutoGPTQ did; "gptq_v2" as it is.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ft/core/half.hpp"
#include "ft/quant/packed_weight.hpp"

namespace ft::quant {

struct GptqWeight final : PackedWeight {
  int bits = 4;
  std::int64_t in = 0, out = 0, groups = 0;
  int zero_offset = 1;                // added to a stored zero point: 1 for "gptq", 0 for "gptq_v2"
  std::vector<std::int32_t> qweight;  // [in * bits / 32, out]
  std::vector<std::int32_t> qzeros;   // [groups, out * bits / 32]
  std::vector<f16> scales;            // [groups, out]
  std::vector<std::int32_t> g_idx;    // [in]
  std::vector<std::int64_t> shape;    // [out, in]

  const std::vector<std::int64_t>& hf_shape() const override { return shape; }

  std::int32_t code(std::int64_t i, std::int64_t o) const {
    const int per = 32 / bits;
    const std::uint32_t word = std::uint32_t(qweight[std::size_t((i / per) * out + o)]);
    return std::int32_t((word >> (bits * (i % per))) & ((1u << bits) - 1));
  }
  std::int32_t zero(std::int64_t g, std::int64_t o) const {
    const int per = 32 / bits;
    const std::uint32_t word = std::uint32_t(qzeros[std::size_t(g * (out / per) + o / per)]);
    return std::int32_t((word >> (bits * (o % per))) & ((1u << bits) - 1)) + zero_offset;
  }

  void dequantize_rows(std::int64_t first, std::span<float> w) const override {
    const std::int64_t rows = std::int64_t(w.size()) / in;
    for (std::int64_t o = first; o < first + rows; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        const std::int64_t g = g_idx[std::size_t(i)];
        const float scale = float(scales[std::size_t(g * out + o)]);
        w[std::size_t((o - first) * in + i)] = float(f16(scale * float(code(i, o) - zero(g, o))));
      }
  }

  std::size_t bytes() const override {
    return (qweight.size() + qzeros.size() + g_idx.size()) * sizeof(std::int32_t) + scales.size() * sizeof(f16);
  }
};

}  // namespace ft::quant
