#pragma once
// Matrix products on the host, row-major, as BLAS spells them:
//   C = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T,
// with C [M, N], op(A) [M, K], op(B) [K, N], and ld* the row strides.
//
// f32 and f64 go straight to BLAS (OpenBLAS reaches about 1.5x Eigen's own
// GEMM on this class of CPU; bench/bench_kernels measures both). 16-bit
// inputs are widened to f32, multiplied with f32 accumulation, and rounded
// back once: the arithmetic a bf16 tensor core does. Inference asks for
// products whose rows do not depend on the batch (row_invariant_gemm.hpp).
#include <cblas.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "ft/core/numeric.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/device/cpu/row_invariant_gemm.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft {

enum class Op { none, transpose };

// The most rows of C one BLAS call computes. OpenBLAS's threaded driver
// packs the whole of a product's rows (times its inner block) into buffers
// of its own that stay resident: one call for a 65536-row weight gradient
// touches 64 MiB there, once, for the rest of the process. In blocks of
// 8192 rows it touches about 10 MiB, which the memory estimate measures,
// for 1-3% on the widest products (measured on this machine's OpenBLAS).
inline constexpr index_t blas_row_block = 8192;

namespace detail {
inline CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::none ? CblasNoTrans : CblasTrans; }

// `call(m0, rows, a)`: rows [m0, m0 + rows) of C, with op(A)'s rows starting at `a`.
template <class S, class Call>
void by_row_blocks(Op op_a, index_t M, const S* A, index_t lda, Call call) {
  for (index_t m0 = 0; m0 < M; m0 += blas_row_block)
    call(m0, std::min(blas_row_block, M - m0), op_a == Op::none ? A + m0 * lda : A + m0);
}

// C = alpha op(A) op(B) + beta C in f32 or f64 through BLAS, a block of rows per call.
template <class S>
void blas_gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, S alpha, const S* A, index_t lda, const S* B,
               index_t ldb, S beta, S* C, index_t ldc) {
  by_row_blocks(op_a, M, A, lda, [&](index_t m0, index_t rows, const S* a) {
    if constexpr (std::is_same_v<S, float>)
      cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), int(rows), int(N), int(K), alpha, a, int(lda), B,
                  int(ldb), beta, C + m0 * ldc, int(ldc));
    else
      cblas_dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), int(rows), int(N), int(K), alpha, a, int(lda), B,
                  int(ldb), beta, C + m0 * ldc, int(ldc));
  });
}

// Rows x cols of a row-major matrix with leading dimension ld, widened to f32.
template <class T>
memory::HostVector<float> widen(const T* x, index_t rows, index_t cols, index_t ld) {
  memory::HostVector<float> out(std::size_t(rows * cols));
  cpu::parallel_for(rows, [&](index_t r) {
    for (index_t c = 0; c < cols; ++c) out[std::size_t(r * cols + c)] = float(x[r * ld + c]);
  });
  return out;
}
}  // namespace detail

template <element T>
void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, acc_t<T> alpha, const T* A, index_t lda,
          const T* B, index_t ldb, acc_t<T> beta, T* C, index_t ldc) {
  if (M == 0 || N == 0) return;
  if constexpr (!std::is_same_v<T, double>) {
    if (detail::row_invariant_gemm && op_a == Op::none && op_b == Op::transpose)
      return gemm_row_invariant(M, N, K, float(alpha), A, lda, B, ldb, float(beta), C, ldc);
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    detail::blas_gemm<T>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    index_t a_rows = op_a == Op::none ? M : K, a_cols = op_a == Op::none ? K : M;
    index_t b_rows = op_b == Op::none ? K : N, b_cols = op_b == Op::none ? N : K;
    memory::HostVector<float> a = detail::widen(A, a_rows, a_cols, lda);
    memory::HostVector<float> b = detail::widen(B, b_rows, b_cols, ldb);
    memory::HostVector<float> c =
        beta == 0.0f ? memory::HostVector<float>(std::size_t(M * N)) : detail::widen(C, M, N, ldc);
    detail::blas_gemm<float>(op_a, op_b, M, N, K, alpha, a.data(), a_cols, b.data(), b_cols, beta, c.data(), N);
    cpu::parallel_for(M, [&](index_t r) {
      for (index_t col = 0; col < N; ++col) C[r * ldc + col] = T(c[std::size_t(r * N + col)]);
    });
  }
}

}  // namespace ft
