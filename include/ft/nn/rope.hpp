#pragma once
// Rotary position embeddings, HF's "rotate half" layout: within each head the
// first R dimensions rotate as pairs (i, i + R/2), i < R/2, by angle
// pos * inv_freq[i]; dimensions R..D pass through (partial rotary, GPT-NeoX).
//
// Applied in place to the query and key heads of the fused qkv rows
// [N, (H + 2G) * D] (queries, then keys, then values). Backward is the same
// rotation by the opposite angle, applied in place to the gradient.
//
// The inverse frequencies come from `RopeConfig`: theta, the rotary size,
// and optional Llama-3 scaling (long wavelengths divided by `factor`, short
// ones kept, a smooth blend between) or LongRoPE's short or long factors,
// computed as HF computes them. LongRoPE also scales the rotation by its
// attention factor (HF multiplies cos and sin by it).
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/layer_options.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// HF computes these in float32; so does ft, for every element type, so that
// rotations match HF bit for bit in the frequencies. `long_factors` picks
// LongRoPE's long table (a rope without one has a single table).
inline std::vector<float> rope_inverse_frequencies(const RopeConfig& rope, bool long_factors = false) {
  const std::vector<double>& factors = long_factors ? rope.long_factors : rope.short_factors;
  std::vector<float> inv(std::size_t(rope.rotary_dim / 2));
  for (std::size_t i = 0; i < inv.size(); ++i) {
    float exponent = float(std::int64_t(2 * i)) / float(rope.rotary_dim);
    inv[i] = factors.empty() ? 1.0f / std::pow(float(rope.theta), exponent)
                             : 1.0f / (float(factors[i]) * std::pow(float(rope.theta), exponent));
  }
  if (rope.linear_factor != 1.0)  // in float32, as HF divides its float32 frequencies
    for (float& f : inv) f = f / float(rope.linear_factor);
  if (!rope.llama3) return inv;
  const Llama3Scaling& s = rope.scaling;
  double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (float& f : inv) {
    double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = float(f / s.factor);
    } else if (wavelen >= high_freq_wavelen) {
      double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                      (s.high_freq_factor - s.low_freq_factor);
      f = float((1 - smooth) * f / s.factor + smooth * f);
    }
  }
  return inv;
}

// Whether a batch takes LongRoPE's long factors, as HF decides for one
// forward: its furthest position reaches original_max_position_embeddings.
inline bool takes_long_factors(const RopeConfig& rope, std::span<const std::int32_t> positions) {
  if (rope.long_factors.empty()) return false;
  for (std::int32_t p : positions)
    if (p >= rope.position_limit) return true;
  return false;
}

// The frequencies rows rotate by (the device's memory): one table for every
// row, or, with `long_rows`, LongRoPE's long table for the rows flagged 1
// (the inference engine, whose rows belong to sequences of different lengths).
struct RopeTables {
  std::span<const float> inv_freq;
  const float* long_inv_freq = nullptr;
  const std::uint8_t* long_rows = nullptr;
};

// Index n half + i: rotate pair i of every query and key head of token n.
// `sign` is +1 forward, -1 backward (the inverse rotation).
template <class T>
struct RopePair {
  using A = acc_t<T>;
  T* qkv;
  const std::int32_t* positions;
  const float* inv_freq;
  const float* long_inv_freq;
  const std::uint8_t* long_rows;
  index_t heads;  // H + G: the query and key heads, which come first in a row
  index_t row_stride, D, R;
  A sign;
  float scale;  // LongRoPE's attention factor on cos and sin; backward applies the transpose

  FT_HOST_DEVICE void operator()(index_t k) const {
    const index_t half = R / 2, n = k / half, i = k % half;
    const float* table = long_rows && long_rows[n] ? long_inv_freq : inv_freq;
    A angle = A(positions[n]) * A(table[i]);
    A c = std::cos(angle), s = sign * std::sin(angle);
    if (scale != 1.0f) {  // as HF: cos and sin in float32 times the factor
      c = A(float(c) * scale);
      s = A(float(s) * scale);
    }
    for (index_t h = 0; h < heads; ++h) {
      T* x = qkv + n * row_stride + h * D;
      A x1 = A(x[i]), x2 = A(x[i + half]);
      x[i] = T(x1 * c - x2 * s);
      x[i + half] = T(x2 * c + x1 * s);
    }
  }
};

template <class Device, class T>
void rope_rotate(T* qkv, const std::int32_t* positions, const RopeTables& tables, index_t N, index_t H, index_t G,
                 index_t D, float sign, float scale) {
  const index_t R = index_t(tables.inv_freq.size()) * 2;
  Device::parallel_for(N * (R / 2), RopePair<T>{qkv, positions, tables.inv_freq.data(), tables.long_inv_freq,
                                                tables.long_rows, H + G, (H + 2 * G) * D, D, R, sign, scale});
}

template <class Device = device::Cpu, class T>
void rope_forward(T* qkv, const std::int32_t* positions, const RopeTables& tables, index_t N, index_t H, index_t G,
                  index_t D, float scale = 1.0f) {
  rope_rotate<Device>(qkv, positions, tables, N, H, G, D, 1, scale);
}

// In place on the gradient of the rotated rows.
template <class Device = device::Cpu, class T>
void rope_backward(T* dqkv, const std::int32_t* positions, const RopeTables& tables, index_t N, index_t H, index_t G,
                   index_t D, float scale = 1.0f) {
  rope_rotate<Device>(dqkv, positions, tables, N, H, G, D, -1, scale);
}

}  // namespace ft::nn
