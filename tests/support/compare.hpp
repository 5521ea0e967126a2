#pragma once
// Reading reference tensors and comparing against them, for the tests that
// check ft against fixtures dumped from HF Transformers and PEFT.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/tensors.hpp"

namespace ft::testing {

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
