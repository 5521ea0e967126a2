#pragma once
// Element types of tensors. f64 exists for finite-difference checks in tests.
#include <cstddef>
#include <string_view>

namespace ft {

enum class DType { f32, bf16, f16, f64 };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}

constexpr std::string_view name_of(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
  }
  return "?";
}

}  // namespace ft
