#pragma once
// Weights in bitsandbytes' 4-bit layout, as transformers saves a model
// loaded with load_in_4bit: a weight W becomes
//   W                                      U8 [(numel + 1) / 2, 1], the packed codes
//   W.absmax                               F32 [blocks], or U8 [blocks] when double-quantized
//   W.quant_map                            F32 [16], the code book
//   W.nested_absmax, W.nested_quant_map    F32, with double quantization only
//   W.quant_state.bitsandbytes__nf4|fp4    U8: JSON of the rest (type, block size,
//                                          dtype, shape, nested block size and offset)
// and config.json gains a `quantization_config` (quant_method
// "bitsandbytes"). Reading checks every piece against the others, so a
// corrupt or mismatched state is an error naming the tensor, never a
// silently wrong weight.
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/io/model_weights.hpp"
#include "ft/quant/four_bit_weight.hpp"

namespace ft::io {

namespace detail {

inline const std::string bnb_state_key = ".quant_state.bitsandbytes__";

// A double as Python's repr writes it (json.dumps does): the shortest
// digits that read back the same, fixed between 1e-4 and 1e16, else
// scientific with a signed exponent of at least two digits.
inline std::string python_float(double v) {
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  (void)ec;
  std::string s(buf, end);
  const std::size_t e = s.find('e');
  const int exponent = std::stoi(s.substr(e + 1));
  std::string digits;
  const bool negative = s[0] == '-';
  for (char c : s.substr(0, e))
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(std::size_t(-exponent - 1), '0') + digits;
    } else if (std::size_t(exponent) + 1 >= digits.size()) {
      out += digits + std::string(std::size_t(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, std::size_t(exponent) + 1) + "." + digits.substr(std::size_t(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int a = exponent < 0 ? -exponent : exponent;
  return out + "e" + (exponent < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace detail

// The JSON bitsandbytes packs beside the codes, byte for byte as it writes it.
inline std::string bnb_quant_state_json(const quant::FourBitWeight& w) {
  std::string shape;
  for (std::size_t i = 0; i < w.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(w.shape[i]);
  std::string s = "{\"quant_type\": \"" + std::string(quant::name_of(w.type)) + "\", \"blocksize\": " +
                  std::to_string(w.blocksize) + ", \"dtype\": \"" + w.dtype + "\", \"shape\": [" + shape + "]";
  if (w.nested)
    s += ", \"nested_blocksize\": " + std::to_string(w.nested->blocksize) +
         ", \"nested_dtype\": \"float32\", \"nested_offset\": " + detail::python_float(double(w.nested->offset));
  return s + "}";
}

// The 4-bit type a weight is stored in, or none when it is stored whole.
inline std::optional<quant::FourBit> bnb_4bit_type(const ModelWeights& weights, const std::string& name) {
  if (weights.find(name + detail::bnb_state_key + "nf4")) return quant::FourBit::nf4;
  if (weights.find(name + detail::bnb_state_key + "fp4")) return quant::FourBit::fp4;
  return std::nullopt;
}

// Whether tensor `name` is part of a 4-bit weight's state (its absmax,
// quant maps or quant state), which travels with the weight.
inline bool is_bnb_4bit_state(const ModelWeights& weights, const std::string& name) {
  for (const char* suffix : {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"})
    if (name.ends_with(suffix) && bnb_4bit_type(weights, name.substr(0, name.size() - std::strlen(suffix))))
      return true;
  const std::size_t at = name.find(detail::bnb_state_key);
  return at != std::string::npos && bnb_4bit_type(weights, name.substr(0, at)).has_value();
}

// Weight `name` as these files hold it in bitsandbytes' 4-bit layout.
inline quant::FourBitWeight read_bnb_4bit(const ModelWeights& weights, const std::string& name) {
  const std::optional<quant::FourBit> type = bnb_4bit_type(weights, name);
  if (!type) throw Error(weights.source().string() + ": " + name + " is not stored in 4 bits");
  const std::string state_name = name + detail::bnb_state_key + std::string(quant::name_of(*type));
  auto fail = [&](const std::string& what) -> Error {
    return Error(weights.source().string() + ": the 4-bit state of " + detail::quoted(name) + " " + what);
  };
  auto raw = [&](const std::string& tensor) -> const TensorView& {
    const TensorView* t = weights.find(tensor);
    if (!t) throw fail("lacks " + detail::quoted(tensor));
    return *t;
  };
  auto float_vector = [&](const std::string& tensor, std::int64_t count) {
    const TensorView& t = raw(tensor);
    if (t.dtype != "F32" || t.numel() != count)
      throw fail("has " + detail::quoted(tensor) + " of " + t.dtype + " " + detail::shape_string(t.shape) + ", expected F32 of " +
                 std::to_string(count) + " values");
    std::vector<float> v(static_cast<std::size_t>(count));
    std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
    return v;
  };
  auto byte_vector = [&](const std::string& tensor, std::size_t count) {
    const TensorView& t = raw(tensor);
    if (t.bytes.size() != count)
      throw fail("has " + detail::quoted(tensor) + " of " + std::to_string(t.bytes.size()) + " bytes, expected " +
                 std::to_string(count));
    std::vector<std::uint8_t> v(count);
    std::memcpy(v.data(), t.bytes.data(), count);
    return v;
  };

  nlohmann::json state;
  {
    const TensorView& t = raw(state_name);
    try {
      state = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()));
    } catch (const nlohmann::json::exception&) {
      throw fail("is not valid JSON (" + detail::quoted(state_name) + ")");
    }
  }
  quant::FourBitWeight w;
  w.type = *type;
  try {
    if (state.at("quant_type").get<std::string>() != quant::name_of(*type))
      throw fail("says quant_type " + state.at("quant_type").dump() + " under a key for " + std::string(quant::name_of(*type)));
    w.blocksize = state.at("blocksize").get<std::int64_t>();
    w.dtype = state.at("dtype").get<std::string>();
    w.shape = state.at("shape").get<std::vector<std::int64_t>>();
  } catch (const nlohmann::json::exception&) {
    throw fail("lacks quant_type, blocksize, dtype or shape, or holds one of the wrong type");
  }
  if (!quant::valid_4bit_blocksize(w.blocksize))
    throw fail("has block size " + std::to_string(w.blocksize) +
               ", which bitsandbytes does not allow (32, 64, 128, 256, 512, 1024, 2048, 4096)");
  if (w.dtype != "float32" && w.dtype != "bfloat16" && w.dtype != "float16")
    throw fail("has dtype " + detail::quoted(w.dtype) + "; expected float32, bfloat16 or float16");
  for (std::int64_t d : w.shape)
    if (d <= 0) throw fail("has shape " + detail::shape_string(w.shape));
  const quant::count_t blocks = w.blocks();
  w.packed = byte_vector(name, std::size_t((w.numel() + 1) / 2));
  const std::vector<float> code = float_vector(name + ".quant_map", 16);
  if (std::memcmp(code.data(), quant::code_of(*type).data(), sizeof(float) * 16) != 0)
    throw fail("has a quant_map that is not bitsandbytes' " + std::string(quant::name_of(*type)) + " code book");
  if (weights.find(name + ".nested_absmax")) {
    quant::FourBitWeight::Nested nested;
    try {
      nested.blocksize = state.at("nested_blocksize").get<std::int64_t>();
      nested.offset = float(state.at("nested_offset").get<double>());
    } catch (const nlohmann::json::exception&) {
      throw fail("has nested_absmax but no nested_blocksize or nested_offset");
    }
    if (nested.blocksize <= 0) throw fail("has nested block size " + std::to_string(nested.blocksize));
    nested.codes = byte_vector(name + ".absmax", std::size_t(blocks));
    nested.absmax = float_vector(name + ".nested_absmax", quant::block_count(blocks, nested.blocksize));
    const std::vector<float> nested_code = float_vector(name + ".nested_quant_map", 256);
    if (std::memcmp(nested_code.data(), quant::dynamic_code.data(), sizeof(float) * 256) != 0)
      throw fail("has a nested_quant_map that is not bitsandbytes' dynamic map");
    w.nested = std::move(nested);
  } else {
    w.absmax = float_vector(name + ".absmax", blocks);
  }
  return w;
}

// The tensors bitsandbytes saves for weight `name`.
inline std::vector<TensorToWrite> bnb_4bit_tensors(const std::string& name,
                                                   std::shared_ptr<const quant::FourBitWeight> w) {
  auto owned = [](std::vector<std::byte> bytes) {
    return whole_bytes([b = std::move(bytes)] { return b; });
  };
  std::vector<TensorToWrite> out;
  out.push_back({name, "U8", {std::int64_t(w->packed.size()), 1}, {}, owned(detail::bytes_of(w->packed))});
  if (w->nested) {
    out.push_back({name + ".absmax", "U8", {std::int64_t(w->nested->codes.size())}, {}, owned(detail::bytes_of(w->nested->codes))});
    out.push_back({name + ".nested_absmax", "F32", {std::int64_t(w->nested->absmax.size())}, {},
                   owned(detail::bytes_of(w->nested->absmax))});
    out.push_back({name + ".nested_quant_map", "F32", {256}, {},
                   owned(detail::bytes_of(std::vector<float>(quant::dynamic_code.begin(), quant::dynamic_code.end())))});
  } else {
    out.push_back({name + ".absmax", "F32", {std::int64_t(w->absmax.size())}, {}, owned(detail::bytes_of(w->absmax))});
  }
  const auto& code = quant::code_of(w->type);
  out.push_back({name + ".quant_map", "F32", {16}, {}, owned(detail::bytes_of(std::vector<float>(code.begin(), code.end())))});
  const std::string json = bnb_quant_state_json(*w);
  std::vector<std::byte> state(json.size());
  std::memcpy(state.data(), json.data(), json.size());
  out.push_back({name + detail::bnb_state_key + std::string(quant::name_of(w->type)), "U8",
                 {std::int64_t(state.size())}, {}, owned(std::move(state))});
  return out;
}

// What config.json's quantization_config says of the weights: nothing (no
// such key: whole weights), or bitsandbytes' 4-bit options. Any other
// quantization is refused by name: reading its tensors as whole weights
// would give a model that computes something else.
inline std::optional<quant::FourBitOptions> bnb_4bit_config(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& q = config["quantization_config"];
  const std::string method = q.is_object() ? q.value("quant_method", std::string()) : std::string();
  if (method == "gptq") return std::nullopt;  // io/gptq.hpp
  if (method != "bitsandbytes")
    throw Error(where + ": quantization_config.quant_method " + detail::quoted(method) +
                " is not supported; ft reads bitsandbytes' 4-bit models (load_in_4bit), GPTQ models and "
                "whole-precision ones");
  auto flag = [&](const char* key) { return q.contains(key) && q[key].is_boolean() && q[key].get<bool>(); };
  if (flag("load_in_8bit") || flag("_load_in_8bit"))
    throw Error(where + ": holds bitsandbytes' 8-bit weights (load_in_8bit), which ft does not read; "
                        "use the whole-precision model or a 4-bit one");
  if (!flag("load_in_4bit") && !flag("_load_in_4bit"))
    throw Error(where + ": quantization_config names bitsandbytes but neither load_in_4bit nor load_in_8bit");
  quant::FourBitOptions options;
  const std::string type = q.value("bnb_4bit_quant_type", std::string("fp4"));
  if (type != "nf4" && type != "fp4")
    throw Error(where + ": quantization_config.bnb_4bit_quant_type " + detail::quoted(type) + " is not nf4 or fp4");
  options.type = type == "nf4" ? quant::FourBit::nf4 : quant::FourBit::fp4;
  options.double_quant = flag("bnb_4bit_use_double_quant");
  return options;
}

// config.json's quantization_config for weights written by bnb_4bit_tensors,
// as transformers writes it.
inline nlohmann::json bnb_quantization_config(const quant::FourBitOptions& options, const std::string& compute_dtype) {
  return {{"_load_in_4bit", true},
          {"_load_in_8bit", false},
          {"bnb_4bit_compute_dtype", compute_dtype},
          {"bnb_4bit_quant_storage", "uint8"},
          {"bnb_4bit_quant_type", std::string(quant::name_of(options.type))},
          {"bnb_4bit_use_double_quant", options.double_quant},
          {"llm_int8_enable_fp32_cpu_offload", false},
          {"llm_int8_has_fp16_weight", false},
          {"llm_int8_skip_modules", nullptr},
          {"llm_int8_threshold", 6.0},
          {"load_in_4bit", true},
          {"load_in_8bit", false},
          {"quant_method", "bitsandbytes"}};
}

}  // namespace ft::io
