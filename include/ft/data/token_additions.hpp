#pragma once
// Adding tokens to a model: new entries in tokenizer.json's added_tokens,
// roles (bos/eos/pad/unk) in tokenizer_config.json and config.json, and new
// embedding rows. Fine-tuning a chat format onto a base model needs this
// (ChatML's <|im_start|> and <|im_end|>, a pad token).
//
// The request is a TOML file (`ftrun convert --add-tokens FILE`):
//
//   special = ["<|im_start|>", "<|im_end|>"]   # never split, skipped when decoding specials
//   regular = ["<think>"]                      # never split, decoded as text
//   eos_token = "<|im_end|>"                   # roles: bos_token, eos_token, pad_token, unk_token
//   pad_token = "<|pad|>"                      # a role naming a new token adds it as special
//
// Tokens the tokenizer already has keep their ids. New embedding rows start
// at the mean of the existing rows: the deterministic centre of what
// transformers' resize_token_embeddings samples, so a new token starts as an
// average token rather than as noise.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ft/core/error.hpp"
#include "ft/text/tokenizer.hpp"

namespace ft::data {

struct TokenAdditions {
  std::vector<std::string> special, regular;
  std::map<std::string, std::string> roles;  // "eos_token" -> "<|im_end|>"
};

inline TokenAdditions read_token_additions(const std::filesystem::path& file) {
  toml::table table;
  try {
    table = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw Error(file.string() + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  TokenAdditions a;
  auto strings = [&](const char* key, std::vector<std::string>& out) {
    const toml::node* node = table.get(key);
    if (!node) return;
    const toml::array* list = node->as_array();
    if (!list) throw Error(file.string() + ": \"" + key + "\" must be a list of strings");
    for (const toml::node& item : *list) {
      auto s = item.value<std::string>();
      if (!s || s->empty()) throw Error(file.string() + ": \"" + key + "\" must hold non-empty strings");
      out.push_back(*s);
    }
  };
  for (const auto& [key, node] : table) {
    const std::string k(key.str());
    if (k == "special" || k == "regular") continue;
    if (k != "bos_token" && k != "eos_token" && k != "pad_token" && k != "unk_token")
      throw Error(file.string() + ": unknown key \"" + k +
                  "\"; allowed: special, regular, bos_token, eos_token, pad_token, unk_token");
    auto s = node.value<std::string>();
    if (!s || s->empty()) throw Error(file.string() + ": \"" + k + "\" must be a token (a non-empty string)");
    a.roles[k] = *s;
  }
  strings("special", a.special);
  strings("regular", a.regular);
  return a;
}

// Adds the tokens to a parsed tokenizer.json and returns the new vocabulary
// size (model vocabulary plus added tokens).
inline std::int32_t add_tokens(nlohmann::json& tokenizer_json, const TokenAdditions& additions,
                               const std::string& origin) {
  text::Tokenizer tokenizer = text::Tokenizer::from_json(tokenizer_json, origin);
  auto add = [&](const std::string& content, bool special) {
    if (tokenizer.token_to_id(content)) return;
    std::string contents[] = {content};
    tokenizer.add_tokens(std::span<const std::string>(contents), special);
    tokenizer_json["added_tokens"].push_back({{"id", *tokenizer.token_to_id(content)},
                                              {"content", content},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", !special},
                                              {"special", special}});
  };
  if (!tokenizer_json.contains("added_tokens") || !tokenizer_json["added_tokens"].is_array())
    tokenizer_json["added_tokens"] = nlohmann::json::array();
  for (const std::string& t : additions.special) add(t, true);
  for (const std::string& t : additions.regular) add(t, false);
  for (const auto& [role, token] : additions.roles) add(token, true);
  return tokenizer.vocab_size();
}

}  // namespace ft::data
