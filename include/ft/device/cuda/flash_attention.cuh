#pragma once
// Causal attention on tensor cores (sm_80 and later), flash-attention style:
// the same inputs, outputs, visibility and saved log-sum-exps as
// nn/attention_shape.hpp, for bf16 and f16 with f32 sums and head dimensions 64
// and 128 (nn/attention_rows.hpp serves the rest).
//
// Forward: a block owns 64 query rows of one head (four warps of 16 rows)
// and walks the key tiles they see, two tiles of keys and values in shared
// memory at once (the next copied asynchronously while this one computes).
// The warp's queries stay in registers, and so do scores and the running
// output: a score tile's f32 accumulators round to the operand of the
// product with the values (mma.cuh), so the online softmax never leaves
// the warp.
//
// Backward is two kernels, so that every gradient element has one owner
// and the result does not depend on timing (no atomics): one owns a tile of
// 64 keys of one key/value head and sums dK and dV over the query heads of
// its group and the query tiles that see it, computing the transposed
// scores K Q^T so that P^T and dS^T are operands without a transpose; the
// other owns a query tile and sums dQ. Both recompute the probabilities
// from the saved log-sum-exps; the price of owning each gradient is two
// products more than a backward that adds dQ with atomics (7 instead of 5).
//
// Which keys a query sees is nn/attention_shape.hpp's rule: key j is visible to
// query i when first[i] <= j <= i, with first[] (the earliest key, from
// documents and the window) never decreasing along a sequence, so the
// tiles a block visits are one range and only tiles at its edges are masked.
#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "ft/device/cuda/check.hpp"
#include "ft/device/cuda/launch.cuh"
#include "ft/device/cuda/mma.cuh"
#include "ft/nn/attention_rows.hpp"
#include "ft/device/cuda/memory.hpp"
#include "ft/tensor/scratch.hpp"

namespace ft::cuda::flash {

// Where heads live in the fused qkv rows [B T, (H + 2G) D].
struct Heads {
  int B, T, H, G;
  __host__ __device__ int stride(int D) const { return (H + 2 * G) * D; }
};

constexpr int warps = 4;
constexpr int threads = warps * 32;
constexpr float log2e = 1.4426950408889634f;

// A tile of `rows` token rows x D values in shared memory; rows are padded
// by 16 bytes so that ldmatrix's eight row addresses fall in distinct banks.
template <class T, int D>
struct Tile {
  static constexpr int pitch = D + 8;
  static constexpr int bytes(int rows) { return rows * pitch * int(sizeof(T)); }
};

// Copies rows [t0, t0 + rows) of one head (column offset `column` in each
// token's row of `stride` values) of sequence b into a shared tile; rows at
// or past T are zero-filled. Asynchronous: commit and wait before use.
template <class T, int D, int rows>
__device__ inline void load_tile(T* tile, const T* src, int stride, int column, int b, int t0, int T_) {
  constexpr int chunks_per_row = D * int(sizeof(T)) / 16;
  for (int c = int(threadIdx.x); c < rows * chunks_per_row; c += threads) {
    const int r = c / chunks_per_row, part = c % chunks_per_row, t = t0 + r;
    const bool valid = t < T_;
    const T* from = src + (std::int64_t(b) * T_ + (valid ? t : 0)) * stride + column + part * 8;
    mma::copy_async_16(tile + r * Tile<T, D>::pitch + part * 8, from, valid);
  }
}

// A fragments of 16 rows x D of a shared tile (rows row0..row0+15), kept in registers.
template <class T, int D>
__device__ inline void load_rows(std::uint32_t (&a)[D / 16][4], const T* tile, int row0) {
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
    mma::ldmatrix_x4(a[k], tile + (row0 + lane % 16) * Tile<T, D>::pitch + k * 16 + (lane / 16) * 8);
}

// A thread's two query rows of its warp's 16 (row0 the warp's first), and
// the earliest key each sees.
struct QueryRows {
  int row[2], first[2];
  __device__ QueryRows(const std::int32_t* first_keys, int row0, int T_) {
    for (int i = 0; i < 2; ++i) {
      row[i] = row0 + int(threadIdx.x) % 32 / 4 + 8 * i;
      first[i] = row[i] < T_ ? first_keys[row[i]] : 0;
    }
  }
  // Whether row i (0 or 1) sees key j.
  __device__ bool sees(int i, int j) const { return j >= first[i] && j <= row[i]; }
};

// The key of accumulator element e of n-tile n, in a tile from key k0.
__device__ inline int key_of(int k0, int n, int e) { return k0 + n * 8 + int(threadIdx.x) % 4 * 2 + e % 2; }

// Whether some query of [q0, q_last] does not see some key of [k0, k0 + BK):
// only such tiles pay for the mask.
__device__ inline bool needs_mask(const std::int32_t* first, int k0, int BK, int q0, int q_last) {
  return k0 + BK - 1 > q0 || first[q_last] > k0;
}

// Double buffering: starts copying step + 1's tiles into the other buffer
// (load(step + 1, buffer)) when there is one, waits for this step's, and
// returns this step's buffer.
template <class Load>
__device__ inline int pipeline_step(int step, int steps, const Load& load) {
  const int buffer = step % 2;
  if (step + 1 < steps) {
    load(step + 1, 1 - buffer);
    mma::copy_async_commit();
    mma::copy_async_wait<1>();
  } else {
    mma::copy_async_wait<0>();
  }
  __syncthreads();
  return buffer;
}

// s[16 x N] += a[16 x D] b^T, b's N rows of D values in a shared tile
// (scores from queries and keys, or from output gradients and values).
template <class T, int D, int N>
__device__ inline void product_nt(float (&s)[N / 8][4], const std::uint32_t (&a)[D / 16][4], const T* b) {
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int k = 0; k < D / 16; ++k)
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      std::uint32_t f[4];
      mma::ldmatrix_x4(f, b + (n * 16 + lane % 8 + (lane / 16) * 8) * Tile<T, D>::pitch + k * 16 + ((lane / 8) % 2) * 8);
      mma::mma<T>(s[2 * n], a[k], f[0], f[1]);
      mma::mma<T>(s[2 * n + 1], a[k], f[2], f[3]);
    }
}

// o[16 x D] += p[16 x K] v, p in f32 accumulators (rounded to T here), v's
// K rows of D values in a shared tile.
template <class T, int D, int K>
__device__ inline void product_pv(float (&o)[D / 8][4], const float (&p)[K / 8][4], const T* v) {
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int k = 0; k < K / 16; ++k) {
    const std::uint32_t a[4] = {mma::pack<T>(p[2 * k][0], p[2 * k][1]), mma::pack<T>(p[2 * k][2], p[2 * k][3]),
                                mma::pack<T>(p[2 * k + 1][0], p[2 * k + 1][1]),
                                mma::pack<T>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      std::uint32_t f[4];
      mma::ldmatrix_x4_trans(f, v + (k * 16 + lane % 8 + ((lane / 8) % 2) * 8) * Tile<T, D>::pitch + n * 16 + (lane / 16) * 8);
      mma::mma<T>(o[2 * n], a, f[0], f[1]);
      mma::mma<T>(o[2 * n + 1], a, f[2], f[3]);
    }
  }
}

// Adds 16 rows x D of f32 accumulators, times `scale`, into rows of dst
// (global memory, `stride` values apart), skipping rows at or past `rows`.
template <class T, int D>
__device__ inline void add_rows(T* dst, int stride, int row0, int rows, const float (&acc)[D / 8][4], float scale) {
  const int lane = int(threadIdx.x) % 32, group = lane / 4, quad = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + group + 8 * half;
    if (r >= rows) continue;
    T* row = dst + std::int64_t(r) * stride;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      auto* pair = reinterpret_cast<std::uint32_t*>(row + n * 8 + quad * 2);
      const float2 old = mma::unpack<T>(*pair);
      *pair = mma::pack<T>(old.x + acc[n][2 * half] * scale, old.y + acc[n][2 * half + 1] * scale);
    }
  }
}

// Shared memory of each kernel: its tiles of BQ queries and BK keys.
template <class T, int D>
struct ForwardTiles {
  static constexpr int BQ = 64, BK = 64;
  static constexpr int shared_bytes = Tile<T, D>::bytes(BQ + 4 * BK);
};
template <class T, int D>
struct QueryGradTiles {
  static constexpr int BQ = 64, BK = D <= 64 ? 64 : 32;
  static constexpr int shared_bytes = Tile<T, D>::bytes(2 * BQ + 4 * BK);
};
template <class T, int D>
struct KeyValueGradTiles {
  static constexpr int BK = 64, BQ = D <= 64 ? 64 : 32;
  static constexpr int shared_bytes = Tile<T, D>::bytes(2 * BK + 4 * BQ);
};

template <class T, int D>
__global__ void __launch_bounds__(threads) forward_kernel(T* out, float* lse, const T* qkv, const std::int32_t* first_keys,
                                                          Heads heads, float scale) {
  constexpr int BQ = ForwardTiles<T, D>::BQ, BK = ForwardTiles<T, D>::BK;
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* kv_tiles = q_tile + BQ * Tile<T, D>::pitch;  // [2 buffers][keys, values][BK rows]
  auto key_tile = [&](int buffer) { return kv_tiles + (2 * buffer) * BK * Tile<T, D>::pitch; };
  auto value_tile = [&](int buffer) { return kv_tiles + (2 * buffer + 1) * BK * Tile<T, D>::pitch; };

  const int T_ = heads.T, stride = heads.stride(D);
  const int q0 = int(blockIdx.x) * BQ, h = int(blockIdx.y), b = int(blockIdx.z), g = h / (heads.H / heads.G);
  const int warp = int(threadIdx.x) / 32, quad = int(threadIdx.x) % 4;
  const std::int32_t* first = first_keys + std::int64_t(b) * T_;
  const int q_last = min(q0 + BQ, T_) - 1;
  const int k_begin = first[q0] / BK, k_end = q_last / BK;
  const float scale_log2 = scale * log2e;

  const QueryRows rows(first, q0 + warp * 16, T_);

  auto load_keys = [&](int step, int buffer) {
    load_tile<T, D, BK>(key_tile(buffer), qkv, stride, (heads.H + g) * D, b, (k_begin + step) * BK, T_);
    load_tile<T, D, BK>(value_tile(buffer), qkv, stride, (heads.H + heads.G + g) * D, b, (k_begin + step) * BK, T_);
  };
  load_tile<T, D, BQ>(q_tile, qkv, stride, h * D, b, q0, T_);
  load_keys(0, 0);
  mma::copy_async_commit();

  std::uint32_t q[D / 16][4];
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};

  for (int kt = k_begin; kt <= k_end; ++kt) {
    const int buffer = pipeline_step(kt - k_begin, k_end - k_begin + 1, load_keys);
    if (kt == k_begin) load_rows<T, D>(q, q_tile, warp * 16);

    float s[BK / 8][4] = {};
    product_nt<T, D, BK>(s, q, key_tile(buffer));

    const int k0 = kt * BK;
    const bool masked = needs_mask(first, k0, BK, q0, q_last);
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[n][e] = !masked || rows.sees(e / 2, key_of(k0, n, e)) ? s[n][e] * scale_log2 : -INFINITY;

    // Online softmax per row: new maximum, rescale what was summed so far.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
      const float m_new = fmaxf(m[i], mma::quad_max(tile_max));
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen nothing yet
      const float rescale = exp2f(m[i] - base);
      m[i] = m_new;
      float sum = 0;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) {
        s[n][2 * i] = exp2f(s[n][2 * i] - base);
        s[n][2 * i + 1] = exp2f(s[n][2 * i + 1] - base);
        sum += s[n][2 * i] + s[n][2 * i + 1];
      }
      l[i] = l[i] * rescale + sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * i] *= rescale;
        o[n][2 * i + 1] *= rescale;
      }
    }
    product_pv<T, D, BK>(o, s, value_tile(buffer));
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

  T* out_rows = out + std::int64_t(b) * T_ * heads.H * D + h * D;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float total = mma::quad_sum(l[i]);
    if (rows.row[i] >= T_) continue;
    if (quad == 0) lse[(std::int64_t(b) * heads.H + h) * T_ + rows.row[i]] = m[i] / log2e + logf(total);
    T* dst = out_rows + std::int64_t(rows.row[i]) * heads.H * D;
    const float inv = 1.0f / total;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<std::uint32_t*>(dst + n * 8 + quad * 2) = mma::pack<T>(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
  }
}

// dQ for 64 queries of one head (16 per warp); key tiles of BK keys.
template <class T, int D>
__global__ void __launch_bounds__(threads) query_grad_kernel(T* dqkv, const T* dout, const float* lse, const float* delta,
                                                             const T* qkv, const std::int32_t* first_keys, Heads heads,
                                                             float scale) {
  constexpr int BQ = QueryGradTiles<T, D>::BQ, BK = QueryGradTiles<T, D>::BK;
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* do_tile = q_tile + BQ * Tile<T, D>::pitch;
  T* kv_tiles = do_tile + BQ * Tile<T, D>::pitch;
  auto key_tile = [&](int buffer) { return kv_tiles + (2 * buffer) * BK * Tile<T, D>::pitch; };
  auto value_tile = [&](int buffer) { return kv_tiles + (2 * buffer + 1) * BK * Tile<T, D>::pitch; };

  const int T_ = heads.T, stride = heads.stride(D), HD = heads.H * D;
  const int q0 = int(blockIdx.x) * BQ, h = int(blockIdx.y), b = int(blockIdx.z), g = h / (heads.H / heads.G);
  const int warp = int(threadIdx.x) / 32;
  const std::int32_t* first = first_keys + std::int64_t(b) * T_;
  const int q_last = min(q0 + BQ, T_) - 1;
  const int k_begin = first[q0] / BK, k_end = q_last / BK;
  const float scale_log2 = scale * log2e;

  const QueryRows rows(first, q0 + warp * 16, T_);
  float row_lse[2], row_delta[2];
  for (int i = 0; i < 2; ++i) {
    const bool valid = rows.row[i] < T_;
    const std::int64_t stat = (std::int64_t(b) * heads.H + h) * T_ + (valid ? rows.row[i] : 0);
    row_lse[i] = valid ? lse[stat] * log2e : 0.0f;
    row_delta[i] = valid ? delta[stat] : 0.0f;
  }

  auto load_keys = [&](int step, int buffer) {
    load_tile<T, D, BK>(key_tile(buffer), qkv, stride, (heads.H + g) * D, b, (k_begin + step) * BK, T_);
    load_tile<T, D, BK>(value_tile(buffer), qkv, stride, (heads.H + heads.G + g) * D, b, (k_begin + step) * BK, T_);
  };
  load_tile<T, D, BQ>(q_tile, qkv, stride, h * D, b, q0, T_);
  load_tile<T, D, BQ>(do_tile, dout, HD, h * D, b, q0, T_);
  load_keys(0, 0);
  mma::copy_async_commit();

  std::uint32_t q[D / 16][4], dO[D / 16][4];
  float dq[D / 8][4] = {};

  for (int kt = k_begin; kt <= k_end; ++kt) {
    const int buffer = pipeline_step(kt - k_begin, k_end - k_begin + 1, load_keys);
    if (kt == k_begin) {
      load_rows<T, D>(q, q_tile, warp * 16);
      load_rows<T, D>(dO, do_tile, warp * 16);
    }

    float s[BK / 8][4] = {}, dp[BK / 8][4] = {};
    product_nt<T, D, BK>(s, q, key_tile(buffer));
    product_nt<T, D, BK>(dp, dO, value_tile(buffer));
    const int k0 = kt * BK;
    const bool masked = needs_mask(first, k0, BK, q0, q_last);
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const float p = !masked || rows.sees(i, key_of(k0, n, e)) ? exp2f(s[n][e] * scale_log2 - row_lse[i]) : 0.0f;
        s[n][e] = p * (dp[n][e] - row_delta[i]);  // dS
      }
    product_pv<T, D, BK>(dq, s, key_tile(buffer));
    __syncthreads();
  }
  add_rows<T, D>(dqkv + std::int64_t(b) * T_ * stride + h * D, stride, q0 + warp * 16, T_, dq, scale);
}

// dK and dV for 64 keys of one key/value head (16 per warp), over the query
// heads of its group and the query tiles of BQ queries that see them.
template <class T, int D>
__global__ void __launch_bounds__(threads) key_value_grad_kernel(T* dqkv, const T* dout, const float* lse,
                                                                 const float* delta, const T* qkv,
                                                                 const std::int32_t* first_keys, Heads heads,
                                                                 float scale) {
  constexpr int BK = KeyValueGradTiles<T, D>::BK, BQ = KeyValueGradTiles<T, D>::BQ;
  extern __shared__ __align__(16) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);
  T* v_tile = k_tile + BK * Tile<T, D>::pitch;
  T* qdo_tiles = v_tile + BK * Tile<T, D>::pitch;  // [2 buffers][queries, output gradients][BQ rows]
  auto query_tile = [&](int buffer) { return qdo_tiles + (2 * buffer) * BQ * Tile<T, D>::pitch; };
  auto dout_tile = [&](int buffer) { return qdo_tiles + (2 * buffer + 1) * BQ * Tile<T, D>::pitch; };

  const int T_ = heads.T, stride = heads.stride(D), HD = heads.H * D, group_size = heads.H / heads.G;
  const int k0 = int(blockIdx.x) * BK, g = int(blockIdx.y), b = int(blockIdx.z);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, group = lane / 4, quad = lane % 4;
  const std::int32_t* first = first_keys + std::int64_t(b) * T_;
  const float scale_log2 = scale * log2e;

  // The last query that sees any of these keys: first[] never decreases, so
  // the queries that see key k0 + BK - 1 or earlier are a prefix from k0.
  const int k_last = min(k0 + BK, T_) - 1;
  int lo = k0, hi = T_ - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= k_last) lo = mid; else hi = mid - 1;
  }
  const int q_begin = k0 / BQ, q_end = lo / BQ, tiles = q_end - q_begin + 1;

  // This thread's two key rows of the warp's 16.
  int key[2];
  for (int i = 0; i < 2; ++i) key[i] = k0 + warp * 16 + group + 8 * i;

  load_tile<T, D, BK>(k_tile, qkv, stride, (heads.H + g) * D, b, k0, T_);
  load_tile<T, D, BK>(v_tile, qkv, stride, (heads.H + heads.G + g) * D, b, k0, T_);
  auto load_queries = [&](int step, int buffer) {
    const int h = g * group_size + step / tiles, t0 = (q_begin + step % tiles) * BQ;
    load_tile<T, D, BQ>(query_tile(buffer), qkv, stride, h * D, b, t0, T_);
    load_tile<T, D, BQ>(dout_tile(buffer), dout, HD, h * D, b, t0, T_);
  };
  load_queries(0, 0);
  mma::copy_async_commit();

  std::uint32_t kf[D / 16][4], vf[D / 16][4];
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int steps = group_size * tiles;
  for (int step = 0; step < steps; ++step) {
    const int buffer = pipeline_step(step, steps, load_queries);
    if (step == 0) {
      load_rows<T, D>(kf, k_tile, warp * 16);
      load_rows<T, D>(vf, v_tile, warp * 16);
    }
    const int h = g * group_size + step / tiles, t0 = (q_begin + step % tiles) * BQ;
    const float* stat_lse = lse + (std::int64_t(b) * heads.H + h) * T_;
    const float* stat_delta = delta + (std::int64_t(b) * heads.H + h) * T_;

    // Transposed scores and output-gradient products: rows are keys, columns queries.
    float st[BQ / 8][4] = {}, dpt[BQ / 8][4] = {};
    product_nt<T, D, BQ>(st, kf, query_tile(buffer));
    product_nt<T, D, BQ>(dpt, vf, dout_tile(buffer));
    const bool masked = t0 + BQ > T_ || needs_mask(first, k0, BK, t0, t0 + BQ - 1);
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int i = t0 + n * 8 + quad * 2 + c;  // the query of columns e = c and c + 2
        const bool query_valid = i < T_;
        const float query_lse = query_valid ? stat_lse[i] * log2e : 0.0f;
        const float query_delta = query_valid ? stat_delta[i] : 0.0f;
        const int query_first = query_valid ? first[i] : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = 2 * r + c, j = key[r];
          const bool visible = !masked || (query_valid && j >= query_first && j <= i);
          const float p = visible ? exp2f(st[n][e] * scale_log2 - query_lse) : 0.0f;
          st[n][e] = p;                               // P^T
          dpt[n][e] = p * (dpt[n][e] - query_delta);  // dS^T
        }
      }
    product_pv<T, D, BQ>(dv, st, dout_tile(buffer));
    product_pv<T, D, BQ>(dk, dpt, query_tile(buffer));
    __syncthreads();
  }
  T* rows = dqkv + std::int64_t(b) * T_ * stride;
  add_rows<T, D>(rows + (heads.H + g) * D, stride, k0 + warp * 16, T_, dk, scale);
  add_rows<T, D>(rows + (heads.H + heads.G + g) * D, stride, k0 + warp * 16, T_, dv, 1.0f);
}

template <class Kernel>
void allow_shared(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024) FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Launches; first_keys holds first[] for every token (device memory).
template <class T, int D>
void forward(T* out, float* lse, const T* qkv, const std::int32_t* first_keys, Heads heads, float scale,
             cudaStream_t stream = nullptr) {
  using Tiles = ForwardTiles<T, D>;
  allow_shared(forward_kernel<T, D>, Tiles::shared_bytes);
  const dim3 grid(unsigned((heads.T + Tiles::BQ - 1) / Tiles::BQ), unsigned(heads.H), unsigned(heads.B));
  forward_kernel<T, D><<<grid, threads, Tiles::shared_bytes, stream>>>(out, lse, qkv, first_keys, heads, scale);
  FT_CUDA_CHECK(cudaGetLastError());
}

template <class T, int D>
void backward(T* dqkv, const T* dout, const float* lse, const float* delta, const T* qkv, const std::int32_t* first_keys,
              Heads heads, float scale, cudaStream_t stream = nullptr) {
  {
    using Tiles = QueryGradTiles<T, D>;
    allow_shared(query_grad_kernel<T, D>, Tiles::shared_bytes);
    const dim3 grid(unsigned((heads.T + Tiles::BQ - 1) / Tiles::BQ), unsigned(heads.H), unsigned(heads.B));
    query_grad_kernel<T, D><<<grid, threads, Tiles::shared_bytes, stream>>>(dqkv, dout, lse, delta, qkv, first_keys,
                                                                            heads, scale);
    FT_CUDA_CHECK(cudaGetLastError());
  }
  {
    using Tiles = KeyValueGradTiles<T, D>;
    allow_shared(key_value_grad_kernel<T, D>, Tiles::shared_bytes);
    const dim3 grid(unsigned((heads.T + Tiles::BK - 1) / Tiles::BK), unsigned(heads.G), unsigned(heads.B));
    key_value_grad_kernel<T, D><<<grid, threads, Tiles::shared_bytes, stream>>>(dqkv, dout, lse, delta, qkv,
                                                                                first_keys, heads, scale);
    FT_CUDA_CHECK(cudaGetLastError());
  }
}

// device/cpu/attention.hpp's calls on device buffers: false (nothing done) where
// these kernels do not take the type or head dimension, or the scores carry
// ALiBi's bias (the row functors take it).
template <class T>
bool attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents, const nn::AttentionShape& s) {
  if constexpr (!mma::tensor_core_type<T>) {
    return false;
  } else {
    if ((s.D != 64 && s.D != 128) || s.alibi || s.softcap > 0) return false;
    memory::Scratch<std::int32_t, memory::CudaDevice> first(s.B * s.T);
    parallel_for(s.B, nn::attention_rows::FirstKeys{first.data(), documents, s.T, s.window});
    const Heads heads{int(s.B), int(s.T), int(s.H), int(s.G)};
    const float scale = nn::softmax_scale<float>(s.D, s.scale);
    if (s.D == 64)
      forward<T, 64>(out, lse, qkv, first.data(), heads, scale);
    else
      forward<T, 128>(out, lse, qkv, first.data(), heads, scale);
    return true;
  }
}

template <class T>
bool attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                        const std::int32_t* documents, const nn::AttentionShape& s) {
  if constexpr (!mma::tensor_core_type<T>) {
    return false;
  } else {
    if ((s.D != 64 && s.D != 128) || s.alibi || s.softcap > 0) return false;
    memory::Scratch<std::int32_t, memory::CudaDevice> first(s.B * s.T);
    memory::Scratch<float, memory::CudaDevice> delta(s.B * s.H * s.T);
    parallel_for(s.B, nn::attention_rows::FirstKeys{first.data(), documents, s.T, s.window});
    const nn::attention_rows::Layout at{s.T, s.H, s.G, s.D};
    parallel_for(s.B * s.T * s.H, nn::attention_rows::DeltaRow<T>{delta.data(), dout, out, at});
    const Heads heads{int(s.B), int(s.T), int(s.H), int(s.G)};
    const float scale = nn::softmax_scale<float>(s.D, s.scale);
    if (s.D == 64)
      backward<T, 64>(dqkv, dout, lse, delta.data(), qkv, first.data(), heads, scale);
    else
      backward<T, 128>(dqkv, dout, lse, delta.data(), qkv, first.data(), heads, scale);
    return true;
  }
}

}  // namespace ft::cuda::flash
