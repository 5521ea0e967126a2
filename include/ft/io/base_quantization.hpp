#pragma once
// The 4-bit quantization a base was given as it loaded (a QLoRA run's
// model.quantize over whole-precision files), kept beside each adapter
// trained over it. The adapter's numbers fit that 4-bit base, not the
// whole-precision files its adapter_config.json names, so whatever answers
// with the adapter (ftrun generate, chat, serve, eval) loads the base the
// same way. The file holds transformers' quantization_config for it (what
// BitsAndBytesConfig(**json) takes, for a PEFT user) and quant_block_size,
// which transformers does not expose; PEFT ignores the file.
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"
#include "ft/io/bnb_4bit.hpp"
#include "ft/io/hf_config.hpp"

namespace ft::io {

inline constexpr const char* base_quantization_file = "base_quantization.json";

// `T`: the element type the adapter computed in (bnb_4bit_compute_dtype).
template <class T>
void write_base_quantization(const std::filesystem::path& adapter_dir, const quant::FourBitOptions& options) {
  const char* compute = std::is_same_v<T, bf16> ? "bfloat16" : std::is_same_v<T, f16> ? "float16" : "float32";
  nlohmann::json j = bnb_quantization_config(options, compute);
  j["quant_block_size"] = options.blocksize;
  std::ofstream out(adapter_dir / base_quantization_file);
  out << j.dump(2) << "\n";
  if (!out) throw Error((adapter_dir / base_quantization_file).string() + ": cannot be written");
}

// The adapter's base quantization, or nothing when its base loads as its files hold it.
inline std::optional<quant::FourBitOptions> read_base_quantization(const std::filesystem::path& adapter_dir) {
  const std::filesystem::path file = adapter_dir / base_quantization_file;
  if (!std::filesystem::exists(file)) return std::nullopt;
  const nlohmann::json j = read_json_file(file);
  std::optional<quant::FourBitOptions> options = bnb_4bit_config({{"quantization_config", j}}, file.string());
  if (!options) throw Error(file.string() + ": names no bitsandbytes 4-bit quantization");
  const auto block = j.find("quant_block_size");
  if (block != j.end()) {
    if (!block->is_number_integer() || !quant::valid_4bit_blocksize(block->get<std::int64_t>()))
      throw Error(file.string() + ": quant_block_size " + block->dump() +
                  " is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, 2048, 4096)");
    options->blocksize = block->get<std::int64_t>();
  }
  return options;
}

}  // namespace ft::io
