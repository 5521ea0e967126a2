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
// ones kept, a smooth blend between) or LongRoPE's short factors, computed
// as HF computes them. LongRoPE also scales the rotation by its attention
// factor (HF multiplies cos and sin by it).
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/nn/layer_options.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// HF computes these in float32; so does ft, for every element type, so that
// rotations match HF bit for bit in the frequencies.
inline std::vector<float> rope_inverse_frequencies(const RopeConfig& rope) {
  std::vector<float> inv(std::size_t(rope.rotary_dim / 2));
  for (std::size_t i = 0; i < inv.size(); ++i) {
    float exponent = float(std::int64_t(2 * i)) / float(rope.rotary_dim);
    const float factor = rope.short_factors.empty() ? 1.0f : float(rope.short_factors[i]);
    inv[i] = rope.short_factors.empty() ? 1.0f / std::pow(float(rope.theta), exponent)
                                        : 1.0f / (factor * std::pow(float(rope.theta), exponent));
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

// Index n half + i: rotate pair i of every query and key head of token n.
// `sign` is +1 forward, -1 backward (the inverse rotation).
template <class T>
struct RopePair {
  using A = acc_t<T>;
  T* qkv;
  const std::int32_t* positions;
  const float* inv_freq;
  index_t heads;  // H + G: the query and key heads, which come first in a row
  index_t row_stride, D, R;
  A sign;
  float scale;  // LongRoPE's attention factor on cos and sin; backward applies the transpose

  FT_HOST_DEVICE void operator()(index_t k) const {
    const index_t half = R / 2, n = k / half, i = k % half;
    A angle = A(positions[n]) * A(inv_freq[i]);
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

// inv_freq (rope_inverse_frequencies) is in the device's memory.
template <class Device = device::Cpu, class T>
void rope_forward(T* qkv, const std::int32_t* positions, std::span<const float> inv_freq, index_t N,
                  index_t H, index_t G, index_t D, float scale = 1.0f) {
  index_t R = index_t(inv_freq.size()) * 2;
  Device::parallel_for(N * (R / 2),
                       RopePair<T>{qkv, positions, inv_freq.data(), H + G, (H + 2 * G) * D, D, R, 1, scale});
}

// In place on the gradient of the rotated rows.
template <class Device = device::Cpu, class T>
void rope_backward(T* dqkv, const std::int32_t* positions, std::span<const float> inv_freq, index_t N,
                   index_t H, index_t G, index_t D, float scale = 1.0f) {
  index_t R = index_t(inv_freq.size()) * 2;
  Device::parallel_for(N * (R / 2),
                       RopePair<T>{dqkv, positions, inv_freq.data(), H + G, (H + 2 * G) * D, D, R, -1, scale});
}

// Positions a rope covers: LongRoPE's long factors (from position_limit on) are refused by name.
inline void check_rope_positions(index_t position_limit, std::span<const std::int32_t> positions) {
  if (position_limit == 0) return;
  for (std::int32_t p : positions)
    if (p >= position_limit)
      throw Error("position " + std::to_string(p) + " is past original_max_position_embeddings (" +
                  std::to_string(position_limit) +
                  "), where LongRoPE takes its long factors, which ft does not implement; use sequences of at most " +
                  std::to_string(position_limit) + " tokens");
}

}  // namespace ft::nn
