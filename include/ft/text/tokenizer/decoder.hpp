#pragma once
// The decoder turns the tokens of a list of ids back into text. As in HF, each
// step maps the list of token strings to a new list (so Strip applies to every
// token until Fuse has joined them) and the final list is concatenated. With no
// decoder the tokens are joined with spaces, as HF does.
//
// tokenizer.json, "decoder": null or one of
//   {"type": "Sequence", "decoders": [...]}
//   {"type": "ByteLevel", ...}     byte-level characters back to bytes, then
//       text with U+FFFD for invalid UTF-8; a token with a character outside the
//       alphabet (an added token) is taken as it is
//   {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}
//   {"type": "ByteFallback"}       runs of <0xXX> tokens become their bytes, or
//       one U+FFFD per byte when they are not UTF-8
//   {"type": "Fuse"}               all tokens become one
//   {"type": "Strip", "content": " ", "start": 1, "stop": 0}
//   {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", ...}
// Others (WordPiece, BPEDecoder, CTC) are refused.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ft/text/tokenizer/byte_level.hpp"
#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/pre_tokenizer.hpp"
#include "ft/text/tokenizer/regex.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

class Decoder {
public:
  Decoder() = default;
  // `node` is the "decoder" member; null means none.
  static Decoder from_json(const JsonNode& node) {
    Decoder d;
    if (!node.is_null()) {
      d.present_ = true;
      d.add(node);
    }
    return d;
  }

  std::string decode(std::vector<std::string> tokens) const {
    for (const Step& step : steps_) std::visit([&](const auto& s) { s.apply(tokens); }, step);
    std::string text;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && !present_) text += ' ';
      text += tokens[i];
    }
    return text;
  }

private:
  using Tokens = std::vector<std::string>;

  struct ByteLevel {
    void apply(Tokens& tokens) const {
      std::string bytes;
      for (const std::string& t : tokens)
        if (!byte_level::append_chars_as_bytes(bytes, t)) bytes += t;
      std::string text;
      utf8_append_lossy(text, bytes);
      tokens.assign(1, std::move(text));
    }
  };
  struct Replace {
    Regex pattern;
    std::string content;
    void apply(Tokens& tokens) const {
      for (std::string& t : tokens) {
        std::string out;
        std::size_t previous = 0;
        pattern.for_each_match(t, [&](std::size_t start, std::size_t end) {
          out.append(t, previous, start - previous);
          out += content;
          previous = end;
        });
        out.append(t, previous);
        t = std::move(out);
      }
    }
  };
  struct ByteFallback {
    // HF reads the two characters after "<0x" with Rust's from_str_radix,
    // which also takes a leading '+'.
    static std::optional<unsigned char> byte_of(std::string_view t) {
      if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return std::nullopt;
      auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      if (t[3] == '+' && digit(t[4]) >= 0) return static_cast<unsigned char>(digit(t[4]));
      if (digit(t[3]) < 0 || digit(t[4]) < 0) return std::nullopt;
      return static_cast<unsigned char>(digit(t[3]) * 16 + digit(t[4]));
    }
    void apply(Tokens& tokens) const {
      Tokens out;
      std::string bytes;
      auto flush = [&] {
        if (bytes.empty()) return;
        if (utf8_invalid_at(bytes) == std::string_view::npos) out.push_back(bytes);
        else out.insert(out.end(), bytes.size(), std::string(replacement_character));
        bytes.clear();
      };
      for (std::string& t : tokens) {
        if (auto b = byte_of(t)) {
          bytes += static_cast<char>(*b);
          continue;
        }
        flush();
        out.push_back(std::move(t));
      }
      flush();
      tokens = std::move(out);
    }
  };
  struct Fuse {
    void apply(Tokens& tokens) const {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
    }
  };
  struct Strip {
    std::string content;  // one character
    std::size_t start, stop;
    void apply(Tokens& tokens) const {
      for (std::string& t : tokens) {
        std::string_view v = t;
        for (std::size_t i = 0; i < start && v.starts_with(content); ++i) v.remove_prefix(content.size());
        for (std::size_t i = 0; i < stop && v.ends_with(content); ++i) v.remove_suffix(content.size());
        t = std::string(v);
      }
    }
  };
  struct Metaspace {
    MetaspaceConfig config;
    void apply(Tokens& tokens) const {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        const bool drop = i == 0 && config.scheme != PrependScheme::never;  // HF drops them all in the first token
        std::string out;
        std::string_view t = tokens[i];
        for (std::size_t p = 0; p < t.size();) {
          if (t.substr(p).starts_with(config.replacement)) {
            if (!drop) out += ' ';
            p += config.replacement.size();
          } else {
            out += t[p++];
          }
        }
        tokens[i] = std::move(out);
      }
    }
  };
  using Step = std::variant<ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace>;

  void add(const JsonNode& node) {
    const std::string type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("decoders");
      for (std::size_t i = 0, n = list.array_size(); i < n; ++i) add(list[i]);
    } else if (type == "ByteLevel") {
      steps_.emplace_back(ByteLevel{});
    } else if (type == "Replace") {
      Regex pattern = pattern_from_json(node.at("pattern"));
      std::string content = node.at("content").string();
      steps_.emplace_back(Replace{std::move(pattern), std::move(content)});
    } else if (type == "ByteFallback") {
      steps_.emplace_back(ByteFallback{});
    } else if (type == "Fuse") {
      steps_.emplace_back(Fuse{});
    } else if (type == "Strip") {
      const JsonNode c = node.at("content");
      Strip s;
      s.content = c.string();
      std::size_t i = 0;
      if (s.content.empty() || (utf8_next(s.content, i), i != s.content.size()))
        c.fail("expected exactly one character, got " + quote(s.content));
      s.start = std::size_t(node.at("start").integer(0, std::numeric_limits<std::int32_t>::max()));
      s.stop = std::size_t(node.at("stop").integer(0, std::numeric_limits<std::int32_t>::max()));
      steps_.emplace_back(std::move(s));
    } else if (type == "Metaspace") {
      steps_.emplace_back(Metaspace{MetaspaceConfig::from_json(node)});
    } else {
      node.unsupported("decoder type " + quote(type));
    }
  }

  bool present_ = false;
  std::vector<Step> steps_;
};

}  // namespace ft::text::tokenization
