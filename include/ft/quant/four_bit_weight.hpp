#pragma once
// A weight stored as bitsandbytes stores it under load_in_4bit: packed 4-bit
// codes and one absmax a block, the absmax either plain float32 or itself
// quantized (double quantization, bnb_4bit_use_double_quant): 8-bit codes of
// the dynamic map in blocks of 256, around an offset (their mean) that is
// subtracted first. About 0.5 byte a weight, plus 4 / blocksize (plain) or
// about 1 / blocksize (double) for the absmax.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ft/core/half.hpp"
#include "ft/core/rounded.hpp"
#include "ft/quant/blockwise.hpp"
#include "ft/quant/packed_weight.hpp"

namespace ft::quant {

struct FourBitOptions {
  FourBit type = FourBit::nf4;
  count_t blocksize = 64;
  bool double_quant = false;
  bool operator==(const FourBitOptions&) const = default;
};

// The absmax blocks of double quantization: bitsandbytes always uses 256.
inline constexpr count_t nested_blocksize = 256;

struct FourBitWeight final : PackedWeight {
  struct Nested {
    std::vector<std::uint8_t> codes;  // one a 4-bit block
    std::vector<float> absmax;        // one a block of `blocksize` codes
    float offset = 0;
    count_t blocksize = nested_blocksize;
  };

  FourBit type = FourBit::nf4;
  count_t blocksize = 64;
  std::vector<std::int64_t> shape;  // the weight's, e.g. [out, in]
  std::string dtype = "float32";    // the weight's before quantization, as torch names it
  std::vector<std::uint8_t> packed; // (numel + 1) / 2 bytes
  std::vector<float> absmax;        // without double quantization
  std::optional<Nested> nested;     // with it

  count_t numel() const {
    count_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  count_t blocks() const { return block_count(numel(), blocksize); }
  const std::vector<std::int64_t>& hf_shape() const override { return shape; }

  // Block b's float32 absmax: with double quantization, its 8-bit code's
  // value times its nested absmax, rounded, plus the offset (bitsandbytes
  // dequantizes the absmax, then adds the offset).
  float absmax_of(count_t b) const {
    if (!nested) return absmax[std::size_t(b)];
    return rounded(dynamic_code[nested->codes[std::size_t(b)]] * nested->absmax[std::size_t(b / nested->blocksize)]) +
           nested->offset;
  }

  // Rows of the weight as bitsandbytes dequantizes them: each code's value
  // times its absmax in float32, rounded to the weight's dtype.
  void dequantize_rows(std::int64_t first, std::span<float> out) const override {
    dequantize_4bit_range(packed, [this](count_t b) { return absmax_of(b); }, blocksize, type, first * columns(), out);
    if (dtype == "bfloat16")
      for (float& v : out) v = float(bf16(v));
    else if (dtype == "float16")
      for (float& v : out) v = float(f16(v));
  }

  // What the weight holds in memory.
  std::size_t bytes() const override {
    std::size_t n = packed.size();
    if (nested) return n + nested->codes.size() + nested->absmax.size() * sizeof(float) + sizeof(float);
    return n + absmax.size() * sizeof(float);
  }
};

inline FourBitWeight quantize_weight(std::span<const float> x, std::vector<std::int64_t> shape, std::string dtype,
                                     const FourBitOptions& options) {
  if (!valid_4bit_blocksize(options.blocksize))
    throw Error("4-bit block size " + std::to_string(options.blocksize) +
                " is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, 2048, 4096)");
  FourBitWeight w;
  w.type = options.type;
  w.blocksize = options.blocksize;
  w.shape = std::move(shape);
  w.dtype = std::move(dtype);
  CodedBlocks coded = quantize_4bit(x, options.blocksize, options.type);
  w.packed = std::move(coded.codes);
  if (!options.double_quant) {
    w.absmax = std::move(coded.absmax);
    return w;
  }
  FourBitWeight::Nested nested;
  nested.offset = torch_mean(coded.absmax);
  for (float& a : coded.absmax) a -= nested.offset;
  CodedBlocks second = quantize_8bit(coded.absmax, nested_blocksize);
  nested.codes = std::move(second.codes);
  nested.absmax = std::move(second.absmax);
  w.nested = std::move(nested);
  return w;
}

}  // namespace ft::quant
