#pragma once
// Added tokens (special ones such as <s> or <|im_start|>, and plain added
// words) are found in the text before the model sees it, the way HF does:
//  1. tokens with normalized=false are matched in the raw text;
//  2. each stretch between them is normalised, and tokens with normalized=true
//     are matched in the normalised stretch, against their normalised content.
// Matching is leftmost-longest over all contents (a byte trie), then the flags:
// single_word drops a match with a word character (Unicode \w) right before or
// after it, lstrip/rstrip take in the whitespace on that side. Quirks kept for
// id parity: a dropped match still consumes its bytes, and the whitespace an
// rstrip takes can hold the start of the next match.
//
// Ids follow HF's rule when tokens are added, in order: a content already in
// the vocabulary keeps that id, any other gets one more than the largest added
// id (or the model's size for the first). tokenizer.json's "added_tokens" list
// gives ids too; a file whose ids differ from the ones HF assigns is refused.
// As in HF, the token string of a normalized added token (what decode sees) is
// its normalised content: "jargonify" under Llama 2's normaliser is "▁jargonify".
//
// tokenizer.json, "added_tokens": [{"id": 0, "content": "<s>", "single_word": false,
//   "lstrip": false, "rstrip": false, "normalized": false, "special": true}, ...]
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/text/added_token.hpp"
#include "ft/text/tokenizer/bpe.hpp"
#include "ft/text/tokenizer/normalizer.hpp"
#include "ft/text/tokenizer/regex.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

// Contents -> values; finds the longest content starting at a position.
class TokenTrie {
public:
  // The first value inserted for a content stays.
  void insert(std::string_view content, std::int32_t value) {
    if (content.empty()) return;
    first_[static_cast<unsigned char>(content[0])] = true;
    std::size_t node = 0;
    for (char c : content) {
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), c,
                                 [](const auto& e, char v) { return e.first < v; });
      if (it == children.end() || it->first != c) {
        const auto child = std::int32_t(nodes_.size());
        it = children.insert(it, {c, child});
        nodes_.emplace_back();
      }
      node = std::size_t(it->second);
    }
    if (nodes_[node].value < 0) nodes_[node].value = value;
  }
  bool empty() const { return nodes_.size() == 1; }
  bool may_start_with(char c) const { return first_[static_cast<unsigned char>(c)]; }
  // {length, value} of the longest content at text[pos], or {0, -1}.
  std::pair<std::size_t, std::int32_t> longest_at(std::string_view text, std::size_t pos) const {
    std::pair<std::size_t, std::int32_t> best{0, -1};
    std::size_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), text[i],
                                 [](const auto& e, char v) { return e.first < v; });
      if (it == children.end() || it->first != text[i]) break;
      node = std::size_t(it->second);
      if (nodes_[node].value >= 0) best = {i + 1 - pos, nodes_[node].value};
    }
    return best;
  }

private:
  struct Node {
    std::vector<std::pair<char, std::int32_t>> children;  // sorted by byte
    std::int32_t value = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_{};
};

class AddedVocabulary {
public:
  struct Entry {
    AddedToken token;
    std::int32_t id = 0;
    std::string text;  // the token string: content, normalised when token.normalized
  };

  // Adds `token`, returning its id and whether that id is new; a content
  // already added keeps its id and flags. Call rebuild() after adding.
  std::pair<std::int32_t, bool> add(const AddedToken& token, const Bpe& model) {
    if (token.content.empty()) throw Error("an added token cannot be empty");
    if (utf8_invalid_at(token.content) != std::string_view::npos)
      throw Error("added token " + quote(token.content) + " is not valid UTF-8");
    if (auto it = by_content_.find(token.content); it != by_content_.end())
      return {entries_[it->second].id, false};
    std::int32_t id = 0;
    bool is_new = false;
    if (auto existing = model.token_to_id(token.content)) {
      id = *existing;
    } else {
      const auto size = std::int64_t(model.size());
      std::int64_t next = size;
      if (!entries_.empty() && (max_id_ >= size || size == 0)) next = std::int64_t(max_id_) + 1;
      if (next >= std::numeric_limits<std::int32_t>::max()) throw Error("too many tokens");
      id = std::int32_t(next);
      is_new = true;
      if (model.id_to_token(id))
        throw Error("added token " + quote(token.content) + " would get id " + std::to_string(id) + ", which " +
                    quote(*model.id_to_token(id)) + " already has (the vocabulary has gaps)");
    }
    if (by_id_.contains(id))
      throw Error("added token " + quote(token.content) + " would share id " + std::to_string(id));
    by_content_.emplace(token.content, entries_.size());
    by_id_.emplace(id, entries_.size());
    Entry entry;  // member by member: GCC 12 mishandles a throwing aggregate initialiser
    entry.token = token;
    entry.id = id;
    entry.text = token.content;
    entries_.push_back(std::move(entry));
    max_id_ = entries_.size() == 1 ? id : std::max(max_id_, id);
    return {id, is_new};
  }

  // Rebuilds the matchers: special tokens first, then the others, each in the
  // order added (the order HF gives its matcher).
  void rebuild(const Normalizer& normalizer) {
    raw_ = TokenTrie();
    normalized_ = TokenTrie();
    for (Entry& e : entries_) {
      e.text = e.token.content;
      bool at_origin = true;
      if (e.token.normalized) normalizer.normalize(e.text, at_origin);
    }
    for (bool special : {true, false}) {
      for (std::size_t i = 0; i < entries_.size(); ++i) {
        const Entry& e = entries_[i];
        if (e.token.special == special) (e.token.normalized ? normalized_ : raw_).insert(e.text, std::int32_t(i));
      }
    }
  }

  std::optional<std::int32_t> token_to_id(std::string_view content) const {
    auto it = by_content_.find(content);
    return it == by_content_.end() ? std::nullopt : std::optional(entries_[it->second].id);
  }
  const Entry* find(std::int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &entries_[it->second];
  }
  // Whether `content` is the content of a special token (HF's test when decoding).
  bool is_special(std::string_view content) const {
    auto it = by_content_.find(content);
    return it != by_content_.end() && entries_[it->second].token.special;
  }
  const std::vector<Entry>& entries() const { return entries_; }
  // One more than the largest added id (0 when none).
  std::int32_t id_end() const { return entries_.empty() ? 0 : max_id_ + 1; }

  // Splits `text` (UTF-8) around the tokens of one stage (normalized or not):
  // on_text(begin, end) for each stretch between them, on_token(id) for each.
  template <class OnText, class OnToken>
  void split(std::string_view text, bool normalized, OnText&& on_text, OnToken&& on_token) const {
    const TokenTrie& trie = normalized ? normalized_ : raw_;
    if (trie.empty()) {
      if (!text.empty()) on_text(std::size_t(0), text.size());
      return;
    }
    std::size_t start_offset = 0;  // end of the last token taken
    std::size_t pos = 0;           // where the search goes on (HF's iterator ignores the stripping)
    while (pos < text.size()) {
      if (!trie.may_start_with(text[pos])) {
        ++pos;
        continue;
      }
      const auto [length, index] = trie.longest_at(text, pos);
      if (length == 0) {
        ++pos;
        continue;
      }
      std::size_t start = pos, stop = pos + length;
      pos = stop;
      const AddedToken& token = entries_[std::size_t(index)].token;
      if (token.single_word && ((start > 0 && word_character_before(text, start)) ||
                                (stop < text.size() && word_character_at(text, stop))))
        continue;
      if (token.lstrip) start = std::max(whitespace_run_before(text, start), start_offset);
      if (token.rstrip) stop = whitespace_run_after(text, stop);
      if (start_offset < start) on_text(start_offset, start);
      on_token(entries_[std::size_t(index)].id);
      start_offset = stop;
    }
    if (start_offset != text.size()) on_text(start_offset, text.size());
  }

private:
  // Rust regex's \w, which HF's single_word test uses.
  static bool is_word_character(std::string_view c) {
    static const Regex word = Regex::onig(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", "added tokens");
    bool found = false;
    word.for_each_match(c, [&](std::size_t, std::size_t) { found = true; });
    return found;
  }
  static bool word_character_before(std::string_view text, std::size_t end) {
    const std::size_t begin = utf8_previous(text, end);
    return is_word_character(text.substr(begin, end - begin));
  }
  static bool word_character_at(std::string_view text, std::size_t begin) {
    std::size_t end = begin;
    utf8_next(text, end);
    return is_word_character(text.substr(begin, end - begin));
  }
  static std::size_t whitespace_run_before(std::string_view text, std::size_t end) {
    while (end > 0) {
      const std::size_t begin = utf8_previous(text, end);
      std::size_t i = begin;
      if (!is_white_space(utf8_next(text, i))) break;
      end = begin;
    }
    return end;
  }
  static std::size_t whitespace_run_after(std::string_view text, std::size_t begin) {
    for (std::size_t i = begin; i < text.size() && is_white_space(utf8_next(text, i));) begin = i;
    return begin;
  }

  std::vector<Entry> entries_;
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> by_content_;
  std::unordered_map<std::int32_t, std::size_t> by_id_;
  std::int32_t max_id_ = -1;
  TokenTrie raw_, normalized_;
};

}  // namespace ft::text::tokenization
