#pragma once
// 16-bit floating-point storage types. Arithmetic is never done in them:
// kernels load a value into its accumulation type (float), compute, and round
// back on store, so bf16 and f16 are conversions and nothing else.
//
//   bf16: the upper 16 bits of an IEEE f32 (8-bit exponent, 7-bit mantissa);
//         rounding is to nearest, ties to even, and NaN stays NaN.
//   f16:  IEEE binary16 (5-bit exponent, 10-bit mantissa), with subnormals.
#include <bit>
#include <cstdint>

#include "ft/core/host_device.hpp"

namespace ft {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  FT_HOST_DEVICE explicit bf16(float f) : bits(round(f)) {}
  FT_HOST_DEVICE explicit bf16(double d) : bf16(static_cast<float>(d)) {}
  FT_HOST_DEVICE operator float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }

private:
  FT_HOST_DEVICE static std::uint16_t round(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return std::uint16_t(u >> 16);
  }
};

struct f16 {
  std::uint16_t bits = 0;

  f16() = default;
  FT_HOST_DEVICE explicit f16(float f) : bits(from_float(f)) {}
  FT_HOST_DEVICE explicit f16(double d) : f16(static_cast<float>(d)) {}
  FT_HOST_DEVICE operator float() const { return to_float(bits); }

  static constexpr f16 from_bits(std::uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }

private:
  FT_HOST_DEVICE static std::uint16_t from_float(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    std::uint32_t sign = (u >> 16) & 0x8000u;
    std::uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);       // NaN
    if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);      // overflow to infinity
    if (abs < 0x38800000u) {                                            // subnormal or zero in f16
      if (abs < 0x33000000u) return std::uint16_t(sign);               // below half the smallest subnormal
      std::uint32_t exponent = abs >> 23;
      std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
      std::uint32_t shift = 126u - exponent;                            // 14..24
      std::uint32_t half = 1u << (shift - 1);
      std::uint32_t rest = mantissa & ((1u << shift) - 1u);
      std::uint32_t result = mantissa >> shift;
      if (rest > half || (rest == half && (result & 1u))) ++result;
      return std::uint16_t(sign | result);
    }
    std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);          // nearest, ties to even
    return std::uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }

  FT_HOST_DEVICE static float to_float(std::uint16_t h) {
    std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
      float magnitude = float(mantissa) * 5.9604644775390625e-8f;  // 2^-24
      return sign ? -magnitude : magnitude;
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

}  // namespace ft
