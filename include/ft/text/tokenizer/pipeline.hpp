#pragma once
// HF's tokenizer pipeline behind ft::text::Tokenizer; compiled into the ft_text library.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/text/tokenizer/added_vocabulary.hpp"
#include "ft/text/tokenizer/bpe.hpp"
#include "ft/text/tokenizer/decoder.hpp"
#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/normalizer.hpp"
#include "ft/text/tokenizer/post_processor.hpp"
#include "ft/text/tokenizer/pre_tokenizer.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

// The whole of HF's tokenizer pipeline (ft/text/tokenizer.hpp is its public face).
class Pipeline {
public:
  static Pipeline from_file(const std::filesystem::path& tokenizer_json) {
    const std::string origin = tokenizer_json.string();
    std::ifstream in(tokenizer_json, std::ios::binary);
    if (!in) throw Error(origin + ": cannot be opened");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(origin + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
    } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
      throw Error(origin + ": not valid JSON (" + e.what() + ")");
    }
    return from_json(j, origin);
  }

  // `origin` names the file in error messages.
  static Pipeline from_json(const nlohmann::json& j, const std::string& origin) {
    const JsonNode root(j, "", origin);
    root.expect_object();
    Pipeline t;
    t.model_ = Bpe::from_json(root.at("model"));
    t.normalizer_ = Normalizer::from_json(child_or_null(root, "normalizer"));
    t.pre_tokenizer_ = PreTokenizer::from_json(child_or_null(root, "pre_tokenizer"));
    t.post_processor_ = PostProcessor::from_json(child_or_null(root, "post_processor"));
    t.decoder_ = Decoder::from_json(child_or_null(root, "decoder"));
    if (auto added = root.find("added_tokens")) t.read_added_tokens(*added);
    t.added_.rebuild(t.normalizer_);
    for (const auto* ids : {&t.post_processor_.prefix(), &t.post_processor_.suffix()})
      for (std::int32_t id : *ids)
        if (!t.has_id(id))
          throw Error(origin + ": post_processor: special token id " + std::to_string(id) +
                      " is not in the vocabulary");
    return t;
  }

  // The ids of `text` (UTF-8); with add_special_tokens, those the
  // post-processor adds (such as <s>) too.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const {
    if (const auto bad = utf8_invalid_at(text); bad != std::string_view::npos)
      throw Error("tokenizer input is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    std::vector<std::int32_t> ids;
    std::string normalized;
    auto to_model = [&](std::string_view word, bool) { model_.tokenize(word, ids); };
    auto push_token = [&](std::int32_t id) { ids.push_back(id); };
    auto on_raw_stretch = [&](std::size_t begin, std::size_t end) {
      std::string_view piece = text.substr(begin, end - begin);
      bool at_origin = begin == 0;
      if (!normalizer_.empty()) {
        normalized.assign(piece);
        normalizer_.normalize(normalized, at_origin);
        piece = normalized;
      }
      added_.split(
          piece, true,
          [&](std::size_t b, std::size_t e) {
            pre_tokenizer_.pre_tokenize(piece.substr(b, e - b), at_origin && b == 0, PieceSink(to_model));
          },
          push_token);
    };
    added_.split(text, false, on_raw_stretch, push_token);
    if (add_special_tokens) post_processor_.apply(ids);
    return ids;
  }

  // The text of `ids`; an id without a token is an error. skip_special_tokens
  // leaves out tokens whose string is a special token's content.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (std::int32_t id : ids) {
      const std::string& token = token_of(id);
      if (skip_special_tokens && added_.is_special(token)) continue;
      tokens.push_back(token);
    }
    return decoder_.decode(std::move(tokens));
  }

  // One more than the largest id, added tokens included: the rows an embedding needs.
  std::int32_t vocab_size() const { return std::max(model_.id_end(), added_.id_end()); }

  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    if (auto id = added_.token_to_id(token)) return id;
    return model_.token_to_id(token);
  }
  // As in HF, a normalized added token's string is its normalised content.
  std::string id_to_token(std::int32_t id) const { return token_of(id); }

  bool is_special(std::int32_t id) const {
    const auto* e = added_.find(id);
    return e && e->token.special;
  }
  // Added tokens with their ids, in the order they were added.
  std::vector<std::pair<std::int32_t, AddedToken>> added_tokens() const {
    std::vector<std::pair<std::int32_t, AddedToken>> out;
    for (const auto& e : added_.entries()) out.emplace_back(e.id, e.token);
    return out;
  }

  // Adds tokens the way HF's add_tokens does (ids as described in
  // added_vocabulary.hpp); returns how many got a new id, i.e. how many rows the
  // embedding must grow by. A content already added keeps its id and flags.
  // On an error nothing is added.
  int add_tokens(std::span<const AddedToken> tokens) {
    AddedVocabulary updated = added_;
    int fresh = 0;
    for (const AddedToken& t : tokens) fresh += updated.add(t, model_).second ? 1 : 0;
    updated.rebuild(normalizer_);
    added_ = std::move(updated);
    return fresh;
  }
  int add_tokens(std::span<const std::string> contents, bool special) {
    std::vector<AddedToken> tokens;
    for (const std::string& c : contents) tokens.emplace_back(c, special);
    return add_tokens(tokens);
  }

private:
  Pipeline() = default;

  static JsonNode child_or_null(const JsonNode& root, std::string_view key) {
    static const nlohmann::json null_value;
    if (auto n = root.find(key)) return *n;
    return JsonNode(null_value, std::string(key), root.origin());
  }

  void read_added_tokens(const JsonNode& list) {
    for (std::size_t i = 0, n = list.array_size(); i < n; ++i) {
      const JsonNode e = list[i];
      AddedToken t;
      t.content = e.at("content").string();
      t.single_word = e.at("single_word").boolean();
      t.lstrip = e.at("lstrip").boolean();
      t.rstrip = e.at("rstrip").boolean();
      t.normalized = e.at("normalized").boolean();
      t.special = e.at("special").boolean();
      const auto file_id = std::int32_t(e.at("id").integer(0, std::numeric_limits<std::int32_t>::max() - 1));
      if (t.content.empty()) e.fail("an added token cannot be empty");
      if (added_.token_to_id(t.content)) e.fail("added token " + quote(t.content) + " appears twice");
      std::int32_t id = 0;
      try {
        id = added_.add(t, model_).first;
      } catch (const Error& x) {
        e.fail(x.what());
      }
      if (id != file_id)
        e.fail("added token " + quote(t.content) + " has id " + std::to_string(file_id) +
               " but HF tokenizers gives it id " + std::to_string(id) +
               " (tokens outside the vocabulary take the ids after it, in order)");
    }
  }

  bool has_id(std::int32_t id) const { return added_.find(id) || model_.id_to_token(id); }

  const std::string& token_of(std::int32_t id) const {
    if (const auto* e = added_.find(id)) return e->text;
    if (const std::string* t = model_.id_to_token(id)) return *t;
    throw Error("token id " + std::to_string(id) + " is not in the vocabulary (size " + std::to_string(vocab_size()) +
                ")");
  }

  Bpe model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  PostProcessor post_processor_;
  Decoder decoder_;
  AddedVocabulary added_;
};

}  // namespace ft::text::tokenization
