#pragma once
// AdamW with both moments stored in 4 bits, block-wise, as torchao's
// AdamW4bit keeps them (Li et al. 2023, "Memory efficient optimizers with
// 4-bit states"), so that a run with ft's adamw4bit steps exactly as
// torchao's does. A tensor of at least 4096 elements whose count is a whole
// number of blocks of 128 keeps, per block and moment, one f32 scale (the
// block's largest magnitude, at least 1e-12) and per element a 4-bit code,
// two to a byte, the first element in the high nibble:
//
//   m = signed_map[code] * m_scale[block]      (v likewise, unsigned_map)
//
// The signed map is torchao's 16-value dynamic map (three exponent bits);
// the unsigned map is linear without zero, 1/16 .. 1, so a second moment
// never decodes to 0 (a first moment over a zero second moment would step by
// lr m / eps). Encoding follows torchao's search: the largest code whose
// value is at most x (code 0 below the map), then one up when x lies at
// least halfway to the next value.
//
// Every other tensor keeps plain moments (f32, or bf16 in a run that keeps
// everything in bf16, as torchao keeps them in the parameter's dtype).
//
// The step is torchao's single_param_adam in float32, operation by
// operation as torch's kernels run it: decay the parameter by lr wd, lerp
// each moment towards the gradient (its square) with weight 1 - beta (an
// FMA, as torch's vectorised lerp), update with the moments before they are
// encoded again. Products that torch rounds before a sum go through
// rounded(), so the compiler cannot fuse them into an FMA torch does not
// make; the fixtures (tools/make_adamw4bit_fixtures.py) hold torchao's codes,
// scales and moments, which the tests compare bit for bit. Parameters agree
// to the last bit or two: torch's CPU sqrt is MKL's vector math, which is not
// correctly rounded for about one element in 200; ft's is IEEE's.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/core/rounded.hpp"
#include "ft/device/cpu.hpp"
#include "ft/optim/quantized_moments.hpp"
#include "ft/optim/update.hpp"
#include "ft/tensor/array.hpp"

namespace ft::optim {

inline constexpr index_t adamw4bit_block = 128;      // elements per scale
inline constexpr index_t adamw4bit_min_size = 4096;  // smaller tensors keep plain moments

// torchao quantizes a tensor's moments when they fill whole blocks.
inline bool adamw4bit_quantizes(index_t n) { return n >= adamw4bit_min_size && n % adamw4bit_block == 0; }


// One moment's 16 values, ascending.
struct FourBitMap {
  std::array<float, 16> value{};

  FT_HOST_DEVICE std::uint8_t encode(float x) const {
    int c = x >= value[8] ? 8 : 0;
    c += x >= value[std::size_t(c + 4)] ? 4 : 0;
    c += x >= value[std::size_t(c + 2)] ? 2 : 0;
    c += x >= value[std::size_t(c + 1)] ? 1 : 0;
    const int up = c + 1 < 15 ? c + 1 : 15;
    const float down = value[std::size_t(c)], next = value[std::size_t(up)];
    return std::uint8_t(x - down >= (next - down) * 0.5f ? up : c);
  }
  FT_HOST_DEVICE float decode(std::uint8_t code) const { return value[code]; }
};

// torchao's maps: create_dynamic_map(signed=True, max_exponent_bits=3,
// total_bits=4) in float32, and linspace(0, 1, 17)[1:].
inline const FourBitMap* host_four_bit_maps() {
  static const std::array<FourBitMap, 2> maps = [] {
    std::array<FourBitMap, 2> m;
    m[0].value = {-0x1.c66666p-1f, -0x1.533334p-1f, -0x1.cp-2f,     -0x1.b33332p-3f, -0x1.3d70a4p-4f, -0x1.0a3d72p-5f,
                  -0x1.6872bp-8f,  0.0f,            0x1.6872bp-8f,  0x1.0a3d72p-5f,  0x1.3d70a4p-4f,  0x1.b33332p-3f,
                  0x1.cp-2f,       0x1.533334p-1f,  0x1.c66666p-1f, 1.0f};
    for (int c = 0; c < 16; ++c) m[1].value[std::size_t(c)] = float(c + 1) / 16.0f;
    return m;
  }();
  return maps.data();
}

template <class S = float, memory::memory_space Space = memory::Host>
QuantizedMoments<S, Space> adamw4bit_state(index_t n) {
  if (!adamw4bit_quantizes(n)) return QuantizedMoments<S, Space>::whole(std::size_t(n));
  return QuantizedMoments<S, Space>::with_codes(std::size_t(n / 2), std::size_t(n / adamw4bit_block));
}

// torchao's step of one element, in float32; m and v come in decoded and
// leave updated (before they are encoded).
struct TorchaoAdamW {
  float lr, lr_decay;              // lr, and lr * weight_decay
  float m_weight, v_weight;        // 1 - beta1, 1 - beta2
  float bias1, bias2_sqrt, eps;    // 1 - beta1^t, sqrt(1 - beta2^t)

  FT_HOST_DEVICE float operator()(float p, float g, float& m, float& v) const {
    p = p - rounded(lr_decay * p);
    m = std::fma(m_weight, g - m, m);
    v = std::fma(v_weight, rounded(g * g) - v, v);
    const float denom = std::sqrt(v) / bias2_sqrt + eps;
    return p - lr * (m / bias1) / denom;
  }
};

inline TorchaoAdamW torchao_adamw(const Hyperparameters& h, std::int64_t step) {
  const float lr = float(h.lr), t = float(step);
  return {lr,
          lr * float(h.weight_decay),
          float(1 - h.beta1),
          float(1 - h.beta2),
          1.0f - std::pow(float(h.beta1), t),
          std::sqrt(1.0f - std::pow(float(h.beta2), t)),
          float(h.eps)};
}

// One block of 128 elements, a row its team shares: decode, step, encode.
// Each lane takes whole bytes (two elements), so no two lanes write one;
// the lanes read the block's old scales before the team's maxima meet.
template <class T, class G>
struct AdamW4bitBlockUpdate {
  T* p;
  const G* g;
  std::uint8_t *m_q, *v_q;
  float *m_scale, *v_scale;
  const FourBitMap *m_map, *v_map;
  TorchaoAdamW update;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t block, const Team& team) const {
    constexpr index_t pairs = adamw4bit_block / 2;
    constexpr index_t per_lane = (pairs + Team::size - 1) / Team::size;  // a team wider than the block idles some lanes
    const index_t first_byte = block * pairs;
    float m[2 * per_lane], v[2 * per_lane];
    float m_max = 0.0f, v_max = 0.0f;
    const float m_old = m_scale[block], v_old = v_scale[block];
    for (index_t j = 0; j < per_lane && team.rank + j * Team::size < pairs; ++j) {
      const index_t byte = first_byte + team.rank + j * Team::size;
      const std::uint8_t m_codes = m_q[byte], v_codes = v_q[byte];
      for (int half = 0; half < 2; ++half) {
        const index_t k = 2 * byte + half, e = 2 * j + half;
        const int shift = half == 0 ? 4 : 0;
        m[e] = m_map->decode(std::uint8_t((m_codes >> shift) & 15)) * m_old;
        v[e] = v_map->decode(std::uint8_t((v_codes >> shift) & 15)) * v_old;
        p[k] = T(update(float(p[k]), float(g[k]), m[e], v[e]));
        const float m_abs = std::fabs(m[e]);
        m_max = m_abs > m_max ? m_abs : m_max;
        v_max = v[e] > v_max ? v[e] : v_max;
      }
    }
    // Every lane has read the old scales before the reductions meet.
    float m_new = team.max(m_max), v_new = team.max(v_max);
    m_new = m_new > 1e-12f ? m_new : 1e-12f;
    v_new = v_new > 1e-12f ? v_new : 1e-12f;
    if (team.rank == 0) {
      m_scale[block] = m_new;
      v_scale[block] = v_new;
    }
    for (index_t j = 0; j < per_lane && team.rank + j * Team::size < pairs; ++j) {
      const index_t byte = first_byte + team.rank + j * Team::size;
      m_q[byte] = std::uint8_t(m_map->encode(m[2 * j] / m_new) << 4 | m_map->encode(m[2 * j + 1] / m_new));
      v_q[byte] = std::uint8_t(v_map->encode(v[2 * j] / v_new) << 4 | v_map->encode(v[2 * j + 1] / v_new));
    }
  }
};

// The same step with plain moments.
template <class T, class G, class S>
struct PlainTorchaoAdamWUpdate {
  T* p;
  const G* g;
  S *m, *v;
  TorchaoAdamW update;

  FT_HOST_DEVICE void operator()(index_t i) const {
    float m_i = float(m[i]), v_i = float(v[i]);
    p[i] = T(update(float(p[i]), float(g[i]), m_i, v_i));
    m[i] = S(m_i);
    v[i] = S(v_i);
  }
};

// One step over a flat shard of n elements on a device, the state and
// `maps` (host_four_bit_maps()'s two, copied) in its memory; `step` counts
// from 1.
template <class Device, class T, class G, class S, class Space>
void adamw4bit_step(T* p, const G* g, index_t n, QuantizedMoments<S, Space>& s, const FourBitMap* maps,
                    const Hyperparameters& h, std::int64_t step) {
  static_assert(std::is_same_v<Space, typename Device::Memory>, "the state must live in the device's memory");
  const bool fits = adamw4bit_quantizes(n) ? s.fits_codes(std::size_t(n / 2), std::size_t(n / adamw4bit_block))
                                           : s.fits_whole(std::size_t(n));
  if (!fits)
    throw Error("adamw4bit: the optimizer state does not fit a parameter of " + std::to_string(n) +
                " elements; make it with adamw4bit_state(" + std::to_string(n) + ")");
  const TorchaoAdamW update = torchao_adamw(h, step);
  if (!s.quantized()) {
    Device::parallel_for(n, PlainTorchaoAdamWUpdate<T, G, S>{p, g, s.m.data(), s.v.data(), update});
    return;
  }
  Device::parallel_rows(n / adamw4bit_block, adamw4bit_block / 2,
                        AdamW4bitBlockUpdate<T, G>{p, g, s.m_q.data(), s.v_q.data(), s.m_absmax.data(),
                                                   s.v_absmax.data(), maps, maps + 1, update});
}

// The same step on the CPU, with the host's maps.
template <class T, class G, class S>
void adamw4bit_step(T* p, const G* g, index_t n, QuantizedMoments<S>& s, const Hyperparameters& h, std::int64_t step) {
  adamw4bit_step<device::Cpu>(p, g, n, s, host_four_bit_maps(), h, step);
}

// The scheme QuantizedAdamWRuntime runs (quantized_adamw_runtime.hpp).
struct FourBitMoments {
  using Map = FourBitMap;
  static const Map* host_maps() { return host_four_bit_maps(); }
  static bool quantizes(index_t n) { return adamw4bit_quantizes(n); }
  static index_t code_bytes(index_t n) { return n / 2; }
  static index_t blocks(index_t n) { return n / adamw4bit_block; }
  template <class S, class Space>
  static QuantizedMoments<S, Space> state(index_t n) {
    return adamw4bit_state<S, Space>(n);
  }
  template <class Device, class T, class S, class Space>
  static void step(T* p, const T* g, index_t n, QuantizedMoments<S, Space>& s, const Map* maps,
                   const Hyperparameters& h, std::int64_t step) {
    adamw4bit_step<Device>(p, g, n, s, maps, h, step);
  }
};

}  // namespace ft::optim
