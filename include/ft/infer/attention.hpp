#pragma once
// Attention of each sequence's new tokens over its key/value cache: the new
// rows' keys and values are already in the cache (at their positions), and
// the query at position p sees the cached keys [first(p), p], where first
// is 0, or p - W + 1 with a sliding window of W (Mistral). Scores, softmax
// and the weighted sum are accumulated in acc_t<T>, as training's attention
// (device/cpu/attention.hpp) does.
//
// One task per (sequence, key/value head): the query heads that share a
// key/value head are stacked into one product, so the cache is read once
// per group rather than once per query head, and in place when it already
// holds acc_t<T>. A sequence's result depends on its own rows and cache
// only, never on the other sequences of the step.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include <Eigen/Core>

#include "ft/core/numeric.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/nn/attention_shape.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::infer {

struct CachedAttentionShape {
  index_t H, G, D;
  index_t window = 0;  // 0: no sliding window
  double scale = 0;    // 0: 1 / sqrt(D) (nn::softmax_scale)
  bool alibi = false;  // scores gain nn::alibi_slope(h) * (key - p) (nn/attention_shape.hpp)
  double softcap = 0;  // > 0: scores are soft-capped at it (nn::ScoreTerms)
};

// One sequence's part of a step: its n new rows' rotated q, k, v are
// qkv [n, (H + 2G) D] at positions[0..n); keys, values [>= positions[n-1] + 1, G D];
// the result goes to out [n, H D].
template <class T>
struct CachedSequence {
  T* out;
  const T* qkv;
  const std::int32_t* positions;
  index_t n;
  const T* keys;
  const T* values;
};

template <class T>
void cached_attention(std::span<const CachedSequence<T>> sequences, const CachedAttentionShape& s) {
  using A = acc_t<T>;
  using Matrix = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CacheRows = Eigen::Map<const Matrix, 0, Eigen::OuterStride<>>;
  const index_t stride = (s.H + 2 * s.G) * s.D, width = s.G * s.D, group = s.H / s.G;
  const A scale = nn::softmax_scale<A>(s.D, s.scale);
  cpu::parallel_for(index_t(sequences.size()) * s.G, [&](index_t task) {
    const CachedSequence<T>& q = sequences[std::size_t(task / s.G)];
    const index_t g = task % s.G, n = q.n;
    const index_t last = q.positions[n - 1];
    const index_t lowest = s.window > 0 ? std::max<index_t>(0, q.positions[0] - s.window + 1) : 0;
    const index_t keys_seen = last + 1 - lowest;
    // Row j * n + r: query head g * group + j at new row r.
    Matrix Q(group * n, s.D);
    for (index_t j = 0; j < group; ++j)
      for (index_t r = 0; r < n; ++r)
        for (index_t d = 0; d < s.D; ++d)
          Q(j * n + r, d) = A(q.qkv[r * stride + (g * group + j) * s.D + d]) * scale;
    // A decode step has a few query rows: products coefficient by
    // coefficient skip the packing a blocked product spends on them. Which
    // way depends on this sequence's rows alone.
    const bool few_rows = group * n <= 16;
    auto product = [&](const auto& K, const auto& V) {
      Matrix S = few_rows ? Matrix(Q.lazyProduct(K.transpose())) : Matrix(Q * K.transpose());
      for (index_t row = 0; row < group * n; ++row) {
        const index_t p = q.positions[row % n];
        const index_t first = s.window > 0 ? std::max<index_t>(0, p - s.window + 1) : 0;
        if (s.alibi || s.softcap > 0) {
          const nn::ScoreTerms<A> terms = nn::score_terms<A>(s.alibi, s.softcap, g * group + row / n, s.H);
          for (index_t j = 0; j < keys_seen; ++j) S(row, j) = terms(S(row, j), lowest + j - p);
        }
        A top = -std::numeric_limits<A>::infinity();
        for (index_t j = 0; j < keys_seen; ++j) {
          const index_t k = lowest + j;
          if (k < first || k > p) S(row, j) = -std::numeric_limits<A>::infinity();
          top = std::max(top, S(row, j));
        }
        A sum = 0;
        for (index_t j = 0; j < keys_seen; ++j) sum += S(row, j) = std::exp(S(row, j) - top);
        S.row(row) /= sum;
      }
      const Matrix O = few_rows ? Matrix(S.lazyProduct(V)) : Matrix(S * V);
      for (index_t j = 0; j < group; ++j)
        for (index_t r = 0; r < n; ++r)
          for (index_t d = 0; d < s.D; ++d) q.out[r * s.H * s.D + (g * group + j) * s.D + d] = T(O(j * n + r, d));
    };
    const index_t offset = lowest * width + g * s.D;
    if constexpr (std::is_same_v<A, T>) {
      product(CacheRows(q.keys + offset, keys_seen, s.D, Eigen::OuterStride<>(width)),
              CacheRows(q.values + offset, keys_seen, s.D, Eigen::OuterStride<>(width)));
    } else {
      Matrix K(keys_seen, s.D), V(keys_seen, s.D);
      for (index_t j = 0; j < keys_seen; ++j)
        for (index_t d = 0; d < s.D; ++d) {
          K(j, d) = A(q.keys[offset + j * width + d]);
          V(j, d) = A(q.values[offset + j * width + d]);
        }
      product(K, V);
    }
  });
}

}  // namespace ft::infer
