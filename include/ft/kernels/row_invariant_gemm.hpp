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
// it, up to four at a time sharing each load of B: at inference B is a
// weight matrix and A a few rows of activations. x86-64-v3 builds run float
// and bf16 through AVX2 tiles; other types and CPUs through portable code
// (16 running sums, a fixed tree). Either is fixed for a build and a type.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "ft/core/half.hpp"
#include "ft/core/numeric.hpp"
#include "ft/kernels/cpu/launch.hpp"
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
// With AVX2 and FMA (x86-64-v3 builds), float and bf16 take tiles of up to
// four rows of A by two of B: per element, 8-lane sums over k in fused
// multiply-adds, the last partial chunk through zero-filled loads, then one
// fixed horizontal sum. A lone last row of B is paired with itself.
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

// R rows of A (1 to 4) by two rows of B. Each element gets the same
// operations whatever R is (its own accumulator, the same loads, the same
// fused multiply-adds in k order, the same horizontal sum), so fewer rows
// cost less without changing a bit.
template <int R, class T>
void vector_tile(const T* const* a, const T* const* b, index_t K, float out[4][2]) {
  __m256 sum[R][2];
  for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
  for (index_t k = 0; k < K; k += 8) {
    const index_t n = K - k;
    const __m256 w0 = load8(b[0] + k, n), w1 = load8(b[1] + k, n);
    for (int r = 0; r < R; ++r) {
      const __m256 x = load8(a[r] + k, n);
      sum[r][0] = _mm256_fmadd_ps(x, w0, sum[r][0]);
      sum[r][1] = _mm256_fmadd_ps(x, w1, sum[r][1]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 2; ++c) out[r][c] = horizontal_sum(sum[r][c]);
}

// Four rows, written out: the compiler keeps all eight sums in registers.
template <class T>
void vector_tile4(const T* const* a, const T* const* b, index_t K, float out[4][2]) {
  __m256 s00 = _mm256_setzero_ps(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00;
  for (index_t k = 0; k < K; k += 8) {
    const index_t n = K - k;
    const __m256 w0 = load8(b[0] + k, n), w1 = load8(b[1] + k, n);
    __m256 x = load8(a[0] + k, n);
    s00 = _mm256_fmadd_ps(x, w0, s00);
    s01 = _mm256_fmadd_ps(x, w1, s01);
    x = load8(a[1] + k, n);
    s10 = _mm256_fmadd_ps(x, w0, s10);
    s11 = _mm256_fmadd_ps(x, w1, s11);
    x = load8(a[2] + k, n);
    s20 = _mm256_fmadd_ps(x, w0, s20);
    s21 = _mm256_fmadd_ps(x, w1, s21);
    x = load8(a[3] + k, n);
    s30 = _mm256_fmadd_ps(x, w0, s30);
    s31 = _mm256_fmadd_ps(x, w1, s31);
  }
  const __m256 sums[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 2; ++c) out[r][c] = horizontal_sum(sums[r][c]);
}

template <class T>
void vector_tile(const T* const* a, int rows, const T* const* b, index_t K, float out[4][2]) {
  switch (rows) {
    case 1: return vector_tile<1>(a, b, K, out);
    case 2: return vector_tile<2>(a, b, K, out);
    case 3: return vector_tile<3>(a, b, K, out);
    default: return vector_tile4(a, b, K, out);
  }
}
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
  constexpr index_t block = 16;  // rows of B per task
  cpu::parallel_for((N + block - 1) / block, [=](index_t task) {
    const index_t n0 = task * block, n1 = std::min(N, n0 + block);
    for (index_t m0 = 0; m0 < M; m0 += 4) {
      const int rows = int(std::min<index_t>(4, M - m0));
      const T* a[4];
      for (int r = 0; r < rows; ++r) a[r] = A + (m0 + r) * lda;
      auto store = [&](index_t n, int r, float d) {
        T& c = C[(m0 + r) * ldc + n];
        c = T(beta == 0.0f ? alpha * d : alpha * d + beta * float(c));
      };
#if defined(__AVX2__) && defined(__FMA__)
      if constexpr (detail::has_vector_tile<T>) {
        for (index_t n = n0; n < n1; n += 2) {
          const int cols = int(std::min<index_t>(2, n1 - n));
          const T* b[2] = {B + n * ldb, B + (n + cols - 1) * ldb};
          float d[4][2];
          detail::vector_tile(a, rows, b, K, d);
          for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) store(n + c, r, d[r][c]);
        }
        continue;
      }
#endif
      for (index_t n = n0; n < n1; ++n) {
        float d[4];
        detail::fixed_order_dots(a, rows, B + n * ldb, K, d);
        for (int r = 0; r < rows; ++r) store(n, r, d[r]);
      }
    }
  });
}

}  // namespace ft
