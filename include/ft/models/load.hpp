#pragma once
// From an HF model directory to a model: the family's reading of it
// (models/read.hpp), the model built to that shape, its weights loaded.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ft/io/model_weights.hpp"
#include "ft/models/read.hpp"
#include "ft/models/transformer.hpp"

namespace ft::models {

// The model in `dir`, read by whichever of Families lists its architecture.
// On a device (device/cpu.hpp, device/cuda.cuh): the weights are read on
// the host and copied there. A model only run forward (inference,
// evaluation) is loaded with trainable = false: it holds no gradient
// buffers, which would be as large as its weights.
template <element T, class Device, class... Families>
std::unique_ptr<Transformer<T, Device>> load_pretrained_of(const std::filesystem::path& dir, bool trainable) {
  auto model = std::make_unique<Transformer<T, Device>>(read_model_spec_of<Families...>(dir), trainable);
  model->load(io::ModelWeights::open(dir));
  return model;
}

// The same, by the families ft ships.
template <element T, class Device = device::Cpu>
std::unique_ptr<Transformer<T, Device>> load_pretrained(const std::filesystem::path& dir, bool trainable = true) {
  return []<class... F>(std::tuple<F...>*, const std::filesystem::path& d, bool t) {
    return load_pretrained_of<T, Device, F...>(d, t);
  }(static_cast<stock::Families*>(nullptr), dir, trainable);
}

}  // namespace ft::models
