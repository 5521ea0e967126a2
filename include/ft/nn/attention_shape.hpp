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
//
// With ALiBi (Bloom) the score of query i and key j gains slope(h) * (j - i),
// a penalty linear in the distance. HF adds slope(h) * j; the two differ by
// a constant per query row, which the softmax removes, and j - i keeps packed
// documents equal to the same documents apart.
//
// With soft-capping (Gemma 2) the scaled q.k becomes cap tanh(q.k / cap)
// before anything is added, as HF's eager attention computes it.
#include <cmath>

#include "ft/core/host_device.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// The factor on q.k before the softmax: 1 / sqrt(D), unless the model
// states its own (`scale` > 0: Granite's attention_multiplier).
template <class A>
A softmax_scale(index_t D, double scale) {
  return scale > 0 ? A(scale) : A(1) / std::sqrt(A(D));
}

// ALiBi's slope for query head h of H, as HF's _get_alibi_slopes gives it:
// base^k for k = 1..P with base = 2^(-8/P), P the largest power of two <= H,
// then, for the heads past P, base'^k for odd k with base' = 2^(-4/P). Both
// in float as HF computes them: the base rounded, then its power (equal to
// torch's on the CPU for every H below 32, within one unit in the last
// place above).
FT_HOST_DEVICE inline float alibi_slope(index_t h, index_t H) {
  index_t P = 1;
  while (2 * P <= H) P *= 2;
  const float base = float(std::exp2((h < P ? -8.0 : -4.0) / double(P)));
  return float(std::pow(double(base), double(h < P ? h + 1 : 2 * (h - P) + 1)));
}

// What becomes of query head h's scaled q.k before the softmax: soft-capped
// by `cap` (0: not), then ALiBi's slope times the key's distance j - i added
// (slope 0: no ALiBi). Every attention path scores through this.
template <class A>
struct ScoreTerms {
  A slope = 0, cap = 0;

  FT_HOST_DEVICE A operator()(A scaled, index_t distance) const {
    return (cap > 0 ? cap * std::tanh(scaled / cap) : scaled) + slope * A(distance);
  }
  // d score / d scaled q.k: 1 - tanh^2 under a cap.
  FT_HOST_DEVICE A gradient(A scaled) const {
    if (!(cap > 0)) return A(1);
    const A t = std::tanh(scaled / cap);
    return A(1) - t * t;
  }
};

template <class A>
FT_HOST_DEVICE ScoreTerms<A> score_terms(bool alibi, double softcap, index_t h, index_t H) {
  return {alibi ? A(alibi_slope(h, H)) : A(0), A(softcap)};
}

struct AttentionShape {
  index_t B, T, H, G, D;
  index_t window = 0;   // 0: no sliding window
  double scale = 0;     // 0: 1 / sqrt(D) (softmax_scale)
  bool alibi = false;   // scores gain alibi_slope(h) * (j - i)
  double softcap = 0;   // > 0: scores are soft-capped at it (ScoreTerms)
};

}  // namespace ft::nn
