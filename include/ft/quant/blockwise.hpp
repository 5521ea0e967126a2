#pragma once
// bitsandbytes' blockwise quantization, to the bit: a flat tensor is cut
// into blocks of `blocksize` values (the last one may be short); each block
// keeps its largest magnitude (absmax) as float32 and each value the index
// of the nearest code-book entry to value / absmax.
//
// Two quantizers, because bitsandbytes has two on the CPU and ft writes
// what each writes:
//   4-bit (NF4, FP4)  torch's reference kernel: x * (1 / absmax) (the short
//                     last block divides instead), clamped to [-1, 1], then
//                     the count of code midpoints strictly below it, so a
//                     value on a midpoint takes the lower code. Two codes a
//                     byte, the even element in the high nibble.
//   8-bit (dynamic)   the native kernel double quantization goes through: a
//                     table of 65536 bins over [-1, 1], each holding the
//                     code nearest its left edge, indexed by
//                     trunc(((clamp(x / absmax) + 1) * 0.5) * 65535 + 0.5).
// bitsandbytes' CUDA kernels decide by hard-coded thresholds and may differ
// from both in the last code of a tie; a file records codes, not which path
// made them, so every reader dequantizes it the same way.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/quant/code_books.hpp"

namespace ft::quant {

using count_t = std::int64_t;

inline count_t block_count(count_t n, count_t blocksize) { return (n + blocksize - 1) / blocksize; }

// The block sizes bitsandbytes' 4-bit quantization takes.
inline bool valid_4bit_blocksize(count_t b) {
  return b == 32 || b == 64 || b == 128 || b == 256 || b == 512 || b == 1024 || b == 2048 || b == 4096;
}

struct CodedBlocks {
  std::vector<std::uint8_t> codes;  // 4-bit: packed two a byte; 8-bit: one a byte
  std::vector<float> absmax;        // one a block
};

namespace detail {

inline void check_finite(std::span<const float> x) {
  for (float v : x)
    if (!std::isfinite(v)) throw Error("cannot quantize a tensor holding NaN or infinity");
}

// The 4-bit code book's midpoints in ascending order of value, and the code
// of each interval between them: NF4 is sorted already; FP4's order puts 0
// before -0, as a stable sort of its bit-pattern order does.
struct FourBitIntervals {
  std::array<float, 15> bounds;
  std::array<std::uint8_t, 16> code;
};

inline FourBitIntervals four_bit_intervals(FourBit type) {
  const auto& values = code_of(type);
  FourBitIntervals r;
  for (std::uint8_t i = 0; i < 16; ++i) r.code[i] = i;
  std::stable_sort(r.code.begin(), r.code.end(), [&](std::uint8_t a, std::uint8_t b) { return values[a] < values[b]; });
  for (std::size_t i = 0; i < 15; ++i) r.bounds[i] = (values[r.code[i]] + values[r.code[i + 1]]) / 2.0f;
  return r;
}

// The native 8-bit quantizer's table: bin i covers -1 + 2i / 65535.
inline constexpr int lut_size = 65536;

inline std::vector<std::uint8_t> dynamic_lut() {
  std::array<float, 255> midpoints;
  for (std::size_t i = 0; i < 255; ++i) midpoints[i] = 0.5f * (dynamic_code[i] + dynamic_code[i + 1]);
  std::vector<std::uint8_t> lut(lut_size);
  std::size_t code = 0;
  for (int i = 0; i < lut_size; ++i) {
    const float value = -1.0f + (2.0f * float(i)) / float(lut_size - 1);
    while (code < 255 && midpoints[code] < value) ++code;
    lut[std::size_t(i)] = std::uint8_t(code);
  }
  return lut;
}

}  // namespace detail

// x quantized to 4-bit codes, packed; an odd count pads one zero. Block
// sizes are even, so each block fills whole bytes and is quantized on its
// own, the blocks spread over the host's threads.
inline CodedBlocks quantize_4bit(std::span<const float> x, count_t blocksize, FourBit type) {
  detail::check_finite(x);
  const auto intervals = detail::four_bit_intervals(type);
  const count_t n = count_t(x.size()), full = n - n % blocksize;
  CodedBlocks out;
  out.absmax.assign(std::size_t(block_count(n, blocksize)), 0.0f);
  out.codes.assign(std::size_t((n + 1) / 2), 0);
  // The code of the interval holding s: the count of midpoints below it, so
  // a value on a midpoint takes the lower code.
  auto code_of_scaled = [&](float s) {
    s = std::clamp(s, -1.0f, 1.0f);
    std::size_t below = 0;
    for (float bound : intervals.bounds) below += bound < s;
    return intervals.code[below];
  };
  auto put = [&](count_t i, std::uint8_t code) {
    std::uint8_t& byte = out.codes[std::size_t(i / 2)];
    byte = std::uint8_t(i % 2 ? (byte | code) : (code << 4));
  };
  cpu::parallel_for(count_t(out.absmax.size()), [&](count_t k) {
    const count_t b = k * blocksize, end = std::min(n, b + blocksize);
    float absmax = 0.0f;
    for (count_t i = b; i < end; ++i) absmax = std::max(absmax, std::fabs(x[std::size_t(i)]));
    // The reference clamps a zero absmax to 1e-38 before using it; a short
    // last block also stores the clamped value.
    const float safe = std::max(absmax, 1e-38f);
    if (b < full) {
      out.absmax[std::size_t(k)] = absmax;
      const float scale = 1.0f / safe;
      for (count_t i = b; i < end; ++i) put(i, code_of_scaled(x[std::size_t(i)] * scale));
    } else {
      out.absmax[std::size_t(k)] = safe;
      for (count_t i = b; i < end; ++i) put(i, code_of_scaled(x[std::size_t(i)] / safe));
    }
  });
  if (n % 2) put(n, code_of_scaled(0.0f));
  return out;
}

namespace detail {
// The two code values of each packed byte (high nibble first), so a block
// dequantizes a byte at a time with one lookup.
inline const std::array<std::array<float, 2>, 256>& code_pairs(FourBit type) {
  static const auto make = [](FourBit t) {
    std::array<std::array<float, 2>, 256> pairs{};
    for (int byte = 0; byte < 256; ++byte) pairs[std::size_t(byte)] = {code_of(t)[byte >> 4], code_of(t)[byte & 0x0f]};
    return pairs;
  };
  static const std::array<std::array<float, 2>, 256> nf4 = make(FourBit::nf4), fp4 = make(FourBit::fp4);
  return type == FourBit::nf4 ? nf4 : fp4;
}
}  // namespace detail

// The float32 values bitsandbytes dequantizes elements [begin, begin +
// out.size()) to: code value times absmax, where absmax_of(b) is block b's.
template <class Absmax>
void dequantize_4bit_range(std::span<const std::uint8_t> packed, const Absmax& absmax_of, count_t blocksize,
                           FourBit type, count_t begin, std::span<float> out) {
  const auto& values = code_of(type);
  const auto& pairs = detail::code_pairs(type);
  float* o = out.data();
  const count_t end = begin + count_t(out.size());
  for (count_t i = begin; i < end;) {
    const count_t block = i / blocksize;
    const float absmax = absmax_of(block);
    const count_t stop = std::min(end, (block + 1) * blocksize);
    if (i % 2) *o++ = values[packed[std::size_t(i++ / 2)] & 0x0f] * absmax;  // a range that starts mid-byte
    for (; i + 2 <= stop; i += 2, o += 2) {
      const std::array<float, 2>& pair = pairs[packed[std::size_t(i / 2)]];
      o[0] = pair[0] * absmax;
      o[1] = pair[1] * absmax;
    }
    if (i < stop) *o++ = values[packed[std::size_t(i++ / 2)] >> 4] * absmax;  // one that ends mid-byte
  }
}

// x quantized to 8-bit codes of the dynamic map (double quantization's).
inline CodedBlocks quantize_8bit(std::span<const float> x, count_t blocksize) {
  detail::check_finite(x);
  static const std::vector<std::uint8_t> lut = detail::dynamic_lut();
  const count_t n = count_t(x.size());
  CodedBlocks out;
  out.codes.assign(std::size_t(n), 0);
  for (count_t b = 0; b < n; b += blocksize) {
    const count_t end = std::min(n, b + blocksize);
    float absmax = 0.0f;
    for (count_t i = b; i < end; ++i) absmax = std::max(absmax, std::fabs(x[std::size_t(i)]));
    out.absmax.push_back(absmax);
    if (absmax == 0.0f) continue;  // every code 0, as the native kernel writes
    const float scale = 1.0f / absmax;
    for (count_t i = b; i < end; ++i) {
      const float v = std::clamp(x[std::size_t(i)] * scale, -1.0f, 1.0f);
      float t = v + 1.0f;
      t = t * 0.5f;
      t = t * float(detail::lut_size - 1);
      t = t + 0.5f;
      out.codes[std::size_t(i)] = lut[std::size_t(t)];
    }
  }
  return out;
}

// torch.Tensor.mean() of a contiguous float32 tensor on the CPU, to the bit:
// its sum in torch's order (a cascade over 8-lane vectors in 4 interleaved
// rows, then the scalar tail and the lanes), over the count. This is the
// single-threaded order; torch splits a sum of more than 32768 values among
// its threads, so its own result for those depends on the thread count.
inline float torch_mean(std::span<const float> x) {
  constexpr int lanes = 8, rows = 4, levels = 4;
  using Vec = std::array<float, lanes>;
  auto ceil_log2 = [](count_t v) {
    count_t r = 0;
    while ((count_t(1) << r) < v) ++r;
    return std::max<count_t>(r, 1);
  };
  // One row_sum of `size` items, each a T, read by get(i).
  auto row_sum = [&]<class T>(count_t size, auto get, auto add) {
    const count_t per_row = size / rows;
    const count_t power = std::max<count_t>(4, ceil_log2(per_row) / levels), step = count_t(1) << power,
                  mask = step - 1;
    std::array<std::array<T, rows>, levels> acc{};
    count_t i = 0;
    for (; i + step <= per_row;) {
      for (count_t j = 0; j < step; ++j, ++i)
        for (int k = 0; k < rows; ++k) acc[0][std::size_t(k)] = add(acc[0][std::size_t(k)], get(i * rows + k));
      for (int j = 1; j < levels; ++j) {
        for (int k = 0; k < rows; ++k) {
          acc[std::size_t(j)][std::size_t(k)] = add(acc[std::size_t(j)][std::size_t(k)], acc[std::size_t(j - 1)][std::size_t(k)]);
          acc[std::size_t(j - 1)][std::size_t(k)] = T{};
        }
        if ((i & (mask << (j * power))) != 0) break;
      }
    }
    for (; i < per_row; ++i)
      for (int k = 0; k < rows; ++k) acc[0][std::size_t(k)] = add(acc[0][std::size_t(k)], get(i * rows + k));
    for (int j = 1; j < levels; ++j)
      for (int k = 0; k < rows; ++k) acc[0][std::size_t(k)] = add(acc[0][std::size_t(k)], acc[std::size_t(j)][std::size_t(k)]);
    T total = acc[0][0];
    for (count_t t = per_row * rows; t < size; ++t) total = add(total, get(t));
    for (int k = 1; k < rows; ++k) total = add(total, acc[0][std::size_t(k)]);
    return total;
  };
  const count_t n = count_t(x.size());
  auto add_float = [](float a, float b) { return a + b; };
  float sum = 0.0f;
  if (n < lanes) {
    sum = row_sum.template operator()<float>(n, [&](count_t i) { return x[std::size_t(i)]; }, add_float);
  } else {
    const count_t vectors = n / lanes;
    auto add_vec = [](Vec a, const Vec& b) {
      for (int l = 0; l < lanes; ++l) a[std::size_t(l)] += b[std::size_t(l)];
      return a;
    };
    const Vec lanes_sum = row_sum.template operator()<Vec>(
        vectors,
        [&](count_t v) {
          Vec r;
          std::copy_n(x.begin() + v * lanes, lanes, r.begin());
          return r;
        },
        add_vec);
    for (count_t i = vectors * lanes; i < n; ++i) sum += x[std::size_t(i)];
    for (float l : lanes_sum) sum += l;
  }
  return sum / float(n);
}

}  // namespace ft::quant
