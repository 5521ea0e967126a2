#pragma once
// A model back to an HF directory: the weight map read backwards (fused ft
// parameters split into HF's tensors, GPT-NeoX's qkv rows re-interleaved), in
// a chosen dtype, plus every non-weight file of the directory the model came
// from (config.json, tokenizer, chat template, generation config), so the
// result loads in transformers as it is.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ft/io/model_files.hpp"
#include "ft/models/transformer.hpp"

namespace ft::models {

// Writes the model's weights (dtype "F32", "BF16" or "F16") and copies the
// other files of `source_dir` into `dir`, which must exist.
template <element T, class Device>
void save_pretrained(Transformer<T, Device>& model, const std::filesystem::path& source_dir, const std::filesystem::path& dir,
                     const std::string& dtype, std::uint64_t max_shard_bytes = 5'000'000'000ull) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(source_dir))
    if (entry.is_regular_file() && !io::is_weight_file(entry.path()))
      fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  std::vector<io::TensorToWrite> tensors;
  for (const WeightBinding& w : model.spec().weights) {
    // A run of rows at a time, encoded as the writer reaches it: no copy of a tensor, nor of the model.
    std::vector<std::int64_t> hf_shape = model.hf_shape(w);
    tensors.push_back({w.hf_name, dtype, std::move(hf_shape), {}, [&model, &w, &dtype](const io::ByteSink& put) {
                         std::vector<std::byte> bytes;
                         model.read_hf_rows(w, false, [&](std::span<const T> rows) {
                           io::encode_elements(rows, dtype, bytes);
                           put(bytes);
                         });
                       }});
  }
  io::write_model_safetensors(dir, tensors, max_shard_bytes);
}

}  // namespace ft::models
