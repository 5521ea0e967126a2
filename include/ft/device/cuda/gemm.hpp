#pragma once
// Matrix products on the device through cuBLASLt, with ft::gemm's meaning
// (device/cpu/gemm.hpp): row-major C = alpha * op(A) * op(B) + beta * C.
// cuBLASLt is column-major, and a row-major matrix is its transpose seen
// column-major, so C^T = op(B)^T op(A)^T is computed: the operands swap
// places and keep their transposes.
//
// f32 (TF32 tensor cores when asked, as torch.backends.cuda.matmul.allow_tf32),
// bf16 and fp16 with f32 accumulation, f64. The algorithm cuBLASLt's
// heuristic picks for a shape and the operands' alignment is kept with its
// descriptors, so a training step's repeating shapes pay the search once.
// Host code only: the library's C API, not nvcc.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "ft/core/numeric.hpp"
#include "ft/device/cuda/check.hpp"
#include "ft/device/cuda/workspace.hpp"
#include "ft/device/cpu/gemm.hpp"
#include "ft/device/cuda/memory.hpp"

namespace ft::cuda {

inline void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string what =
      failed_call(call) + ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(what, 0);
  throw Error(what);
}

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  else return CUDA_R_16F;
}

class Blas {
public:
  // tf32: f32 products on TF32 tensor cores (10-bit mantissa inputs, f32 sums).
  explicit Blas(cudaStream_t stream = nullptr, bool tf32 = false, std::size_t workspace_bytes = blas_workspace_bytes)
      : stream_(stream), tf32_(tf32), workspace_bytes_(workspace_bytes) {
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    workspace_ = memory::CudaDevice::allocate(workspace_bytes_);
  }
  ~Blas() {
    plans_.clear();
    memory::CudaDevice::deallocate(workspace_, workspace_bytes_);
    cublasLtDestroy(handle_);
  }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // The device memory this handle holds for cuBLASLt's scratch.
  std::size_t workspace_bytes() const { return workspace_bytes_; }

  template <element T>
  void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, acc_t<T> alpha, const T* A, index_t lda,
            const T* B, index_t ldb, acc_t<T> beta, T* C, index_t ldc) {
    if (M == 0 || N == 0) return;
    const Plan& plan = plan_for<T>(op_a, op_b, M, N, K, lda, ldb, ldc, alignment(A), alignment(B), alignment(C));
    check(cublasLtMatmul(handle_, plan.desc, &alpha, B, plan.first, A, plan.second, &beta, C, plan.out, C, plan.out,
                         &plan.algo, workspace_, workspace_bytes_, stream_),
          "cublasLtMatmul");
  }

private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;  // B, A and C, column-major
    cublasLtMatmulAlgo_t algo{};
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
      if (out) cublasLtMatrixLayoutDestroy(out);
      if (second) cublasLtMatrixLayoutDestroy(second);
      if (first) cublasLtMatrixLayoutDestroy(first);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };
  using Key = std::tuple<int, int, int, index_t, index_t, index_t, index_t, index_t, index_t, int, int, int>;
  // A server meets a new row count with each mix of prompts and decodes, so
  // the cache is bounded: when full it is emptied, and the shapes still in
  // use pay one heuristic query each again.
  static constexpr std::size_t max_plans = 4096;

  static cublasOperation_t operation(Op op) { return op == Op::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

  // The largest power of two, up to 256, that divides the address. cuBLASLt's
  // heuristic assumes 256 unless told less, and an algorithm it picks on that
  // assumption refuses an operand that starts inside a buffer (a slice of
  // rows, a head's columns).
  static int alignment(const void* p) { return 1 << std::countr_zero(reinterpret_cast<std::uintptr_t>(p) | 256u); }

  template <class T>
  const Plan& plan_for(Op op_a, Op op_b, index_t M, index_t N, index_t K, index_t lda, index_t ldb, index_t ldc,
                       int align_a, int align_b, int align_c) {
    const Key key{int(cuda_type<T>()), int(op_a), int(op_b), M, N, K, lda, ldb, ldc, align_a, align_b, align_c};
    if (auto found = plans_.find(key); found != plans_.end()) return *found->second;
    if (plans_.size() >= max_plans) plans_.clear();
    auto plan = std::make_unique<Plan>();
    const bool f64 = std::is_same_v<T, double>;
    const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                        : (tf32_ && std::is_same_v<T, float>) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                               : CUBLAS_COMPUTE_32F;
    check(cublasLtMatmulDescCreate(&plan->desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t first_op = operation(op_b), second_op = operation(op_a);
    check(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof(first_op)),
          "cublasLtMatmulDescSetAttribute(TRANSA)");
    check(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &second_op, sizeof(second_op)),
          "cublasLtMatmulDescSetAttribute(TRANSB)");
    // Column-major shapes as stored: row-major [rows, cols] is column-major [cols, rows].
    const index_t b_rows = op_b == Op::none ? K : N, b_cols = op_b == Op::none ? N : K;
    const index_t a_rows = op_a == Op::none ? M : K, a_cols = op_a == Op::none ? K : M;
    check(cublasLtMatrixLayoutCreate(&plan->first, cuda_type<T>(), std::uint64_t(b_cols), std::uint64_t(b_rows), ldb),
          "cublasLtMatrixLayoutCreate(B)");
    check(cublasLtMatrixLayoutCreate(&plan->second, cuda_type<T>(), std::uint64_t(a_cols), std::uint64_t(a_rows), lda),
          "cublasLtMatrixLayoutCreate(A)");
    check(cublasLtMatrixLayoutCreate(&plan->out, cuda_type<T>(), std::uint64_t(N), std::uint64_t(M), ldc),
          "cublasLtMatrixLayoutCreate(C)");
    cublasLtMatmulPreference_t created = nullptr;
    check(cublasLtMatmulPreferenceCreate(&created), "cublasLtMatmulPreferenceCreate");
    // Destroyed however this function leaves.
    const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
        owned(created, &cublasLtMatmulPreferenceDestroy);
    cublasLtMatmulPreference_t preference = owned.get();
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes_, sizeof(workspace_bytes_)),
          "cublasLtMatmulPreferenceSetAttribute");
    // cuBLASLt's A and B are ours swapped (see the top of this file); C is also its D.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::uint32_t(align_b)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::uint32_t(align_a)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::uint32_t(align_c)},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, std::uint32_t(align_c)}};
    for (const auto& [attribute, bytes] : alignments)
      check(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)),
            "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second,
                                                                 plan->out, plan->out, preference, 1, &result, &found);
    check(status, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
      throw Error("cuBLASLt has no algorithm for a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                  std::to_string(K) + " product of this type and layout");
    plan->algo = result.algo;
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  bool tf32_;
  std::size_t workspace_bytes_;
  void* workspace_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ft::cuda
