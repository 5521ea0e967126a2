#pragma once
// A run's 4-bit base (QLoRA): what the recipe asks for ([model] quantize,
// or transformers' load_in_4bit and bnb_4bit_* names) and what the model's
// files already hold (config.json's quantization_config). Files that are
// 4-bit stay as they are; a recipe that asks for another type is refused
// rather than silently ignored.
#include <filesystem>
#include <optional>
#include <string>

#include "ft/core/error.hpp"
#include "ft/io/bnb_4bit.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::train {

struct FourBitBase {
  std::optional<quant::FourBitOptions> quantize;  // quantized as the weights load
  std::optional<quant::FourBitOptions> stored;    // the files' own
  bool any() const { return quantize || stored; }

  std::string describe() const {
    const quant::FourBitOptions& o = quantize ? *quantize : *stored;
    std::string s = std::string(quant::name_of(o.type)) + (o.double_quant ? " with double quantization" : "");
    if (quantize) s += ", blocks of " + std::to_string(o.blocksize) + ", quantized as it loads";
    else s += ", as the files hold it";
    return s;
  }
};

inline FourBitBase four_bit_base(const recipe::Recipe& r) {
  const recipe::ModelSection& m = r.model;
  const std::filesystem::path config = std::filesystem::path(m.path) / "config.json";
  FourBitBase base;
  base.stored = io::bnb_4bit_config(io::read_json_file(config), config.string());
  std::optional<quant::FourBit> asked;
  if (m.quantize != "none") asked = m.quantize.ends_with("nf4") ? quant::FourBit::nf4 : quant::FourBit::fp4;
  if (m.load_in_4bit) {
    const quant::FourBit type = m.bnb_4bit_quant_type == "nf4" ? quant::FourBit::nf4 : quant::FourBit::fp4;
    if (asked && *asked != type)
      throw Error("model.quantize = \"" + m.quantize + "\" and model.load_in_4bit with bnb_4bit_quant_type = \"" +
                  m.bnb_4bit_quant_type + "\" ask for different 4-bit types; set one of them");
    asked = type;
  }
  if (!asked) {
    if (m.bnb_4bit_use_double_quant || m.quant_block_size != 64)
      throw Error("model.bnb_4bit_use_double_quant and model.quant_block_size shape a 4-bit base, but the recipe "
                  "asks for none; set model.quantize = \"nf4\" (or \"fp4\")");
    return base;
  }
  if (base.stored) {
    if (base.stored->type != *asked)
      throw Error("model.quantize asks for " + std::string(quant::name_of(*asked)) + ", but " + m.path +
                  " already holds " + std::string(quant::name_of(base.stored->type)) +
                  " weights; ask for that type, or none");
    return base;
  }
  base.quantize = quant::FourBitOptions{*asked, m.quant_block_size, m.bnb_4bit_use_double_quant};
  return base;
}

}  // namespace ft::train
