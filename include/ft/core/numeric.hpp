#pragma once
// Which type a kernel accumulates in, for each element type it stores.
// 16-bit types accumulate in float; float in float; double (tests) in double.
#include <concepts>

#include "ft/core/dtype.hpp"
#include "ft/core/half.hpp"

namespace ft {

template <class T> struct accumulate_as { using type = T; };
template <> struct accumulate_as<bf16> { using type = float; };
template <> struct accumulate_as<f16> { using type = float; };
template <class T> using acc_t = typename accumulate_as<T>::type;

// The element types tensors hold.
template <class T>
concept element = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bf16> ||
                  std::same_as<T, f16>;

template <element T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }

}  // namespace ft
