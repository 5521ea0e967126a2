#pragma once
// Attention of a sequence's new tokens over its key/value cache: the new
// rows' keys and values are already in the cache (at their positions), and
// the query at position p sees the cached keys [first(p), p], where first
// is 0, or p - W + 1 with a sliding window of W (Mistral). Scores, softmax
// and the weighted sum are accumulated in acc_t<T>, as training's attention
// (nn/attention.hpp) does; one (query head) per task.
#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::infer {

struct CachedAttentionShape {
  index_t H, G, D;
  index_t window = 0;  // 0: no sliding window
};

// out [n, H D] for the n new rows of one sequence, whose rotated q, k, v are
// qkv [n, (H + 2G) D] at positions[0..n); keys, values [>= positions[n-1] + 1, G D].
template <class T>
void cached_attention(T* out, const T* qkv, const std::int32_t* positions, index_t n, const T* keys,
                      const T* values, const CachedAttentionShape& s) {
  using A = acc_t<T>;
  using Matrix = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t stride = (s.H + 2 * s.G) * s.D, width = s.G * s.D, group = s.H / s.G;
  const A scale = A(1) / std::sqrt(A(s.D));
  const index_t last = positions[n - 1];
  const index_t lowest = s.window > 0 ? std::max<index_t>(0, positions[0] - s.window + 1) : 0;
  const index_t keys_seen = last + 1 - lowest;
  cpu::parallel_for(s.H, [&](index_t h) {
    const index_t g = h / group;
    Matrix Q(n, s.D), K(keys_seen, s.D), V(keys_seen, s.D);
    for (index_t r = 0; r < n; ++r)
      for (index_t d = 0; d < s.D; ++d) Q(r, d) = A(qkv[r * stride + h * s.D + d]) * scale;
    for (index_t j = 0; j < keys_seen; ++j)
      for (index_t d = 0; d < s.D; ++d) {
        K(j, d) = A(keys[(lowest + j) * width + g * s.D + d]);
        V(j, d) = A(values[(lowest + j) * width + g * s.D + d]);
      }
    Matrix S = Q * K.transpose();
    for (index_t r = 0; r < n; ++r) {
      const index_t p = positions[r];
      const index_t first = s.window > 0 ? std::max<index_t>(0, p - s.window + 1) : 0;
      A top = -std::numeric_limits<A>::infinity();
      for (index_t j = 0; j < keys_seen; ++j) {
        const index_t k = lowest + j;
        if (k < first || k > p) S(r, j) = -std::numeric_limits<A>::infinity();
        top = std::max(top, S(r, j));
      }
      A sum = 0;
      for (index_t j = 0; j < keys_seen; ++j) sum += S(r, j) = std::exp(S(r, j) - top);
      S.row(r) /= sum;
    }
    const Matrix O = S * V;
    for (index_t r = 0; r < n; ++r)
      for (index_t d = 0; d < s.D; ++d) out[r * s.H * s.D + h * s.D + d] = T(O(r, d));
  });
}

}  // namespace ft::infer
