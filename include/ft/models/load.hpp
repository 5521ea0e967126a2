#pragma once
// From an HF model directory to a model: read config.json, pick the family
// whose `hf_architectures` lists its architecture, let the family describe
// the shape and weight map, build the model, load the weights.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ft/io/hf_config.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/models/transformer.hpp"
#include "ft/stock.hpp"

namespace ft::models {

// Whether one of Families lists this config.json architecture.
template <class... Families>
bool reads_architecture(std::string_view architecture) {
  auto lists = [&]<class F>() { return std::ranges::find(F::hf_architectures, architecture) != F::hf_architectures.end(); };
  return (lists.template operator()<Families>() || ...);
}

template <class... Families>
ModelReading read_model_of(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a model directory");
  if (!std::filesystem::exists(file)) throw Error(dir.string() + ": no config.json in this model directory");
  const nlohmann::json json = io::read_json_file(file);
  ConfigReader reader(json, file);
  const std::string architecture = reader.architecture();
  ModelReading out;
  auto try_family = [&]<class F>() {
    if (!out.family.empty() || std::ranges::find(F::hf_architectures, architecture) == F::hf_architectures.end())
      return;
    out.spec = F::describe(reader);
    out.family = F::name;
    out.linear_modules.assign(F::linear_modules.begin(), F::linear_modules.end());
    out.default_lora_targets.assign(F::default_lora_targets.begin(), F::default_lora_targets.end());
  };
  (try_family.template operator()<Families>(), ...);
  if (out.family.empty()) {
    std::string supported;
    auto list = [&]<class F>() {
      for (std::string_view a : F::hf_architectures) supported += (supported.empty() ? "" : ", ") + std::string(a);
    };
    (list.template operator()<Families>(), ...);
    reader.fail("architecture \"" + architecture + "\" is not supported; supported: " + supported);
  }
  return out;
}

template <class... Families>
ModelSpec read_model_spec_of(const std::filesystem::path& dir) {
  return read_model_of<Families...>(dir).spec;
}

// The families ft ships (ft/stock.hpp).
inline ModelReading read_model(const std::filesystem::path& dir) {
  return []<class... F>(std::tuple<F...>*, const std::filesystem::path& d) {
    return read_model_of<F...>(d);
  }(static_cast<stock::Families*>(nullptr), dir);
}
inline bool stock_reads(std::string_view architecture) {
  return []<class... F>(std::tuple<F...>*, std::string_view a) {
    return reads_architecture<F...>(a);
  }(static_cast<stock::Families*>(nullptr), architecture);
}
inline ModelSpec read_model_spec(const std::filesystem::path& dir) { return read_model(dir).spec; }

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
