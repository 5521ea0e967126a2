#pragma once
// C = alpha * A B^T + beta * C (A [M, K], B [N, K], row-major) with every
// element one dot product summed in a fixed order, by the same operations
// for every element: a row's result is the same whatever other rows share
// the call. BLAS picks its inner kernels by the matrix sizes and rounds a
// row differently in different batches; inference needs the same answer for
// a sequence alone or batched with others (infer/engine.hpp turns this on
// for its steps with RowInvariantGemm, and gemm() then takes this path for
// every product of that form).
//
// Each task holds a block of B's rows in cache while all rows of A pass over
// it, up to four at a time: at inference B is a weight matrix read from
// memory once per step and A a few rows of activations. x86-64-v3 builds run
// float and bf16 through AVX2 tiles; other types and CPUs through portable
// code (16 running sums, a fixed tree). Either is fixed for a build and a type.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "ft/core/half.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft {

namespace detail {
inline thread_local bool row_invariant_gemm = false;

// The dot products of `rows` rows of A (rows <= 4) with one row of B. Every
// call runs the code for four rows (a short group repeats its last row), so
// each element is computed by the same instructions whatever the grouping:
// 16 running sums over k, then a fixed tree.
template <class T>
void fixed_order_dots(const T* const* a, int rows, const T* b, index_t K, float* out) {
  constexpr int group = 4, lanes = 16;
  const T* row[group];
  for (int r = 0; r < group; ++r) row[r] = a[std::min(r, rows - 1)];
  float sum[group][lanes] = {};
  index_t k = 0;
  for (; k + lanes <= K; k += lanes)
    for (int j = 0; j < lanes; ++j) {
      const float w = float(b[k + j]);
      for (int r = 0; r < group; ++r) sum[r][j] += float(row[r][k + j]) * w;
    }
  for (int j = 0; k + j < K; ++j) {
    const float w = float(b[k + j]);
    for (int r = 0; r < group; ++r) sum[r][j] += float(row[r][k + j]) * w;
  }
  for (int r = 0; r < group; ++r) {
    for (int width = lanes / 2; width >= 1; width /= 2)
      for (int j = 0; j < width; ++j) sum[r][j] += sum[r][j + width];
    if (r < rows) out[r] = sum[r][0];
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// With AVX2 and FMA (x86-64-v3 builds), float and bf16 take register tiles:
// per element, 8-lane sums over k in fused multiply-adds, the last partial
// chunk through zero-filled loads, then one fixed horizontal sum.
inline __m256 load8(const float* p, index_t n) {
  alignas(32) static const std::int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  if (n >= 8) return _mm256_loadu_ps(p);
  return _mm256_maskload_ps(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones_then_zeros + 8 - n)));
}
inline __m256 load8(const bf16* p, index_t n) {
  __m128i half;
  if (n >= 8) {
    half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) std::uint16_t bits[8] = {};
    for (index_t i = 0; i < n; ++i) bits[i] = p[i].bits;
    half = _mm_load_si128(reinterpret_cast<const __m128i*>(bits));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
inline float horizontal_sum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

template <class T>
constexpr bool has_vector_tile = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

// R rows of A by C rows of B, R*C sums in registers. Each element gets the
// same operations whatever the tile (its own accumulator, the same loads,
// the same fused multiply-adds in k order, the same horizontal sum), so the
// tile's shape changes the speed and never a bit. The side with fewer rows
// stays in registers across a step of k; the other streams past it.
// `next` (or null) names the rows of B the following tile reads: fetching
// them while this tile computes overlaps reading the weights from memory
// with the arithmetic, which otherwise take turns.
template <int R, int C, class T>
[[gnu::always_inline]] inline void vector_tile(const T* const* a, const T* const* b, const T* const* next, index_t K,
                                               float* out) {
  __m256 sum[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sum[r][c] = _mm256_setzero_ps();
  // One step of k: eight lanes, or the last n < 8 through zero-filled loads.
  auto step = [&](index_t k, index_t n) {
    if constexpr (R <= C) {
      __m256 x[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) x[r] = load8(a[r] + k, n);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 w = load8(b[c] + k, n);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) sum[r][c] = _mm256_fmadd_ps(x[r], w, sum[r][c]);
      }
    } else {
      __m256 w[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) w[c] = load8(b[c] + k, n);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 x = load8(a[r] + k, n);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) sum[r][c] = _mm256_fmadd_ps(x, w[c], sum[r][c]);
      }
    }
  };
  // Whole steps apart from the last partial one, so the main loop holds no
  // mask and every sum stays in a register.
  index_t k = 0;
  constexpr index_t per_line = 64 / sizeof(T);
  for (; k + 8 <= K; k += 8) {
    if (next && k % per_line == 0) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(next[c] + k), _MM_HINT_T0);
    }
    step(k, 8);
  }
  if (k < K) step(k, K - k);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r * C + c] = horizontal_sum(sum[r][c]);
}

// Rows of B per tile for a tile of R rows of A: 8 to 12 sums in registers,
// and with the values they meet no more than the 16 vector registers.
constexpr int tile_columns(int rows) { return rows == 1 ? 8 : rows == 2 ? 6 : rows == 3 ? 4 : 3; }
#endif
}  // namespace detail

// While one exists on a thread, that thread's gemm() calls of the form A B^T are row-invariant.
class RowInvariantGemm {
public:
  RowInvariantGemm() : saved_(detail::row_invariant_gemm) { detail::row_invariant_gemm = true; }
  ~RowInvariantGemm() { detail::row_invariant_gemm = saved_; }
  RowInvariantGemm(const RowInvariantGemm&) = delete;
  RowInvariantGemm& operator=(const RowInvariantGemm&) = delete;

private:
  bool saved_;
};

template <element T>
void gemm_row_invariant(index_t M, index_t N, index_t K, float alpha, const T* A, index_t lda, const T* B,
                        index_t ldb, float beta, T* C, index_t ldc) {
  constexpr index_t block = 24;  // rows of B per task: a multiple of every tile's width
  cpu::parallel_for((N + block - 1) / block, [=](index_t task) {
    const index_t n0 = task * block, n1 = std::min(N, n0 + block);
    auto store = [&](index_t m, index_t n, float d) {
      T& c = C[m * ldc + n];
      c = T(beta == 0.0f ? alpha * d : alpha * d + beta * float(c));
    };
    for (index_t m0 = 0; m0 < M; m0 += 4) {
      const int rows = int(std::min<index_t>(4, M - m0));
      const T* a[4];
      for (int r = 0; r < rows; ++r) a[r] = A + (m0 + r) * lda;
#if defined(__AVX2__) && defined(__FMA__)
      if constexpr (detail::has_vector_tile<T>) {
        const int width = detail::tile_columns(rows);
        for (index_t n = n0; n < n1; n += width) {
          // A short last tile repeats its last row of B.
          const int cols = int(std::min<index_t>(width, n1 - n));
          const T* b[8];
          for (int c = 0; c < width; ++c) b[c] = B + (n + std::min(c, cols - 1)) * ldb;
          // One row of A streams B fastest with the hardware's own prefetch.
          const T* next_rows[8];
          const bool prefetch = m0 == 0 && rows >= 2 && n + width < n1;
          for (int c = 0; prefetch && c < width; ++c) next_rows[c] = B + std::min(n + width + c, n1 - 1) * ldb;
          const T* const* next = prefetch ? next_rows : nullptr;
          float d[12];
          switch (rows) {
            case 1: detail::vector_tile<1, detail::tile_columns(1)>(a, b, next, K, d); break;
            case 2: detail::vector_tile<2, detail::tile_columns(2)>(a, b, next, K, d); break;
            case 3: detail::vector_tile<3, detail::tile_columns(3)>(a, b, next, K, d); break;
            default: detail::vector_tile<4, detail::tile_columns(4)>(a, b, next, K, d); break;
          }
          for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) store(m0 + r, n + c, d[r * width + c]);
        }
        continue;
      }
#endif
      for (index_t n = n0; n < n1; ++n) {
        float d[4];
        detail::fixed_order_dots(a, rows, B + n * ldb, K, d);
        for (int r = 0; r < rows; ++r) store(m0 + r, n, d[r]);
      }
    }
  });
}

}  // namespace ft
