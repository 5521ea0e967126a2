#pragma once
// How an inference engine loads a model beyond what its files say: a
// whole-precision base quantized to 4 bits as it loads (--quantize, or the
// quantization a QLoRA adapter was trained over). It crosses the plugin
// boundary as JSON text: {"quantize": {"quant_type": "nf4", "blocksize": 64,
// "double_quant": false}}, or {} to load the files as they are.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/quant/four_bit_weight.hpp"

namespace ft::infer {

struct LoadOptions {
  std::optional<quant::FourBitOptions> quantize;
};

inline std::string to_json(const LoadOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  if (o.quantize)
    j["quantize"] = {{"quant_type", std::string(quant::name_of(o.quantize->type))},
                     {"blocksize", o.quantize->blocksize},
                     {"double_quant", o.quantize->double_quant}};
  return j.dump();
}

inline LoadOptions load_options_from_json(const char* text) {
  LoadOptions o;
  if (!text || !*text) return o;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (const auto q = j.find("quantize"); q != j.end()) {
      const std::string type = q->at("quant_type").get<std::string>();
      if (type != "nf4" && type != "fp4") throw Error("quant_type \"" + type + "\" is not nf4 or fp4");
      o.quantize = quant::FourBitOptions{type == "nf4" ? quant::FourBit::nf4 : quant::FourBit::fp4,
                                         q->at("blocksize").get<quant::count_t>(), q->at("double_quant").get<bool>()};
      if (!quant::valid_4bit_blocksize(o.quantize->blocksize))
        throw Error("block size " + std::to_string(o.quantize->blocksize) + " is not one bitsandbytes allows");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("internal: the engine's load options are not what this plugin reads: ") + e.what());
  }
  return o;
}

}  // namespace ft::infer
