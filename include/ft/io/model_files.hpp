#pragma once
// Writing an HF model's weights the way transformers does: one
// `model.safetensors` when everything fits in one shard, otherwise
// `model-00001-of-0000N.safetensors` files and `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}).
// Tensors keep their order; a shard closes when the next tensor would push it
// past the limit (a tensor larger than the limit gets a shard of its own).
//
// Each file is written atomically (write_safetensors writes a temporary file
// and renames it). A whole directory is made atomic by its caller: ftrun
// convert writes into a temporary directory and renames that.
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/half.hpp"
#include "ft/io/safetensors.hpp"

namespace ft::io {

// Files that hold an HF model's weights (everything else in a model directory
// is configuration, tokenizer or templates, and travels with converted or saved models).
inline bool is_weight_file(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".safetensors" || name == "model.safetensors.index.json" ||
         name.rfind("pytorch_model", 0) == 0;
}

// The safetensors dtype name of an element type.
template <class T>
std::string safetensors_dtype_of() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, bf16>) return "BF16";
  else if constexpr (std::is_same_v<T, f16>) return "F16";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "U8";
  else static_assert(sizeof(T) == 0, "no safetensors dtype for this type");
}

// Progress of long work: bytes or items done out of a total.
using ProgressCallback = std::function<void(std::uint64_t done, std::uint64_t total)>;

inline void write_model_safetensors(const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
                                    std::uint64_t max_shard_bytes,
                                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                                    const ProgressCallback& progress = {}) {
  std::vector<std::vector<TensorToWrite>> shards(1);
  std::uint64_t shard_bytes = 0, total = 0;
  for (const TensorToWrite& t : tensors) {
    const std::uint64_t size = detail::tensor_bytes(t);
    if (!shards.back().empty() && shard_bytes + size > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += size;
    total += size;
  }
  std::uint64_t done = 0;
  const auto wrote = [&](std::uint64_t bytes) {
    done += bytes;
    if (progress) progress(done, total);
  };
  if (shards.size() == 1) {
    write_safetensors(dir / "model.safetensors", shards[0], metadata, wrote);
    return;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors(dir / name, shards[i], metadata, wrote);
    for (const TensorToWrite& t : shards[i]) index["weight_map"][t.name] = name;
  }
  const std::filesystem::path file = dir / "model.safetensors.index.json";
  const std::filesystem::path temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary);
    out << index.dump(2) << "\n";
    if (!out) throw Error(file.string() + ": cannot be written");
  }
  std::filesystem::rename(temporary, file);
}

// The HF dtype names ft converts between, as safetensors spells them.
inline std::string safetensors_dtype(std::string_view name, const std::string& where) {
  if (name == "float32" || name == "F32") return "F32";
  if (name == "bfloat16" || name == "BF16") return "BF16";
  if (name == "float16" || name == "F16") return "F16";
  throw Error(where + ": dtype \"" + std::string(name) + "\" is not supported; allowed: float32, bfloat16, float16");
}

// Values as the bytes of a safetensors float dtype (F32, BF16 or F16), into
// `out` (resized to fit). Each value passes through float, which holds every
// f32, bf16 and f16 exactly, so it is rounded once.
template <class T>
void encode_elements(std::span<const T> values, const std::string& dtype, std::vector<std::byte>& out) {
  auto encode = [&]<class D>(D) {
    out.resize(values.size() * sizeof(D));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const D d(static_cast<float>(values[i]));
      std::memcpy(out.data() + i * sizeof(D), &d, sizeof(D));
    }
  };
  if (dtype == "F32") encode(float{});
  else if (dtype == "BF16") encode(bf16{});
  else encode(f16{});
}

// Float values as the bytes of a safetensors float dtype, and back.
inline std::vector<std::byte> encode_floats(const std::vector<float>& values, const std::string& dtype) {
  std::vector<std::byte> out;
  encode_elements(std::span<const float>(values), dtype, out);
  return out;
}

inline std::vector<float> decode_floats(std::span<const std::byte> bytes, const std::string& dtype) {
  const std::size_t width = dtype == "F32" ? 4 : 2, n = bytes.size() / width;
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == "F32") {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = dtype == "BF16" ? float(bf16::from_bits(bits)) : float(f16::from_bits(bits));
    }
  }
  return out;
}

// A floating-point tensor's bytes in another floating-point dtype (a copy
// when the dtype is the same: bit-exact). Integer tensors keep their dtype.
inline std::vector<std::byte> convert_tensor(const SafetensorsFile& file, const TensorView& t,
                                             const std::string& dtype) {
  bool floating = t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64";
  if (!floating || t.dtype == dtype) return std::vector<std::byte>(t.bytes.begin(), t.bytes.end());
  std::vector<float> values(std::size_t(t.numel()));
  copy_elements(file, t, values.data(), t.numel());
  return encode_floats(values, dtype);
}

}  // namespace ft::io
