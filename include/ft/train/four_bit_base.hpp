#pragma once
// A run's quantized base (QLoRA's 4-bit, or GPTQ's): what the recipe asks
// for ([model] quantize, or transformers' load_in_4bit and bnb_4bit_*
// names) and what the model's files already hold (config.json's
// quantization_config). Files that are quantized stay as they are; a recipe
// that asks for another type is refused rather than silently ignored.
#include <filesystem>
#include <optional>
#include <string>

#include "ft/core/error.hpp"
#include "ft/io/bnb_4bit.hpp"
#include "ft/io/gptq.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::train {

struct FourBitBase {
  std::optional<quant::FourBitOptions> quantize;  // quantized as the weights load
  std::optional<quant::FourBitOptions> stored;    // the files' own
  std::optional<io::GptqConfig> gptq;              // a GPTQ model's
  bool any() const { return quantize || stored || gptq; }
  // What the base is, for messages: "a 4-bit base (...)" or "a GPTQ base (...)".
  std::string named() const { return std::string(gptq ? "a GPTQ base (" : "a 4-bit base (") + describe() + ")"; }

  std::string describe() const {
    if (gptq)
      return std::to_string(gptq->bits) + "-bit codes in " +
             (gptq->group_size == -1 ? std::string("one group a row") : "groups of " + std::to_string(gptq->group_size)) +
             ", as the files hold it";
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
  const nlohmann::json json = io::read_json_file(config);
  base.stored = io::bnb_4bit_config(json, config.string());
  base.gptq = io::gptq_config(json, config.string());
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
  if (base.gptq)
    throw Error("model.quantize asks for " + std::string(quant::name_of(*asked)) + ", but " + m.path +
                " holds GPTQ weights, which train as they are; set it to \"none\"");
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

// The 4-bit options the base is quantized with as it loads, or none (the
// recipe asks for no quantization, or the files are quantized already).
inline std::optional<quant::FourBitOptions> quantized_on_load(const recipe::Recipe& r) {
  if (r.model.quantize == "none" && !r.model.load_in_4bit) return std::nullopt;
  return four_bit_base(r).quantize;
}

}  // namespace ft::train
