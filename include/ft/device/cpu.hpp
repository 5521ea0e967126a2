#pragma once
// Devices are policies: where a layer's buffers live (a memory space) and
// how its row and element functors run (a launcher), and how it multiplies
// matrices (ft::gemm's meaning: row-major, C = alpha op(A) op(B) + beta C).
// The nn:: functions take one as their first template argument, Cpu by
// default, so the same layer code runs on the host and, with device::Cuda
// (device/cuda.cuh, nvcc only), on a GPU. Functors capture by value and are FT_HOST_DEVICE; pointers they
// hold must be the device's memory.
#include <concepts>
#include <cstring>
#include <string_view>

#include "ft/device/cpu/launch.hpp"
#include "ft/device/cpu/gemm.hpp"
#include "ft/nn/attention_shape.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::device {

struct Cpu {
  static constexpr std::string_view name = "cpu";
  static constexpr std::string_view type_name = "ft::device::Cpu";
  using Memory = memory::Host;
  template <class F>
  static void parallel_for(index_t n, const F& f) {
    cpu::parallel_for(n, f);
  }
  // f(row, team) for each of n rows of `columns` values: a team of one
  // lane here (cpu::SoloTeam).
  template <class F>
  static void parallel_rows(index_t n, index_t columns, const F& f) {
    cpu::parallel_rows(n, columns, f);
  }
  // How many rows one task sums when a column is reduced (a norm's or a
  // bias's gradient): all of them here, where the columns alone keep the
  // threads busy; a GPU splits them (partial sums, then their sum).
  static constexpr index_t column_rows = 0;
  // The product a run measures the device's peak FLOP/s with
  // (train/flops.hpp): n x n in f32 on the CPU. 1024 reaches within a few
  // percent of 2048's FLOP/s here (66-70 against 71-73 GFLOP/s on 2
  // threads) in a seventh of the time: 0.2 s of every run's start, not 1.6.
  static constexpr index_t gemm_peak_size = 1024;
  template <element T>
  using gemm_peak_element = float;
  template <element T>
  static void gemm(Op op_a, Op op_b, index_t M, index_t N, index_t K, acc_t<T> alpha, const T* A, index_t lda,
                   const T* B, index_t ldb, acc_t<T> beta, T* C, index_t ldc) {
    ft::gemm<T>(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  // Copies within the device's memory, from it to the host (waiting for the
  // device) and from the host to it.
  static void copy(void* to, const void* from, std::size_t bytes) {
    if (bytes) std::memcpy(to, from, bytes);
  }
  static void to_host(void* to, const void* from, std::size_t bytes) {
    if (bytes) std::memcpy(to, from, bytes);
  }
  static void from_host(void* to, const void* from, std::size_t bytes) {
    if (bytes) std::memcpy(to, from, bytes);
  }
  // Causal attention by the CPU's tiled kernels, for every shape (true).
  // Defined beside them (device/cpu/attention.hpp), which nn/attention_rows.hpp
  // includes, so only code that attends compiles them.
  template <element T>
  static bool attention_forward(T* out, acc_t<T>* lse, const T* qkv, const std::int32_t* documents,
                                const nn::AttentionShape& s);
  template <element T>
  static bool attention_backward(T* dqkv, const T* dout, const T* out, const acc_t<T>* lse, const T* qkv,
                                 const std::int32_t* documents, const nn::AttentionShape& s);
};

/// A device, a Trainer's sixth policy: its memory space and the kernels the
/// engine launches there (device::Cpu here, device::Cuda in device/cuda.cuh).
template <class D>
concept device = memory::memory_space<typename D::Memory> && requires(void* p, const void* q, std::size_t n) {
  { D::name } -> std::convertible_to<std::string_view>;
  { D::type_name } -> std::convertible_to<std::string_view>;
  D::copy(p, q, n);
  D::to_host(p, q, n);
  D::from_host(p, q, n);
};
static_assert(device<Cpu>);

}  // namespace ft::device
