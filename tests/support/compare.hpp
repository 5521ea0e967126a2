#pragma once
// Reading reference tensors and comparing against them, for the tests that
// check ft against fixtures dumped from HF Transformers and PEFT.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <ft/io/safetensors.hpp>

namespace ft::testing {

// A whole tensor of a safetensors file, converted to T.
template <class T>
std::vector<T> read_tensor(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorView& t = file.at(name);
  std::vector<T> out(std::size_t(t.numel()));
  io::copy_elements(file, t, out.data(), t.numel());
  return out;
}

// max |got - want| / max |want|: the error relative to the tensor's scale.
template <class A, class B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace ft::testing
