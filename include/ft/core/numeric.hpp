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

/// The element types tensors hold.
template <class T>
concept element = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bf16> ||
                  std::same_as<T, f16>;

template <element T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }

// The element type of a DType (the inverse of dtype_of).
template <DType D> struct element_of;
template <> struct element_of<DType::f32> { using type = float; };
template <> struct element_of<DType::f64> { using type = double; };
template <> struct element_of<DType::bf16> { using type = bf16; };
template <> struct element_of<DType::f16> { using type = f16; };
template <DType D> using element_t = typename element_of<D>::type;

}  // namespace ft
