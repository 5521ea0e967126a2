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
#include "ft/tensor/shape.hpp"

namespace ft::nn {

struct AttentionShape {
  index_t B, T, H, G, D;
  index_t window = 0;  // 0: no sliding window
};

}  // namespace ft::nn
