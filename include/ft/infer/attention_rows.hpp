#pragma once
// The key/value cache's two steps written as row functors, so any device's
// launcher runs them: appending a step's new keys and values to each
// sequence's cache, and the attention of each new row over its cache. The
// CPU attends with its own products (attention.hpp), which stack the query
// heads of a group; another device runs these, and a test holds the two
// together on the CPU (the CPU standing in for a device).
//
// A step's rows come from several sequences, each with its own cache: row r
// carries where its sequence's cache is (CacheRow) and its position, which
// is also the cache position its key and value go to.
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "ft/core/error.hpp"
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/infer/attention.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::infer {

namespace cache_rows {

constexpr index_t max_head_dim = 256;

// Where one row's sequence keeps its keys and values: layer l's [capacity, G D]
// start at keys + l * layer_stride (values likewise).
template <class T>
struct CacheRow {
  T* keys;
  T* values;
  index_t layer_stride;
};

// Row r: its key and value heads (qkv [N, (H + 2G) D]) to its cache at its position.
template <class T>
struct Append {
  const T* qkv;
  const CacheRow<T>* rows;
  const std::int32_t* positions;
  index_t layer, query_width, width;  // H D, G D

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    const T* from = qkv + r * (query_width + 2 * width) + query_width;
    const CacheRow<T>& at = rows[r];
    const index_t offset = layer * at.layer_stride + index_t(positions[r]) * width;
    for (index_t e = team.rank; e < 2 * width; e += team.size) {
      if (e < width) at.keys[offset + e] = from[e];
      else at.values[offset + e - width] = from[e];
    }
  }
};

// How a step's keys are shared among teams. A decode step has one new row
// per sequence, so (row, head) teams are too few to fill a GPU, and each
// would walk its whole cache alone, one key after another: its time grows
// with the cache. So the keys of a row are cut into `splits` chunks of
// `chunk` keys walked side by side (flash-decoding), and a second pass
// combines the chunks' softmax sums. A prefill's many rows fill the device
// as they are, in one split.
struct KeySplit {
  index_t splits = 1;
  index_t chunk = 0;  // keys per split; with one split, every key of the row
};

// Enough teams to fill a large GPU (about a thousand warps), in chunks of no
// fewer than 16 keys; `longest` is the most keys a row of the step sees.
inline KeySplit split_keys(index_t rows, index_t heads, index_t longest) {
  constexpr index_t teams = 1024, least_chunk = 16;
  const index_t most = std::max<index_t>(1, teams / std::max<index_t>(1, rows * heads));
  const index_t splits = std::min(most, longest / least_chunk);
  if (splits <= 1) return {1, longest};
  const index_t chunk = (longest + splits - 1) / splits;
  return {(longest + chunk - 1) / chunk, chunk};
}

// The keys [first, p] row r's query at position p sees (first is 0, or p - W + 1 with a sliding window of W).
FT_HOST_DEVICE inline index_t first_key(index_t p, index_t window) {
  return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

// A split's partial result in the scratch (attention_partials() values):
// [N H splits] of (running max, sum of weights, D weighted sums).
template <class A>
FT_HOST_DEVICE inline A* partial_at(A* partials, index_t i, index_t split, index_t splits, index_t D) {
  return partials + (i * splits + split) * (D + 2);
}

// Team i splits + s, i = r H + h: query head h of row r over split s of
// the cached keys [first, p] of its sequence, p its position. The team's
// lanes share the head dimension: each key's score is the team's sum, the
// same on every lane, so the online softmax runs alike on all of them and
// each lane keeps its own dimensions' sums. Keys are taken four at a time
// so that their loads and sums overlap. With one split the result is
// normalised into out; with several, the split's running max, weight sum
// and weighted sums go to `partials` for Combine.
template <class T>
struct Attend {
  using A = acc_t<T>;
  static constexpr index_t unroll = 4;
  T* out;  // [N, H D]
  A* partials;  // with several splits
  const T* qkv;
  const CacheRow<T>* rows;
  const std::int32_t* positions;
  index_t layer, H, G, D, window;
  KeySplit split;
  A scale;
  bool alibi;     // scores gain nn::alibi_slope(h) * (j - p)
  double softcap;  // > 0: scores are soft-capped at it (nn::ScoreTerms)

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t task, const Team& team) const {
    constexpr index_t per_lane = (max_head_dim + std::remove_cvref_t<Team>::size - 1) / std::remove_cvref_t<Team>::size;
    const index_t i = task / split.splits, part = task % split.splits;
    const index_t h = i % H, r = i / H, g = h / (H / G), width = G * D;
    const index_t p = positions[r], first = first_key(p, window);
    const index_t begin = first + part * split.chunk;
    const index_t end = split.splits == 1 ? p : (begin + split.chunk - 1 < p ? begin + split.chunk - 1 : p);
    const CacheRow<T>& at = rows[r];
    const T* keys = at.keys + layer * at.layer_stride + g * D;
    const T* values = at.values + layer * at.layer_stride + g * D;
    const T* q = qkv + r * (H + 2 * G) * D + h * D;
    const nn::ScoreTerms<A> terms = nn::score_terms<A>(alibi, softcap, h, H);
    A query[per_lane], acc[per_lane];
    for (index_t k = 0; k < per_lane; ++k) {
      const index_t d = team.rank + k * team.size;
      query[k] = d < D ? A(q[d]) : A(0);
      acc[k] = 0;
    }
    A m = -std::numeric_limits<A>::infinity(), l = 0;
    for (index_t j0 = begin; j0 <= end; j0 += unroll) {
      A score[unroll];
      A m_new = m;
      for (index_t u = 0; u < unroll; ++u) {
        const index_t j = j0 + u;
        A partial = 0;
        if (j <= end)
          for (index_t k = 0; k < per_lane; ++k) {
            const index_t d = team.rank + k * team.size;
            if (d < D) partial += query[k] * A(keys[j * width + d]);
          }
        score[u] = terms(team.sum(partial) * scale, j - p);
        if (j <= end && score[u] > m_new) m_new = score[u];
      }
      const A rescale = std::exp(m - m_new);
      l *= rescale;
      for (index_t k = 0; k < per_lane; ++k) acc[k] *= rescale;
      for (index_t u = 0; u < unroll && j0 + u <= end; ++u) {
        const index_t j = j0 + u;
        const A weight = std::exp(score[u] - m_new);
        l += weight;
        for (index_t k = 0; k < per_lane; ++k) {
          const index_t d = team.rank + k * team.size;
          if (d < D) acc[k] += weight * A(values[j * width + d]);
        }
      }
      m = m_new;
    }
    if (split.splits == 1) {
      for (index_t k = 0; k < per_lane; ++k) {
        const index_t d = team.rank + k * team.size;
        if (d < D) out[r * H * D + h * D + d] = T(acc[k] / l);
      }
      return;
    }
    A* to = partial_at(partials, i, part, split.splits, D);
    if (team.rank == 0) {
      to[0] = m;
      to[1] = l;
    }
    for (index_t k = 0; k < per_lane; ++k) {
      const index_t d = team.rank + k * team.size;
      if (d < D) to[2 + d] = acc[k];
    }
  }
};

// Team i = r H + h: the splits' partial results of query head h of row r
// into its attention output, each rescaled to the largest running max. A
// split past the row's keys holds max -inf and adds nothing.
template <class T>
struct Combine {
  using A = acc_t<T>;
  T* out;  // [N, H D]
  const A* partials;
  index_t splits, D;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t i, const Team& team) const {
    A m = -std::numeric_limits<A>::infinity();
    for (index_t s = 0; s < splits; ++s) {
      const A ms = partial_at(partials, i, s, splits, D)[0];
      m = ms > m ? ms : m;
    }
    A l = 0;
    for (index_t s = 0; s < splits; ++s) {
      const A* from = partial_at(partials, i, s, splits, D);
      l += from[1] * std::exp(from[0] - m);
    }
    for (index_t d = team.rank; d < D; d += team.size) {
      A sum = 0;
      for (index_t s = 0; s < splits; ++s) {
        const A* from = partial_at(partials, i, s, splits, D);
        sum += from[2 + d] * std::exp(from[0] - m);
      }
      out[i * D + d] = T(sum / l);
    }
  }
};

}  // namespace cache_rows

// Appends the new keys and values of a step's N rows to their caches at their positions.
template <class Device, class T>
void append_to_cache(const T* qkv, const cache_rows::CacheRow<T>* rows, const std::int32_t* positions, index_t N,
                     index_t layer, const CachedAttentionShape& s) {
  const index_t width = s.G * s.D;
  Device::parallel_rows(N, 2 * width, cache_rows::Append<T>{qkv, rows, positions, layer, s.H * s.D, width});
}

// The most keys a row of the step sees, from its positions (the host's copy).
inline index_t longest_keys(std::span<const std::int32_t> positions, index_t window) {
  index_t longest = 0;
  for (const std::int32_t p : positions) longest = std::max(longest, index_t(p) - cache_rows::first_key(p, window) + 1);
  return longest;
}

// The scratch cached_attention_rows needs for a split: each split's partial result.
inline std::size_t attention_partials(index_t N, const CachedAttentionShape& s, const cache_rows::KeySplit& split) {
  return split.splits == 1 ? 0 : std::size_t(N * s.H * split.splits * (s.D + 2));
}

// cached_attention on any device: out [N, H D] from the step's rows and their
// caches (keys already appended), with the keys split as `split` says
// (cache_rows::split_keys) and, for several splits, attention_partials()
// values of scratch in the device's memory.
template <class Device, class T>
void cached_attention_rows(T* out, const T* qkv, const cache_rows::CacheRow<T>* rows, const std::int32_t* positions,
                           index_t N, index_t layer, const CachedAttentionShape& s, const cache_rows::KeySplit& split,
                           acc_t<T>* partials) {
  if (s.D > cache_rows::max_head_dim)
    throw Error("attention over a key/value cache takes head dimensions up to " +
                std::to_string(cache_rows::max_head_dim) + ", the model has " + std::to_string(s.D));
  using A = acc_t<T>;
  Device::parallel_rows(N * s.H * split.splits, s.D,
                        cache_rows::Attend<T>{out, partials, qkv, rows, positions, layer, s.H, s.G, s.D, s.window,
                                              split, nn::softmax_scale<A>(s.D, s.scale), s.alibi, s.softcap});
  if (split.splits > 1) Device::parallel_rows(N * s.H, s.D, cache_rows::Combine<T>{out, partials, split.splits, s.D});
}

}  // namespace ft::infer
