#pragma once
// The shape of causal self-attention over a batch, and which keys a query
// sees; each device's kernels (device::Cpu's, device::Cuda's flash
// attention) and the row functors any device runs (nn/attention_rows.hpp)
// follow it.
//
// Input is the fused, already rotated qkv buffer [N, (H + 2G) * D]: query
// heads, then key heads, then value heads; query head h reads key/value head
// h / (H / G). Output is [N, H * D]; lse is [B, H, T].
//
// Which keys a query sees: query i sees key j when j <= i, j is in the same
// document (packed rows: `documents` holds a document id per token, equal ids
// are contiguous; null means one document per row), and, with a sliding
// window W > 0, i - j < W (Mistral). Because documents are contiguous, the
// keys a query sees are one range [first_key(i), i], and first_key never
// decreases along a row.
#include <cmath>

#include "ft/tensor/shape.hpp"

namespace ft::nn {

// The factor on q.k before the softmax: 1 / sqrt(D), unless the model
// states its own (`scale` > 0: Granite's attention_multiplier).
template <class A>
A softmax_scale(index_t D, double scale) {
  return scale > 0 ? A(scale) : A(1) / std::sqrt(A(D));
}

struct AttentionShape {
  index_t B, T, H, G, D;
  index_t window = 0;  // 0: no sliding window
  double scale = 0;    // 0: 1 / sqrt(D) (softmax_scale)
};

}  // namespace ft::nn
