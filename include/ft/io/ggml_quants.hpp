#pragma once
// ggml's tensor types and the block math that turns quantised blocks back into
// floats, for the GGUF reader (gguf.hpp).
//
// A quantised ggml tensor is a sequence of blocks along each row; a block packs
// `block_size` consecutive elements of one row into `block_bytes` bytes, and a
// row's length (ne[0]) is always a whole number of blocks. All scales are IEEE
// f16 (little-endian); "q" below is the small integer stored per element.
//
//   Q8_0  32 elements, 34 bytes:  f16 d, i8 q[32]                    x = d * q
//   Q4_0  32 elements, 18 bytes:  f16 d, u8 qs[16]                   x = d * (q - 8)
//   Q4_1  32 elements, 20 bytes:  f16 d, f16 m, u8 qs[16]            x = d * q + m
//         (Q4_0/Q4_1: element j < 16 is the low nibble of qs[j], element j + 16 the high nibble)
//   Q4_K  256 elements, 144 bytes: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//         8 sub-blocks of 32; sub-block s has a 6-bit scale sc[s] and min m[s] packed in
//         `scales` (see scale_min_k4); x = (d * sc[s]) * q - (dmin * m[s]); q is 4 bits:
//         sub-blocks 2p and 2p+1 share qs[32p .. 32p+32), low nibble then high nibble.
//   Q5_K  256 elements, 176 bytes: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//         as Q4_K, plus a fifth bit: bit s of qh[l] is the high bit of element l of sub-block s.
//   Q6_K  256 elements, 210 bytes: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
//         16 sub-blocks of 16, x = (d * scales[e / 16]) * (q - 32), q = 4 low bits from ql and
//         2 high bits from qh; the 256 elements are two halves of 128 (see dequantize_q6_k).
//
// Why it is built this way: each block type is one small function over one block,
// written as ggml writes it, so that each can be read against the layout above and
// checked alone. The order of float operations is ggml's (and the gguf Python
// package's): every product of an f16 scale and a small integer is exact in
// float, so the results are bitwise those of the reference whether or not the
// compiler fuses a multiply and an add.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "ft/core/half.hpp"

namespace ft::io {

// ggml's type ids, as GGUF stores them (ggml.h, enum ggml_type).
enum class GgmlType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

struct GgmlTypeInfo {
  std::string_view name;
  std::int64_t block_size;   // elements per block (1 for plain types)
  std::int64_t block_bytes;  // bytes per block
};

// nullptr for an id that ggml does not define (ids 4, 5 and 31-33 were retired).
inline const GgmlTypeInfo* ggml_type_info(std::uint32_t id) {
  struct Entry {
    std::uint32_t id;
    GgmlTypeInfo info;
  };
  static constexpr Entry table[] = {
      {0, {"F32", 1, 4}},          {1, {"F16", 1, 2}},          {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},       {6, {"Q5_0", 32, 22}},       {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},       {9, {"Q8_1", 32, 40}},       {10, {"Q2_K", 256, 84}},
      {11, {"Q3_K", 256, 110}},    {12, {"Q4_K", 256, 144}},    {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}},    {15, {"Q8_K", 256, 292}},    {16, {"IQ2_XXS", 256, 66}},
      {17, {"IQ2_XS", 256, 74}},   {18, {"IQ3_XXS", 256, 98}},  {19, {"IQ1_S", 256, 50}},
      {20, {"IQ4_NL", 32, 18}},    {21, {"IQ3_S", 256, 110}},   {22, {"IQ2_S", 256, 82}},
      {23, {"IQ4_XS", 256, 136}},  {24, {"I8", 1, 1}},          {25, {"I16", 1, 2}},
      {26, {"I32", 1, 4}},         {27, {"I64", 1, 8}},         {28, {"F64", 1, 8}},
      {29, {"IQ1_M", 256, 56}},    {30, {"BF16", 1, 2}},        {34, {"TQ1_0", 256, 54}},
      {35, {"TQ2_0", 256, 66}},    {39, {"MXFP4", 32, 17}},     {40, {"NVFP4", 64, 36}},
      {41, {"Q1_0", 128, 18}},
  };
  for (const Entry& e : table)
    if (e.id == id) return &e.info;
  return nullptr;
}

namespace ggml {

inline float load_f16(const std::byte* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return float(f16::from_bits(bits));
}

inline std::uint8_t byte_at(const std::byte* p, int i) { return std::to_integer<std::uint8_t>(p[i]); }

inline void dequantize_q8_0(const std::byte* block, float* out) {
  const float d = load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = float(static_cast<std::int8_t>(byte_at(block + 2, j))) * d;
}

inline void dequantize_q4_0(const std::byte* block, float* out) {
  const float d = load_f16(block);
  const std::byte* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = float(int(byte_at(qs, j) & 0x0f) - 8) * d;
    out[j + 16] = float(int(byte_at(qs, j) >> 4) - 8) * d;
  }
}

inline void dequantize_q4_1(const std::byte* block, float* out) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const std::byte* qs = block + 4;
  for (int j = 0; j < 16; ++j) {
    out[j] = float(byte_at(qs, j) & 0x0f) * d + m;
    out[j + 16] = float(byte_at(qs, j) >> 4) * d + m;
  }
}

// The 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes:
// bytes 0-3 hold sc[0..3] in their low 6 bits, bytes 4-7 m[0..3]; sub-blocks 4-7
// take their low 4 bits from bytes 8-11 (scale low nibble, min high nibble) and
// their top 2 bits from the spare top bits of bytes 0-3 (scale) and 4-7 (min).
inline void scale_min_k4(int s, const std::byte* scales, std::uint8_t& sc, std::uint8_t& m) {
  if (s < 4) {
    sc = byte_at(scales, s) & 63;
    m = byte_at(scales, s + 4) & 63;
  } else {
    sc = std::uint8_t((byte_at(scales, s + 4) & 0x0f) | ((byte_at(scales, s - 4) >> 6) << 4));
    m = std::uint8_t((byte_at(scales, s + 4) >> 4) | ((byte_at(scales, s) >> 6) << 4));
  }
}

// Q4_K and Q5_K differ only in Q5_K's fifth bit, from qh (nullptr for Q4_K).
inline void dequantize_k4_k5(const std::byte* scales, const std::byte* qh, const std::byte* qs, float d, float dmin,
                             float* out) {
  for (int s = 0; s < 8; ++s) {
    std::uint8_t sc, m;
    scale_min_k4(s, scales, sc, m);
    const float scale = d * float(sc);
    const float min = dmin * float(m);
    const std::byte* q = qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (byte_at(q, l) >> shift) & 0x0f;
      if (qh) v |= ((byte_at(qh, l) >> s) & 1) << 4;
      out[32 * s + l] = scale * float(v) - min;
    }
  }
}

inline void dequantize_q4_k(const std::byte* block, float* out) {
  dequantize_k4_k5(block + 4, nullptr, block + 16, load_f16(block), load_f16(block + 2), out);
}

inline void dequantize_q5_k(const std::byte* block, float* out) {
  dequantize_k4_k5(block + 4, block + 16, block + 48, load_f16(block), load_f16(block + 2), out);
}

// Each half h of 128 elements uses ql[64h .. 64h+64) and qh[32h .. 32h+32):
// element r of the half takes the nibble (r / 64) of ql[64h + r % 64] and the
// bit pair (r / 32) of qh[32h + r % 32].
inline void dequantize_q6_k(const std::byte* block, float* out) {
  const std::byte* ql = block;
  const std::byte* qh = block + 128;
  const std::byte* scales = block + 192;
  const float d = load_f16(block + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128;
    const int low = (byte_at(ql, 64 * h + r % 64) >> (4 * (r / 64))) & 0x0f;
    const int high = (byte_at(qh, 32 * h + r % 32) >> (2 * (r / 32))) & 3;
    const float scale = d * float(static_cast<std::int8_t>(byte_at(scales, e / 16)));
    out[e] = scale * float((low | (high << 4)) - 32);
  }
}

}  // namespace ggml

inline constexpr std::string_view dequantizable_types = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K";

inline bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

// n elements (a whole number of blocks) from src into out. The caller has checked
// can_dequantize(type) and that src holds n / block_size blocks.
inline void dequantize_row(GgmlType type, const std::byte* src, float* out, std::int64_t n) {
  auto blocks = [&](auto block_fn, std::int64_t block_size, std::int64_t block_bytes) {
    for (std::int64_t b = 0; b < n / block_size; ++b) block_fn(src + b * block_bytes, out + b * block_size);
  };
  switch (type) {
    case GgmlType::F32:
      std::memcpy(out, src, std::size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (std::int64_t i = 0; i < n; ++i) out[i] = ggml::load_f16(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = float(bf16::from_bits(bits));
      }
      return;
    case GgmlType::Q8_0: return blocks(ggml::dequantize_q8_0, 32, 34);
    case GgmlType::Q4_0: return blocks(ggml::dequantize_q4_0, 32, 18);
    case GgmlType::Q4_1: return blocks(ggml::dequantize_q4_1, 32, 20);
    case GgmlType::Q4_K: return blocks(ggml::dequantize_q4_k, 256, 144);
    case GgmlType::Q5_K: return blocks(ggml::dequantize_q5_k, 256, 176);
    case GgmlType::Q6_K: return blocks(ggml::dequantize_q6_k, 256, 210);
    default: return;
  }
}

}  // namespace ft::io
