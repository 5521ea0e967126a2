#pragma once
// Warp-level tensor-core pieces for sm_80 and later: the m16n8k16 matrix
// multiply-accumulate on 16-bit inputs with f32 sums, shared-memory loads of
// its operands (ldmatrix), and asynchronous global-to-shared copies
// (cp.async). Only nvcc compiles this header.
//
// Fragment layouts (PTX ISA, mma.m16n8k16), lane = 4 * group + quad:
//   A 16x16: a0 (row group,   cols 2 quad, +1)   a1 (row group+8, same cols)
//            a2 (row group,   cols 2 quad+8, +9) a3 (row group+8, same cols)
//   B 16x8:  b0 (rows 2 quad, +1; col group)     b1 (rows 2 quad+8, +9; col group)
//   C 16x8:  c0, c1 (row group, cols 2 quad, +1) c2, c3 (row group+8, same cols)
// Two C tiles side by side (16x16 of f32) round to exactly one A operand:
// the accumulators of one product feed the next without shared memory.
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ft/core/half.hpp"

namespace ft::cuda::mma {

// Whether T is a 16-bit type the tensor cores multiply.
template <class T>
inline constexpr bool tensor_core_type = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// Two values rounded to T and packed as one 32-bit register, the lower
// column in the lower half.
template <class T>
__device__ inline std::uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

template <class T>
__device__ inline float2 unpack(std::uint32_t v) {
  if constexpr (std::is_same_v<T, bf16>)
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  else
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// c += a b for one 16x8x16 tile.
template <class T>
__device__ inline void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline std::uint32_t shared_address(const void* p) {
  return std::uint32_t(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit values; lanes 8i..8i+7 give the row addresses
// of matrix i, and register i receives it (transposed with .trans).
__device__ inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// 16 bytes from global to shared memory without passing through registers;
// zero-filled when `valid` is false (rows past the end).
__device__ inline void copy_async_16(void* shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global),
               "r"(valid ? 16 : 0));
}
__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ inline void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Sums of a row's values over the four lanes of a quad (the lanes that hold
// one row of a C tile).
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace ft::cuda::mma
