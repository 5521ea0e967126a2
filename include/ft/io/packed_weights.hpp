#pragma once
// Weights a model's files hold quantized, whatever the format: bitsandbytes'
// 4-bit layout (io/bnb_4bit.hpp) or GPTQ's (io/gptq.hpp). A 4-bit base
// (models/quantized_weights.hpp) keeps them packed as they are read.
#include <filesystem>
#include <memory>
#include <string>

#include "ft/io/bnb_4bit.hpp"
#include "ft/io/gptq.hpp"
#include "ft/io/hf_config.hpp"

namespace ft::io {

// Whether HF weight `name` is stored quantized in these files.
inline bool stored_packed(const ModelWeights& weights, const std::string& name) {
  return bnb_4bit_type(weights, name).has_value() || gptq_module(weights, name).has_value();
}

// HF weight `name` as the files store it quantized.
inline std::shared_ptr<const quant::PackedWeight> read_packed(const ModelWeights& weights, const std::string& name) {
  if (bnb_4bit_type(weights, name)) return std::make_shared<const quant::FourBitWeight>(read_bnb_4bit(weights, name));
  const std::filesystem::path file = weights.source().parent_path() / "config.json";
  const std::optional<GptqConfig> config = gptq_config(read_json_file(file), file.string());
  if (!config)
    throw Error(weights.source().string() + ": stores " + detail::quoted(name) +
                " as GPTQ codes (qweight), but " + file.string() + " names no GPTQ quantization_config");
  return std::make_shared<const quant::GptqWeight>(read_gptq(weights, name, *config));
}

}  // namespace ft::io
