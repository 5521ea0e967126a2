#pragma once
// A model back to an HF directory: the weight map read backwards (fused ft
// parameters split into HF's tensors, GPT-NeoX's qkv rows re-interleaved), in
// a chosen dtype, plus every non-weight file of the directory the model came
// from (config.json, tokenizer, chat template, generation config) and the
// source's tensors the spec carries (a vision tower beside a text model), so
// the result loads in transformers as it is.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ft/io/model_files.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/models/transformer.hpp"

namespace ft::models {

// The model's weights as HF's tensors, each encoded in dtype_of(its name)
// ("F32", "BF16" or "F16") a run of rows at a time as the writer reaches it
// (no copy of a tensor, nor of the model), then the tensors of `source_dir`
// the spec carries. The model must outlive the tensors.
template <element T, class Device, class DtypeOf>
std::vector<io::TensorToWrite> hf_tensors(Transformer<T, Device>& model, const std::filesystem::path& source_dir,
                                          const DtypeOf& dtype_of) {
  namespace fs = std::filesystem;
  std::vector<io::TensorToWrite> tensors;
  for (const WeightBinding& w : model.spec().weights) {
    std::string dtype = dtype_of(w.hf_name);
    tensors.push_back({w.hf_name, dtype, model.hf_shape(w), {}, [&model, &w, dtype](const io::ByteSink& put) {
                         std::vector<std::byte> bytes;
                         model.read_hf_rows(w, false, [&](std::span<const T> rows) {
                           io::encode_elements(rows, dtype, bytes);
                           put(bytes);
                         });
                       }});
  }
  // A source without weights (`ftrun init` from a config) has nothing to carry.
  auto has_weights = [&] {
    return std::ranges::any_of(fs::directory_iterator(source_dir), [](const fs::directory_entry& e) {
      return e.is_regular_file() && io::is_weight_file(e.path());
    });
  };
  if (!model.spec().carried.empty() && has_weights()) {
    auto source = std::make_shared<const io::ModelWeights>(io::ModelWeights::open(source_dir));
    for (const std::string& name : source->names()) {
      auto carried = [&](const std::string& prefix) { return name.starts_with(prefix); };
      if (!std::ranges::any_of(model.spec().carried, carried)) continue;
      std::string dtype = dtype_of(name);
      tensors.push_back({name, dtype, source->at(name).shape, {}, io::whole_bytes([source, name, dtype] {
                           std::vector<float> values(std::size_t(source->at(name).numel()));
                           io::copy_elements(*source, name, values.data(), std::int64_t(values.size()));
                           return io::encode_floats(values, dtype);
                         })});
    }
  }
  return tensors;
}

// Writes the model's weights (dtype "F32", "BF16" or "F16") and copies the
// other files of `source_dir` into `dir`, which must exist.
template <element T, class Device>
void save_pretrained(Transformer<T, Device>& model, const std::filesystem::path& source_dir, const std::filesystem::path& dir,
                     const std::string& dtype, std::uint64_t max_shard_bytes = 5'000'000'000ull) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(source_dir))
    if (entry.is_regular_file() && !io::is_weight_file(entry.path()))
      fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  io::write_model_safetensors(dir, hf_tensors(model, source_dir, [&](const std::string&) { return dtype; }),
                              max_shard_bytes);
}

}  // namespace ft::models
