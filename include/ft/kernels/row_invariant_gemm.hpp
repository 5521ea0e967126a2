#pragma once
// C = alpha * A B^T + beta * C (A [M, K], B [N, K], row-major) with every
// element one dot product summed in a fixed order: 16 running sums over k,
// then a fixed tree, by the same instructions for every row. A row's result is therefore the same whatever other
// rows share the call. BLAS picks its inner kernels by the matrix sizes and
// rounds a row differently in different batches; inference needs the same
// answer for a sequence alone or batched with others (infer/engine.hpp turns
// this on for its steps with RowInvariantGemm, and gemm() then takes this
// path for every product of that form).
//
// Each task holds a block of B's rows in cache while all rows of A pass over
// it, four at a time sharing each load of B: at inference B is a weight
// matrix and A a few rows of activations.
#include <algorithm>

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
      for (index_t n = n0; n < n1; ++n) {
        float d[4];
        detail::fixed_order_dots(a, rows, B + n * ldb, K, d);
        for (int r = 0; r < rows; ++r) {
          T& c = C[(m0 + r) * ldc + n];
          c = T(beta == 0.0f ? alpha * d[r] : alpha * d[r] + beta * float(c));
        }
      }
    }
  });
}

}  // namespace ft
