#pragma once
// AdamW with both moments stored in 8 bits, block-wise, the scheme of
// bitsandbytes' AdamW8bit (Dettmers et al. 2021, "8-bit optimizers via
// block-wise quantization"). A tensor's moments are cut into blocks of 256
// elements; per block and moment there is one f32 absmax, and per element one
// byte: a code into a 256-entry "dynamic" map of values in [-1, 1] (m, signed)
// or [0, 1] (v, unsigned).
//
//   m_i = signed_map[m_code_i] * m_absmax[block]      (v likewise, unsigned_map)
//
// Each step, per block: decode m and v, run the AdamW update of update.hpp on
// them in f32 (see AdamWUpdate), then encode the new m and v against the
// block's new absmax (largest |m|, largest v): each element gets the code of
// the map value nearest to m / absmax (a tie goes to the smaller magnitude).
// One exception: a positive v never takes code 0, at least the smallest
// non-zero code (1e-7 absmax). Rounded to zero under a first moment that is
// not, it would make the next step about lr m / eps: on a quadratic whose
// curvatures span three decades within a block, single parameters then moved
// by up to 600 where f32 AdamW moved them by at most 1.
//
// The dynamic map (dynamic tree quantization): a code is a sign bit (signed
// map only) and a magnitude of b bits (7 signed, 8 unsigned). A magnitude
// c > 0 whose highest set bit is bit f lies in decade E = b - 1 - f (the count
// of leading zeros) and has the f bits below that one as a linear fraction,
// k = c - 2^f:
//
//   |value(c)| = 10^-E (0.1 + 0.9 (k + 1) / 2^f),   value(0) = 0
//
// computed as (1 + 9 (k + 1) / 2^f) / 10^(E+1) in double, then rounded to f32.
// Each decade further from 1 has half the resolution; the map reaches down to
// 1e-6 (signed) or 1e-7 (unsigned) and holds 1 exactly. Magnitudes grow with
// the code, so encoding is a binary search of the midpoints between
// neighbours. The table is our own, built from the paper's description; codes
// do not transfer to or from bitsandbytes.
//
// Tensors of fewer than 4096 elements keep their moments in S (f32, or bf16
// when a run keeps everything in bf16) and take the plain AdamW step of
// update.hpp (bitsandbytes' min_8bit_size): their state is small anyway.
//
// In the 8-bit step a product that feeds a sum is an explicit fused
// multiply-add. Left to the compiler it would be fused or not depending on
// target and flags (-march=x86-64-v3 fuses); spelled out, the codes and scales
// are the same bits on every CPU build, which a checkpoint resumed by another
// build and the bit-for-bit check against the numpy model in
// tools/make_optimizer_fixtures.py rely on.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/optim/quantized_moments.hpp"
#include "ft/optim/update.hpp"
#include "ft/tensor/array.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

inline constexpr index_t adamw8bit_block = 256;      // elements per absmax
inline constexpr index_t adamw8bit_min_size = 4096;  // smaller tensors keep plain moments

struct DynamicMap {
  bool is_signed = false;
  int magnitude_bits = 8;             // 7 with a sign bit, 8 without
  std::array<float, 256> value{};     // value[code]; the signed map has -value[c] at code 0x80 | c
  std::array<double, 255> midpoint{};  // midpoint[c] halfway between magnitudes c and c + 1, exact

  template <class A>
  FT_HOST_DEVICE std::uint8_t encode(A x) const {
    const bool negative = is_signed && x < A(0);
    const double a = double(negative ? -x : x);
    int c = 0;  // the count of midpoints below a: a branch-free binary search
    for (int step = 1 << (magnitude_bits - 1); step > 0; step >>= 1)
      if (midpoint[std::size_t(c + step - 1)] < a) c += step;
    return std::uint8_t(negative && c > 0 ? c | 0x80 : c);
  }
  FT_HOST_DEVICE float decode(std::uint8_t code) const { return value[code]; }
};

inline DynamicMap make_dynamic_map(bool is_signed) {
  DynamicMap map;
  map.is_signed = is_signed;
  map.magnitude_bits = is_signed ? 7 : 8;
  const int codes = 1 << map.magnitude_bits;
  for (int c = 1; c < codes; ++c) {
    const int f = std::bit_width(unsigned(c)) - 1, decade = map.magnitude_bits - 1 - f;
    double scale = 10;  // 10^(decade + 1), exact
    for (int i = 0; i < decade; ++i) scale *= 10;
    const double fraction = 1 + 9 * double(c - (1 << f) + 1) / double(1 << f);
    map.value[std::size_t(c)] = float(fraction / scale);
  }
  if (is_signed)
    for (int c = 0; c < codes; ++c) map.value[std::size_t(0x80 | c)] = -map.value[std::size_t(c)];
  for (int c = 0; c + 1 < codes; ++c)
    map.midpoint[std::size_t(c)] = (double(map.value[std::size_t(c)]) + double(map.value[std::size_t(c + 1)])) / 2;
  return map;
}

// Both maps, signed then unsigned, in host memory. A device steps with its
// own copy of them (the optimizer keeps one in the device's memory).
inline const DynamicMap* host_dynamic_maps() {
  static const std::array<DynamicMap, 2> maps{make_dynamic_map(true), make_dynamic_map(false)};
  return maps.data();
}
inline const DynamicMap& signed_dynamic_map() { return host_dynamic_maps()[0]; }
inline const DynamicMap& unsigned_dynamic_map() { return host_dynamic_maps()[1]; }

// A tensor of n >= 4096 elements keeps codes (one byte per element) and a
// scale per block; a smaller one plain moments.
template <class S = float, memory::memory_space Space = memory::Host>
QuantizedMoments<S, Space> adamw8bit_state(index_t n) {
  if (n < adamw8bit_min_size) return QuantizedMoments<S, Space>::whole(std::size_t(n));
  return QuantizedMoments<S, Space>::with_codes(std::size_t(n), std::size_t((n + adamw8bit_block - 1) / adamw8bit_block));
}

// One block of 256 elements, a row its team shares: decode, AdamW, encode.
// The lanes walk the block's elements together (coalesced on a GPU, where
// the team is a warp), keep their own elements' moments, and take the
// block's new scales as the team's maxima; each element's arithmetic is the
// same on every device, so the codes are too.
template <class T, class G>
struct AdamW8bitBlockUpdate {
  using A = acc_t<T>;
  T* p;
  const G* g;
  index_t n;
  std::uint8_t *m_q, *v_q;
  float *m_absmax, *v_absmax;
  const DynamicMap *m_map, *v_map;
  A beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  A decay, lr_over_bias1, bias2_sqrt;  // decay = 1 - lr wd

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t block, const Team& team) const {
    static_assert(adamw8bit_block % Team::size == 0, "a team shares a block's elements evenly");
    constexpr index_t per_lane = adamw8bit_block / Team::size;
    const index_t begin = block * adamw8bit_block;
    const index_t count = n - begin < adamw8bit_block ? n - begin : adamw8bit_block;
    A m[per_lane], v[per_lane];
    A m_max = A(0), v_max = A(0);
    const A m_scale = A(m_absmax[block]), v_scale = A(v_absmax[block]);
    for (index_t j = 0; j < per_lane; ++j) {
      const index_t i = team.rank + j * Team::size;
      if (i >= count) break;
      const index_t k = begin + i;
      const A grad = A(g[k]);
      m[j] = std::fma(beta1, A(m_map->decode(m_q[k])) * m_scale, one_minus_beta1 * grad);
      v[j] = std::fma(beta2, A(v_map->decode(v_q[k])) * v_scale, one_minus_beta2 * grad * grad);
      const A denom = std::sqrt(v[j]) / bias2_sqrt + eps;
      p[k] = T(std::fma(A(p[k]), decay, -(lr_over_bias1 * m[j] / denom)));
      const A m_abs = m[j] < A(0) ? -m[j] : m[j];
      m_max = m_abs > m_max ? m_abs : m_max;
      v_max = v[j] > v_max ? v[j] : v_max;
    }
    // Every lane has read the old scales before the reductions meet.
    const float m_block_max = float(team.max(m_max)), v_block_max = float(team.max(v_max));
    if (team.rank == 0) {
      m_absmax[block] = m_block_max;
      v_absmax[block] = v_block_max;
    }
    const A m_div = A(m_block_max), v_div = A(v_block_max);
    for (index_t j = 0; j < per_lane; ++j) {
      const index_t i = team.rank + j * Team::size;
      if (i >= count) break;
      m_q[begin + i] = m_div > A(0) ? m_map->encode(m[j] / m_div) : std::uint8_t(0);
      const std::uint8_t v_code = v_div > A(0) ? v_map->encode(v[j] / v_div) : std::uint8_t(0);
      v_q[begin + i] = v_code == 0 && v[j] > A(0) ? std::uint8_t(1) : v_code;
    }
  }
};

// One step over a flat shard of n elements on a device, the state and
// `maps` (host_dynamic_maps()'s two, copied) in its memory; `step` counts
// from 1.
template <class Device, class T, class G, class S, class Space>
void adamw8bit_step(T* p, const G* g, index_t n, QuantizedMoments<S, Space>& s, const DynamicMap* maps,
                    const Hyperparameters& h, std::int64_t step) {
  static_assert(std::is_same_v<Space, typename Device::Memory>, "the state must live in the device's memory");
  using A = acc_t<T>;
  const auto size = std::size_t(n), blocks = std::size_t((n + adamw8bit_block - 1) / adamw8bit_block);
  const bool fits = n >= adamw8bit_min_size ? s.fits_codes(size, blocks) : s.fits_whole(size);
  if (!fits)
    throw Error("adamw8bit: the optimizer state does not fit a parameter of " + std::to_string(n) +
                " elements; make it with adamw8bit_state(" + std::to_string(n) + ")");
  if (!s.quantized()) {
    adamw_step<Device>(p, g, s.m.data(), s.v.data(), n, h, step);
    return;
  }
  const A lr = A(h.lr), beta1 = A(h.beta1), beta2 = A(h.beta2);
  const A bias1 = A(1) - std::pow(beta1, A(step)), bias2 = A(1) - std::pow(beta2, A(step));
  Device::parallel_rows(index_t(blocks), adamw8bit_block,
                        AdamW8bitBlockUpdate<T, G>{p, g, n, s.m_q.data(), s.v_q.data(), s.m_absmax.data(),
                                                  s.v_absmax.data(), maps, maps + 1, beta1, A(1) - beta1, beta2,
                                                  A(1) - beta2, A(h.eps), std::fma(-lr, A(h.weight_decay), A(1)),
                                                  lr / bias1, std::sqrt(bias2)});
}

// The same step on the CPU, with the host's maps.
template <class T, class G, class S>
void adamw8bit_step(T* p, const G* g, index_t n, QuantizedMoments<S>& s, const Hyperparameters& h, std::int64_t step) {
  adamw8bit_step<device::Cpu>(p, g, n, s, host_dynamic_maps(), h, step);
}

// The scheme QuantizedAdamWRuntime runs (quantized_adamw_runtime.hpp).
struct EightBitMoments {
  using Map = DynamicMap;
  static const Map* host_maps() { return host_dynamic_maps(); }
  static bool quantizes(index_t n) { return n >= adamw8bit_min_size; }
  static index_t code_bytes(index_t n) { return n; }
  static index_t blocks(index_t n) { return (n + adamw8bit_block - 1) / adamw8bit_block; }
  template <class S, class Space>
  static QuantizedMoments<S, Space> state(index_t n) {
    return adamw8bit_state<S, Space>(n);
  }
  template <class Device, class T, class S, class Space>
  static void step(T* p, const T* g, index_t n, QuantizedMoments<S, Space>& s, const Map* maps,
                   const Hyperparameters& h, std::int64_t step) {
    adamw8bit_step<Device>(p, g, n, s, maps, h, step);
  }
};

}  // namespace ft::optim
