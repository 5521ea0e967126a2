#pragma once
// The normaliser: rewrites each stretch of text between added tokens before it
// is split. A Sequence is flattened into a list of steps applied in order.
//
// tokenizer.json, "normalizer": null or one of
//   {"type": "Sequence", "normalizers": [...]}
//   {"type": "NFC"}
//   {"type": "Prepend", "prepend": "▁"}                         (only to non-empty text)
//   {"type": "Replace", "pattern": {"String": " "} | {"Regex": "..."}, "content": "▁"}
//   {"type": "Strip", "strip_left": true, "strip_right": true}   (White_Space)
// Others (NFD, NFKC, NFKD, Lowercase, BertNormalizer, Precompiled, ...) are refused.
//
// HF's Metaspace pre-tokenizer with prepend_scheme "first" needs to know whether
// a piece begins where the input begins; a normaliser that deletes the leading
// characters (Strip, Replace with "") moves that beginning, so normalize()
// updates the caller's `at_origin` flag as HF's offset tracking would.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/regex.hpp"
#include "ft/text/tokenizer/unicode_normalization.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

class Normalizer {
public:
  Normalizer() = default;
  // `node` is the "normalizer" member; null means none.
  static Normalizer from_json(const JsonNode& node) {
    Normalizer n;
    if (!node.is_null()) n.add(node);
    return n;
  }

  bool empty() const { return steps_.empty(); }

  void normalize(std::string& text, bool& at_origin) const {
    for (const Step& step : steps_) std::visit([&](const auto& s) { s.apply(text, at_origin); }, step);
  }

private:
  struct Nfc {
    void apply(std::string& text, bool&) const { to_nfc(text); }
  };
  struct Prepend {
    std::string prefix;
    void apply(std::string& text, bool&) const {
      if (!text.empty()) text.insert(0, prefix);
    }
  };
  struct Replace {
    Regex pattern;
    std::string content;
    void apply(std::string& text, bool& at_origin) const {
      std::string out;
      std::size_t previous = 0;
      bool matched = false;
      pattern.for_each_match(text, [&](std::size_t start, std::size_t end) {
        if (start == 0 && end > 0 && content.empty()) at_origin = false;
        out.append(text, previous, start - previous);
        out += content;
        previous = end;
        matched = true;
      });
      if (!matched) return;
      out.append(text, previous);
      text = std::move(out);
    }
  };
  struct Strip {
    bool left, right;
    void apply(std::string& text, bool& at_origin) const {
      std::size_t begin = 0, end = text.size();
      if (left) {
        for (std::size_t i = 0; i < end && is_white_space(utf8_next(text, i));) begin = i;
        if (begin > 0) at_origin = false;
      }
      if (right) {
        while (end > begin) {
          const std::size_t start = utf8_previous(text, end);
          std::size_t i = start;
          if (!is_white_space(utf8_next(text, i))) break;
          end = start;
        }
      }
      text = text.substr(begin, end - begin);
    }
  };
  using Step = std::variant<Nfc, Prepend, Replace, Strip>;

  void add(const JsonNode& node) {
    const std::string type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("normalizers");
      for (std::size_t i = 0, n = list.array_size(); i < n; ++i) add(list[i]);
    } else if (type == "NFC") {
      steps_.emplace_back(Nfc{});
    } else if (type == "Prepend") {
      Prepend p;
      p.prefix = node.at("prepend").string();
      steps_.emplace_back(std::move(p));
    } else if (type == "Replace") {
      Regex pattern = pattern_from_json(node.at("pattern"));
      std::string content = node.at("content").string();
      steps_.emplace_back(Replace{std::move(pattern), std::move(content)});
    } else if (type == "Strip") {
      Strip s;
      s.left = node.at("strip_left").boolean();
      s.right = node.at("strip_right").boolean();
      steps_.emplace_back(s);
    } else {
      node.unsupported("normalizer type " + quote(type));
    }
  }

  std::vector<Step> steps_;
};

}  // namespace ft::text::tokenization
