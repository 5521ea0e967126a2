#pragma once
// A model back to an HF directory: the weight map read backwards (fused ft
// parameters split into HF's tensors, GPT-NeoX's qkv rows re-interleaved), in
// a chosen dtype, plus every non-weight file of the directory the model came
// from (config.json, tokenizer, chat template, generation config), so the
// result loads in transformers as it is.
#include <filesystem>
#include <string>
#include <vector>

#include "ft/io/model_files.hpp"
#include "ft/models/transformer.hpp"

namespace ft::models {

// HF tensor `hf_name` of the model, as floats in HF's layout.
template <element T>
std::vector<float> hf_tensor(Transformer<T>& model, const WeightBinding& w, std::vector<std::int64_t>& shape) {
  auto [buffer, entry] = model.find_parameter(w.param);
  const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
  index_t end = entry->shape[0];
  for (const WeightBinding& other : model.spec().weights)
    if (other.param == w.param && other.row_offset > w.row_offset) end = std::min(end, other.row_offset);
  const index_t rows = end - w.row_offset;
  const T* src = buffer->values().data() + entry->offset + w.row_offset * cols;
  std::vector<float> out(std::size_t(rows * cols));
  for (index_t r = 0; r < rows; ++r) {
    const index_t dst = hf_row(w.order, r, rows, model.config().num_heads);
    for (index_t c = 0; c < cols; ++c) out[std::size_t(dst * cols + c)] = float(src[r * cols + c]);
  }
  shape = entry->shape.rank == 2 ? std::vector<std::int64_t>{rows, cols} : std::vector<std::int64_t>{rows};
  return out;
}

inline bool is_weight_file(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".safetensors" || p.extension() == ".bin" || name == "model.safetensors.index.json" ||
         name == "pytorch_model.bin.index.json";
}

// Writes the model's weights (dtype "F32", "BF16" or "F16") and copies the
// other files of `source_dir` into `dir`, which must exist.
template <element T>
void save_pretrained(Transformer<T>& model, const std::filesystem::path& source_dir, const std::filesystem::path& dir,
                     const std::string& dtype, std::uint64_t max_shard_bytes = 5'000'000'000ull) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(source_dir))
    if (entry.is_regular_file() && !is_weight_file(entry.path()))
      fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  std::vector<std::vector<std::byte>> bytes;
  bytes.reserve(model.spec().weights.size());
  std::vector<io::TensorToWrite> tensors;
  for (const WeightBinding& w : model.spec().weights) {
    std::vector<std::int64_t> shape;
    bytes.push_back(io::encode_floats(hf_tensor(model, w, shape), dtype));
    tensors.push_back({w.hf_name, dtype, shape, bytes.back()});
  }
  io::write_model_safetensors(dir, tensors, max_shard_bytes);
}

}  // namespace ft::models
