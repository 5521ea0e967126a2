#pragma once
// What a model directory says about text: its tokenizer (tokenizer.json), its
// chat template (tokenizer_config.json or chat_template.jinja) and its special
// tokens. Training, data preparation, previews and serving read it the same way.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/text/chat_template.hpp"
#include "ft/text/tokenizer.hpp"

namespace ft::text {

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;  // null when the model has none
  ChatOptions special;                 // bos / eos as tokenizer_config.json names them
  std::int32_t eos_id = -1;            // -1: no EOS token known
  std::int32_t pad_id = 0;             // the pad token, else EOS, else 0 (padding is never scored)

  // Reads dir/tokenizer.json (required), its chat template and special tokens.
  static ModelText load(const std::filesystem::path& dir);
};

}  // namespace ft::text
