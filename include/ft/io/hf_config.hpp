#pragma once
// Reading an HF model directory's config.json. This is the first field ft
// needs from it: `architectures`, which says which model family reads the
// weights. (The model issue reads the rest of the configuration here too.)
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"

namespace ft::io {

template <class Json = nlohmann::json>  // nlohmann::ordered_json keeps the file's key order
Json read_json_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(file.string() + ": cannot be opened");
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(file.string() + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw Error(file.string() + ": not usable JSON (" + e.what() + ")");
  }
}

// The text model's part of a config.json: its text_config where it has one
// (a multimodal model, Gemma3ForConditionalGeneration), else the whole.
template <class Json>
Json& text_model_config(Json& config) {
  return config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
}

// The first entry of config.json's `architectures`, e.g. "LlamaForCausalLM".
inline std::string hf_architecture(const std::filesystem::path& model_dir) {
  auto file = model_dir / "config.json";
  nlohmann::json config = read_json_file(file);
  auto it = config.find("architectures");
  if (it == config.end())
    throw Error(file.string() + ": missing required field \"architectures\"");
  if (!it->is_array() || it->empty() || !(*it)[0].is_string())
    throw Error(file.string() + ": \"architectures\" must be a list of names such as [\"LlamaForCausalLM\"]");
  return (*it)[0].get<std::string>();
}

}  // namespace ft::io
