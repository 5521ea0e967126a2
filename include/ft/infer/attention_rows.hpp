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
#include <cstdint>
#include <limits>
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

// Row r H + h: query head h of row r over the cached keys [first(p), p] of
// its sequence, p its position (first is 0, or p - W + 1 with a sliding
// window of W). The team's lanes share the head dimension: each key's score
// is the team's sum, the same on every lane, so the online softmax runs
// alike on all of them and each lane keeps its own dimensions' sums.
template <class T>
struct Attend {
  using A = acc_t<T>;
  T* out;  // [N, H D]
  const T* qkv;
  const CacheRow<T>* rows;
  const std::int32_t* positions;
  index_t layer, H, G, D, window;
  A scale;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t i, const Team& team) const {
    constexpr index_t per_lane = (max_head_dim + std::remove_cvref_t<Team>::size - 1) / std::remove_cvref_t<Team>::size;
    const index_t h = i % H, r = i / H, g = h / (H / G), width = G * D;
    const index_t p = positions[r], first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const CacheRow<T>& at = rows[r];
    const T* keys = at.keys + layer * at.layer_stride + g * D;
    const T* values = at.values + layer * at.layer_stride + g * D;
    const T* q = qkv + r * (H + 2 * G) * D + h * D;
    A query[per_lane], acc[per_lane];
    for (index_t k = 0; k < per_lane; ++k) {
      const index_t d = team.rank + k * team.size;
      query[k] = d < D ? A(q[d]) : A(0);
      acc[k] = 0;
    }
    A m = -std::numeric_limits<A>::infinity(), l = 0;
    for (index_t j = first; j <= p; ++j) {
      A partial = 0;
      for (index_t k = 0; k < per_lane; ++k) {
        const index_t d = team.rank + k * team.size;
        if (d < D) partial += query[k] * A(keys[j * width + d]);
      }
      const A s = team.sum(partial) * scale;
      const A m_new = s > m ? s : m;
      const A rescale = std::exp(m - m_new), weight = std::exp(s - m_new);
      l = l * rescale + weight;
      for (index_t k = 0; k < per_lane; ++k) {
        const index_t d = team.rank + k * team.size;
        if (d < D) acc[k] = acc[k] * rescale + weight * A(values[j * width + d]);
      }
      m = m_new;
    }
    for (index_t k = 0; k < per_lane; ++k) {
      const index_t d = team.rank + k * team.size;
      if (d < D) out[r * H * D + h * D + d] = T(acc[k] / l);
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

// cached_attention on any device: out [N, H D] from the step's rows and their caches (keys already appended).
template <class Device, class T>
void cached_attention_rows(T* out, const T* qkv, const cache_rows::CacheRow<T>* rows, const std::int32_t* positions,
                           index_t N, index_t layer, const CachedAttentionShape& s) {
  if (s.D > cache_rows::max_head_dim)
    throw Error("attention over a key/value cache takes head dimensions up to " +
                std::to_string(cache_rows::max_head_dim) + ", the model has " + std::to_string(s.D));
  using A = acc_t<T>;
  Device::parallel_rows(N * s.H, s.D,
                        cache_rows::Attend<T>{out, qkv, rows, positions, layer, s.H, s.G, s.D, s.window,
                                              A(1) / std::sqrt(A(s.D))});
}

}  // namespace ft::infer
