#pragma once
// GPTQ checkpoints as GPTQModel and AutoGPTQ save them and transformers
// loads them (quant/gptq_weight.hpp has the layout): config.json's
// quantization_config names quant_method "gptq", the bits, the group size
// and the checkpoint format; each quantized linear module M has M.qweight,
// M.qzeros, M.scales and usually M.g_idx in place of M.weight. Reading
// checks every shape against the others and the codes' groups against the
// scales, so a damaged checkpoint is an error naming the tensor.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/io/model_weights.hpp"
#include "ft/quant/gptq_weight.hpp"

namespace ft::io {

struct GptqConfig {
  int bits = 4;
  std::int64_t group_size = 128;  // -1: one group for the whole input
  int zero_offset = 1;            // "gptq" stores zero points less one; "gptq_v2" does not
};

// config.json's GPTQ quantization_config, or none when it names no GPTQ.
inline std::optional<GptqConfig> gptq_config(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& q = config["quantization_config"];
  if (!q.is_object() || q.value("quant_method", std::string()) != "gptq") return std::nullopt;
  GptqConfig c;
  try {
    c.bits = q.at("bits").get<int>();
    c.group_size = q.value("group_size", std::int64_t(128));
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": quantization_config (gptq) needs an integer \"bits\" and \"group_size\"");
  }
  if (c.bits != 2 && c.bits != 4 && c.bits != 8)
    throw Error(where + ": GPTQ with bits = " + std::to_string(c.bits) +
                " is not supported; ft reads 2-, 4- and 8-bit GPTQ checkpoints");
  if (c.group_size == 0 || c.group_size < -1)
    throw Error(where + ": quantization_config.group_size " + std::to_string(c.group_size) + " is not -1 or positive");
  const std::string format = q.value("checkpoint_format", std::string("gptq"));
  if (format != "gptq" && format != "gptq_v2")
    throw Error(where + ": GPTQ checkpoint_format " + detail::quoted(format) + " is not supported (gptq, gptq_v2)");
  c.zero_offset = format == "gptq" ? 1 : 0;
  return c;
}

// The module a GPTQ checkpoint stores in place of HF weight `name` (its
// name without ".weight"), when it does.
inline std::optional<std::string> gptq_module(const ModelWeights& weights, const std::string& name) {
  if (!name.ends_with(".weight")) return std::nullopt;
  std::string module = name.substr(0, name.size() - 7);
  if (!weights.find(module + ".qweight")) return std::nullopt;
  return module;
}

// HF weight `name` ([out, in]) as a GPTQ checkpoint stores it.
inline quant::GptqWeight read_gptq(const ModelWeights& weights, const std::string& name, const GptqConfig& config) {
  const std::optional<std::string> module = gptq_module(weights, name);
  if (!module) throw Error(weights.source().string() + ": " + name + " is not stored by GPTQ");
  auto fail = [&](const std::string& what) {
    return Error(weights.source().string() + ": the GPTQ state of " + detail::quoted(*module) + " " + what);
  };
  auto tensor = [&](const std::string& suffix, const char* dtype, std::size_t rank) -> const TensorView& {
    const TensorView* t = weights.find(*module + suffix);
    if (!t) throw fail("lacks " + detail::quoted(*module + suffix));
    if (t->dtype != dtype || t->shape.size() != rank)
      throw fail("has " + detail::quoted(*module + suffix) + " of " + t->dtype + " " + detail::shape_string(t->shape) +
                 ", expected " + std::to_string(rank) + "-d " + dtype);
    return *t;
  };
  auto copy = [](const TensorView& t, auto& into) {
    into.resize(t.bytes.size() / sizeof(into[0]));
    std::memcpy(into.data(), t.bytes.data(), t.bytes.size());
  };
  quant::GptqWeight w;
  w.bits = config.bits;
  w.zero_offset = config.zero_offset;
  const int per = 32 / config.bits;
  const TensorView& qweight = tensor(".qweight", "I32", 2);
  const TensorView& scales = tensor(".scales", "F16", 2);
  const TensorView& qzeros = tensor(".qzeros", "I32", 2);
  w.in = qweight.shape[0] * per;
  w.out = qweight.shape[1];
  w.groups = scales.shape[0];
  w.shape = {w.out, w.in};
  if (scales.shape[1] != w.out || qzeros.shape[0] != w.groups || qzeros.shape[1] * per != w.out)
    throw fail("has qweight " + detail::shape_string(qweight.shape) + ", scales " + detail::shape_string(scales.shape) +
               " and qzeros " + detail::shape_string(qzeros.shape) + ", which do not agree for " +
               std::to_string(config.bits) + "-bit codes");
  copy(qweight, w.qweight);
  copy(qzeros, w.qzeros);
  copy(scales, w.scales);
  if (weights.find(*module + ".g_idx")) {
    const TensorView& g_idx = tensor(".g_idx", "I32", 1);
    if (g_idx.shape[0] != w.in)
      throw fail("has g_idx of " + std::to_string(g_idx.shape[0]) + " rows for " + std::to_string(w.in) + " inputs");
    copy(g_idx, w.g_idx);
  } else {  // without act-order, input row i is in group i / group_size
    const std::int64_t group = config.group_size == -1 ? w.in : config.group_size;
    w.g_idx.resize(std::size_t(w.in));
    for (std::int64_t i = 0; i < w.in; ++i) w.g_idx[std::size_t(i)] = std::int32_t(i / group);
  }
  for (std::int32_t g : w.g_idx)
    if (g < 0 || g >= w.groups)
      throw fail("names group " + std::to_string(g) + " in g_idx, but scales has " + std::to_string(w.groups));
  return w;
}

}  // namespace ft::io
