#pragma once
// An HF tokenizer (tokenizer.json, tokenizer_config.json) from the vocabulary a
// GGUF file carries, for gguf_to_hf.hpp.
//
// GGUF keys read (llama.cpp's names):
//   tokenizer.ggml.model        "gpt2": byte-level BPE (GPT-2, Llama 3, SmolLM, Qwen2)
//                               "llama": SentencePiece BPE with byte fallback (Llama 1/2, Mistral)
//   tokenizer.ggml.pre          how text is split before BPE, for "gpt2" (see pre_tokenizer_for)
//   tokenizer.ggml.tokens       the vocabulary, by id; for "gpt2" in byte-level form ("Ġthe")
//   tokenizer.ggml.token_type   per id: 1 normal, 2 unknown, 3 control, 4 user-defined,
//                               5 unused, 6 byte ("<0x0A>"); all normal when absent
//   tokenizer.ggml.scores       per id, "llama" only: higher merges first
//   tokenizer.ggml.merges       "gpt2" only: "left right", highest priority first
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id, add_bos_token, add_eos_token,
//   add_space_prefix, tokenizer.chat_template
//
// Why it is built this way: the tokenizer must split text as llama.cpp does for
// the same file, so nothing is guessed. A pre-tokenizer name ft has no rule for
// is refused with the names it knows rather than replaced by GPT-2's split (which
// would tokenize digits and contractions differently without a word). Control
// and unknown tokens become special added tokens and user-defined ones plain
// added tokens; both match raw text (normalized: false) because llama.cpp
// matches them before any splitting. A SentencePiece vocabulary has scores but
// no merges; llama.cpp merges the adjacent pair whose joined piece scores
// highest, which is BPE with every (left, right) split of every piece as a merge,
// ranked by the joined piece's score — ties between equal scores are the one
// case where the two can differ. The vocabulary object is a plain (sorted)
// nlohmann::json: insertion order would cost quadratic time for 100k tokens.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/io/gguf.hpp"

namespace ft::io {

enum class GgufTokenType : std::int64_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct GgufVocab {
  std::string model;  // "gpt2" or "llama"
  std::string pre;    // empty when the file names none
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;  // GgufTokenType values, one per token
  std::vector<float> scores;        // one per token ("llama"), else empty
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::int64_t> bos, eos, unk, pad;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::optional<std::string> chat_template;

  std::int64_t size() const { return std::int64_t(tokens.size()); }
};

namespace detail {

inline std::optional<std::int64_t> token_id(const GgufFile& file, const std::string& key, std::int64_t n_tokens) {
  if (!file.metadata().contains(key)) return std::nullopt;
  const std::uint32_t id = file.metadata().get_u32(key);
  if (std::int64_t(id) >= n_tokens)
    throw Error(file.path().string() + ": metadata key " + detail::quoted(key) + " is token id " + std::to_string(id) +
                ", past the vocabulary of " + std::to_string(n_tokens) + " tokens");
  return std::int64_t(id);
}

inline bool flag(const GgufMetadata& m, const std::string& key, bool fallback) {
  return m.contains(key) ? m.get_bool(key) : fallback;
}

}  // namespace detail

inline GgufVocab read_gguf_vocab(const GgufFile& file) {
  const GgufMetadata& m = file.metadata();
  const std::string where = file.path().string() + ": ";
  GgufVocab v;
  v.model = m.get_string("tokenizer.ggml.model");
  if (v.model != "gpt2" && v.model != "llama")
    throw Error(where + "tokenizer.ggml.model " + detail::quoted(v.model) +
                " is not supported (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece)");
  v.tokens = m.get_strings("tokenizer.ggml.tokens");
  if (v.tokens.empty()) throw Error(where + "metadata key \"tokenizer.ggml.tokens\" is an empty vocabulary");
  const auto n = v.size();
  auto same_length = [&](const char* key, std::size_t length) {
    if (std::int64_t(length) != n)
      throw Error(where + "metadata key " + detail::quoted(key) + " has " + std::to_string(length) +
                  " entries, but there are " + std::to_string(n) + " tokens");
  };
  if (m.contains("tokenizer.ggml.token_type")) {
    v.types = m.get_integers("tokenizer.ggml.token_type");
    same_length("tokenizer.ggml.token_type", v.types.size());
  } else {
    v.types.assign(std::size_t(n), std::int64_t(GgufTokenType::Normal));
  }
  if (v.model == "llama") {
    if (m.contains("tokenizer.ggml.scores")) {
      v.scores = m.get_floats("tokenizer.ggml.scores");
      same_length("tokenizer.ggml.scores", v.scores.size());
    } else {
      v.scores.assign(std::size_t(n), 0.0f);
    }
  } else {
    v.pre = m.contains("tokenizer.ggml.pre") ? m.get_string("tokenizer.ggml.pre") : "";
    const std::vector<std::string> merges = m.get_strings("tokenizer.ggml.merges");
    v.merges.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
      // llama.cpp splits at the first space after the first byte.
      const std::size_t space = merges[i].size() > 1 ? merges[i].find(' ', 1) : std::string::npos;
      if (space == std::string::npos)
        throw Error(where + "merge " + std::to_string(i) + " " + detail::quoted(merges[i]) +
                    " is not two tokens separated by a space");
      v.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
    }
  }
  v.bos = detail::token_id(file, "tokenizer.ggml.bos_token_id", n);
  v.eos = detail::token_id(file, "tokenizer.ggml.eos_token_id", n);
  v.unk = detail::token_id(file, "tokenizer.ggml.unknown_token_id", n);
  v.pad = detail::token_id(file, "tokenizer.ggml.padding_token_id", n);
  // llama.cpp's defaults when a file does not say: SentencePiece and Llama 3
  // vocabularies start with BOS, other byte-level ones do not.
  const bool llama3 = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  v.add_bos = detail::flag(m, "tokenizer.ggml.add_bos_token", v.model == "llama" || llama3);
  v.add_eos = detail::flag(m, "tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = detail::flag(m, "tokenizer.ggml.add_space_prefix", v.model == "llama");
  if (v.add_bos && !v.bos) throw Error(where + "the tokenizer adds a BOS token but names none (tokenizer.ggml.bos_token_id)");
  if (v.add_eos && !v.eos) throw Error(where + "the tokenizer adds an EOS token but names none (tokenizer.ggml.eos_token_id)");
  if (m.contains("tokenizer.chat_template")) v.chat_template = m.get_string("tokenizer.chat_template");
  return v;
}

namespace detail {

inline constexpr std::string_view gpt2_split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view llama3_split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view qwen2_split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view known_pre_tokenizers = "gpt-2, smollm, starcoder, refact, llama-bpe, llama3, llama-v3, qwen2";

inline nlohmann::json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

inline nlohmann::json split_then_byte_level(std::string_view regex) {
  nlohmann::json split = {{"type", "Split"},
                          {"pattern", {{"Regex", std::string(regex)}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false)}}};
}

// The split llama.cpp applies for each pre-tokenizer name (llama-vocab.cpp), in
// HF's words: "smollm" and the StarCoder family isolate every digit and then
// split as GPT-2 does.
inline nlohmann::json pre_tokenizer_for(const std::string& file, const std::string& pre) {
  if (pre == "gpt-2") return byte_level(true);
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    nlohmann::json digits = {{"type", "Digits"}, {"individual_digits", true}};
    return {{"type", "Sequence"}, {"pretokenizers", {digits, byte_level(true)}}};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return split_then_byte_level(llama3_split);
  if (pre == "qwen2") return split_then_byte_level(qwen2_split);
  throw Error(file + ": " +
              (pre.empty() ? std::string("metadata key \"tokenizer.ggml.pre\" is missing")
                           : "tokenizer.ggml.pre " + detail::quoted(pre) + " is not supported") +
              "; ft knows how llama.cpp splits text for: " + std::string(known_pre_tokenizers));
}

inline nlohmann::json template_processing(const GgufVocab& v) {
  nlohmann::json special = nlohmann::json::object();
  auto piece = [&](std::int64_t id) {
    const std::string& text = v.tokens[std::size_t(id)];
    special[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
    return nlohmann::json{{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
  };
  auto sequence = [&](const char* name, int type_id) {
    nlohmann::json s = nlohmann::json::array();
    if (v.add_bos) s.push_back(piece(*v.bos));
    s.push_back({{"Sequence", {{"id", name}, {"type_id", type_id}}}});
    if (v.add_eos) s.push_back(piece(*v.eos));
    return s;
  };
  nlohmann::json single = sequence("A", 0);
  nlohmann::json pair = single;
  for (const auto& item : sequence("B", 1)) pair.push_back(item);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
}

// SentencePiece merges: every split of a piece into two pieces, best score first.
inline nlohmann::json sentencepiece_merges(const GgufVocab& v, const std::unordered_map<std::string, std::int64_t>& ids) {
  std::vector<std::tuple<float, std::int64_t, std::int64_t, std::int64_t>> merges;  // -score, id, left, right
  for (std::int64_t id = 0; id < v.size(); ++id) {
    const auto type = GgufTokenType(v.types[std::size_t(id)]);
    if (type != GgufTokenType::Normal && type != GgufTokenType::UserDefined && type != GgufTokenType::Unused) continue;
    const std::string& piece = v.tokens[std::size_t(id)];
    for (std::size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<unsigned char>(piece[k]) & 0xc0) == 0x80) continue;  // inside a UTF-8 character
      auto left = ids.find(piece.substr(0, k));
      auto right = ids.find(piece.substr(k));
      if (left != ids.end() && right != ids.end())
        merges.emplace_back(-v.scores[std::size_t(id)], id, left->second, right->second);
    }
  }
  std::sort(merges.begin(), merges.end());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [score, id, left, right] : merges)
    out.push_back({v.tokens[std::size_t(left)], v.tokens[std::size_t(right)]});
  return out;
}

}  // namespace detail

// tokenizer.json for HF `tokenizers`. `file` names the GGUF file in errors.
inline nlohmann::json hf_tokenizer_json(const GgufVocab& v, const std::string& file) {
  const std::string where = file + ": ";
  const bool byte_level = v.model == "gpt2";

  std::unordered_map<std::string, std::int64_t> ids;
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (std::int64_t id = 0; id < v.size(); ++id) {
    const std::string& text = v.tokens[std::size_t(id)];
    auto [it, fresh] = ids.emplace(text, id);
    if (!fresh)
      throw Error(where + "token " + std::to_string(id) + " " + detail::quoted(text) + " repeats token " +
                  std::to_string(it->second) + "; an HF vocabulary maps each text to one id");
    vocab[text] = id;
    const auto type = GgufTokenType(v.types[std::size_t(id)]);
    if (type == GgufTokenType::Control || type == GgufTokenType::Unknown || type == GgufTokenType::UserDefined)
      added.push_back({{"id", id},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type != GgufTokenType::UserDefined}});
  }

  nlohmann::json model = {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"ignore_merges", v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3"},
                          {"vocab", std::move(vocab)}};
  nlohmann::json tokenizer = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (byte_level) {
    nlohmann::json merges = nlohmann::json::array();
    for (std::size_t i = 0; i < v.merges.size(); ++i) {
      const auto& [left, right] = v.merges[i];
      // HF refuses a merge whose pieces or result are not in the vocabulary.
      for (const std::string& piece : {left, right, left + right})
        if (!ids.count(piece))
          throw Error(where + "merge " + std::to_string(i) + " " + detail::quoted(left + " " + right) +
                      " involves " + detail::quoted(piece) + ", which is not in the vocabulary");
      merges.push_back({left, right});
    }
    model["merges"] = std::move(merges);
    model["unk_token"] = nullptr;
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
    tokenizer["normalizer"] = nullptr;
    tokenizer["pre_tokenizer"] = detail::pre_tokenizer_for(file, v.pre);
    tokenizer["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    model["merges"] = detail::sentencepiece_merges(v, ids);
    model["unk_token"] = v.unk ? nlohmann::json(v.tokens[std::size_t(*v.unk)]) : nlohmann::json(nullptr);
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
    nlohmann::json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    nlohmann::json normalizers = nlohmann::json::array();
    if (v.add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    normalizers.push_back(replace_space);
    tokenizer["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    tokenizer["pre_tokenizer"] = nullptr;
    nlohmann::json decoders = {
        {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
    };
    if (v.add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  }
  tokenizer["model"] = std::move(model);
  tokenizer["added_tokens"] = std::move(added);
  if (v.add_bos || v.add_eos) tokenizer["post_processor"] = detail::template_processing(v);
  else if (byte_level)
    tokenizer["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  else tokenizer["post_processor"] = nullptr;
  return tokenizer;
}

// tokenizer_config.json: the special tokens by text, whether BOS/EOS are added,
// and the chat template.
inline nlohmann::ordered_json hf_tokenizer_config(const GgufVocab& v, std::int64_t model_max_length) {
  auto text = [&](const std::optional<std::int64_t>& id) {
    return id ? nlohmann::ordered_json(v.tokens[std::size_t(*id)]) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                   {"add_bos_token", v.add_bos},
                                   {"add_eos_token", v.add_eos},
                                   {"bos_token", text(v.bos)},
                                   {"eos_token", text(v.eos)},
                                   {"unk_token", text(v.unk)},
                                   {"pad_token", text(v.pad)},
                                   {"clean_up_tokenization_spaces", false},
                                   {"model_max_length", model_max_length}};
  if (v.chat_template) config["chat_template"] = *v.chat_template;
  return config;
}

}  // namespace ft::io
