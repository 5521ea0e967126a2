#pragma once
// What a model directory says about text: its tokenizer (tokenizer.json, or
// SentencePiece's tokenizer.model read as transformers does), its
// chat template (tokenizer_config.json or chat_template.jinja), its special
// tokens, and how many token ids its embedding has rows for. Training, data
// preparation, previews and serving read it the same way. A model trained on
// rows of token ids needs no tokenizer; what reads text asks for one
// (need_tokenizer) and says so when there is none.
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
  std::filesystem::path dir;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has neither tokenizer file
  std::unique_ptr<ChatTemplate> chat;  // null when the model has none
  ChatOptions special;                 // bos / eos as tokenizer_config.json names them
  std::int32_t eos_id = -1;            // -1: no EOS token known
  std::int32_t pad_id = 0;             // the pad token, else EOS, else 0 (padding is never scored)
  // config.json's vocab_size: the embedding's rows, which may be padded past
  // the tokenizer's size (0: no config.json says).
  std::int64_t embedding_rows = 0;

  // Reads the directory's tokenizer when it has one, its chat template,
  // special tokens and config.json's vocab_size.
  static ModelText load(const std::filesystem::path& dir);

  // The file a model directory's tokenizer is read from: tokenizer.json, else
  // tokenizer.model; empty for neither.
  static std::filesystem::path tokenizer_file(const std::filesystem::path& dir);

  // The tokenizer, or an Error saying that `what` reads text and this model has none.
  const Tokenizer& need_tokenizer(const std::string& what) const;

  // The ids a row of token ids may hold: the embedding's rows, else the tokenizer's size.
  std::int64_t token_id_limit() const;
};

}  // namespace ft::text
