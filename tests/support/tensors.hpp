#pragma once
// Reading whole reference tensors from fixture files, for tests with or
// without doctest (the GPU tests print tables instead).
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

}  // namespace ft::testing
