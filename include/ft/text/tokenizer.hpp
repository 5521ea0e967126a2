#pragma once
// Tokenizers read from HF's tokenizer.json, giving the ids HF `tokenizers`
// gives (Tokenizer.encode / decode): the contract is id parity, checked by
// tests/data/test_tokenizer.cpp against fixtures that HF itself encoded.
//
// encode(text) runs HF's pipeline:
//   added tokens with normalized=false are cut out of the raw text;
//   each stretch between them is normalised (normalizer.hpp), and added tokens
//     with normalized=true are cut out of the result (added_vocabulary.hpp);
//   each remaining stretch is pre-tokenised into words (pre_tokenizer.hpp);
//   each word is encoded by BPE (bpe.hpp);
//   with add_special_tokens, the post-processor adds e.g. <s> (post_processor.hpp).
// decode(ids) maps ids to tokens and runs the decoder (decoder.hpp).
//
// tokenizer.json (HF's serialisation of a Tokenizer), top level:
//   "version", "truncation", "padding", "added_tokens", "normalizer",
//   "pre_tokenizer", "model", "post_processor", "decoder"
// Each component header lists the types it reads; any other type, and any
// option whose effect ft does not reproduce, is an ft::Error naming the file and
// the path. "truncation" and "padding" are not applied: transformers resets them
// on every call, and ft batches and truncates sequences itself.
//
// Supported in practice: GPT-2, GPT-NeoX, Llama 3, Qwen2, SmolLM2 (byte-level
// BPE), Llama 2, Mistral, TinyLlama (SentencePiece-style BPE with byte fallback);
// a model with SentencePiece's tokenizer.model alone gets its pipeline from
// text/sentencepiece.hpp.
// Not supported: WordPiece, Unigram and WordLevel models, NFD/NFKC/Lowercase
// and other normalisers, pairs of sequences, offsets.
//
// A Tokenizer is immutable but for add_tokens(); encode and decode may be
// called from several threads at once.
//
// The pipeline (tokenizer/*.hpp) is compiled once, into the ft_text library
// that ftrun, plugins and programs link: this header is all they include.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ft/core/error.hpp"  // what every function here throws
#include "ft/text/added_token.hpp"

namespace ft::text {

namespace tokenization {
class Pipeline;
}

class Tokenizer {
public:
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // `origin` names the source in error messages.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& origin);

  Tokenizer(const Tokenizer& other);
  Tokenizer& operator=(const Tokenizer& other);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids HF's Tokenizer.encode(text, add_special_tokens) gives.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text of `ids`; an id without a token is an error. skip_special_tokens
  // leaves out tokens whose string is a special token's content.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  // One more than the largest id, added tokens included: the rows an embedding needs.
  std::int32_t vocab_size() const;
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  // As in HF, a normalized added token's string is its normalised content.
  std::string id_to_token(std::int32_t id) const;
  bool is_special(std::int32_t id) const;
  // Added tokens with their ids, in the order they were added.
  std::vector<std::pair<std::int32_t, AddedToken>> added_tokens() const;

  // Adds tokens the way HF's add_tokens does (ids as described in
  // tokenizer/added_vocabulary.hpp); returns how many got a new id, i.e. how
  // many rows the embedding must grow by. A content already added keeps its
  // id and flags. On an error nothing is added.
  int add_tokens(std::span<const AddedToken> tokens);
  int add_tokens(std::span<const std::string> contents, bool special);

private:
  explicit Tokenizer(std::unique_ptr<tokenization::Pipeline> pipeline);
  std::unique_ptr<tokenization::Pipeline> pipeline_;
};

}  // namespace ft::text
