#pragma once
// The two moments of one tensor under a block-wise quantized AdamW
// (adamw8bit.hpp, adamw4bit.hpp), as plain arrays in a memory space (a
// device's, or the host's), so a checkpoint saves and restores them byte for
// byte: a large tensor's codes and one f32 scale per block and moment, or a
// small tensor's moments kept whole.
#include <cstddef>
#include <cstdint>

#include "ft/tensor/array.hpp"

namespace ft::optim {

template <class S = float, memory::memory_space Space = memory::Host>
struct QuantizedMoments {
  memory::Array<std::uint8_t, Space> m_q, v_q;     // codes, packed as the scheme packs them
  memory::Array<float, Space> m_absmax, v_absmax;  // one scale per block
  memory::Array<S, Space> m, v;                    // the moments of a tensor kept whole

  // Zero-filled: a zero code and a zero scale decode to 0 in every scheme.
  static QuantizedMoments with_codes(std::size_t code_bytes, std::size_t blocks) {
    QuantizedMoments s;
    s.m_q = memory::Array<std::uint8_t, Space>(code_bytes);
    s.v_q = memory::Array<std::uint8_t, Space>(code_bytes);
    s.m_absmax = memory::Array<float, Space>(blocks);
    s.v_absmax = memory::Array<float, Space>(blocks);
    return s;
  }
  static QuantizedMoments whole(std::size_t n) {
    QuantizedMoments s;
    s.m = memory::Array<S, Space>(n);
    s.v = memory::Array<S, Space>(n);
    return s;
  }

  bool quantized() const { return !m_q.empty(); }
  bool fits_codes(std::size_t code_bytes, std::size_t blocks) const {
    return m_q.size() == code_bytes && v_q.size() == code_bytes && m_absmax.size() == blocks &&
           v_absmax.size() == blocks;
  }
  bool fits_whole(std::size_t n) const { return !quantized() && m.size() == n && v.size() == n; }
};

}  // namespace ft::optim
