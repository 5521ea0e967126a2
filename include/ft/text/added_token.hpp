#pragma once
// A token added to a tokenizer's vocabulary, as HF's AddedToken.
#include <string>

namespace ft::text {

// A token matched in text before the model. Like HF's AddedToken(content,
// special): special tokens are matched in raw text, others after normalisation.
struct AddedToken {
  std::string content;
  bool single_word = false;  // only when not inside a word
  bool lstrip = false;       // takes in the whitespace on its left
  bool rstrip = false;       // and on its right
  bool normalized = true;    // matched in normalised text, against its normalised content
  bool special = false;      // left out by decode(..., skip_special_tokens = true)

  AddedToken() = default;
  explicit AddedToken(std::string text, bool is_special = false)
      : content(std::move(text)), normalized(!is_special), special(is_special) {}
};

}  // namespace ft::text
