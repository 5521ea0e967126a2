#pragma once
// From an HF model directory to what a family makes of it: read
// config.json, pick the family whose `hf_architectures` lists its
// architecture, let the family describe the shape and weight map. Without
// the model's code, so that what only reads a model (ftrun's commands, the
// estimate's callers) does not compile the layers; models/load.hpp builds
// and loads the model itself.
#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <tuple>

#include "ft/io/bnb_4bit.hpp"
#include "ft/io/gptq.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/models/weight_map.hpp"
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
  // Refuses quantizations ft does not read.
  (void)io::bnb_4bit_config(json, file.string());
  (void)io::gptq_config(json, file.string());
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

}  // namespace ft::models
