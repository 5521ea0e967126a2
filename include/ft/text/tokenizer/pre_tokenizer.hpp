#pragma once
// The pre-tokenizer: cuts normalised text into the "words" the BPE model sees,
// and may rewrite them (byte-level alphabet, metaspace). A Sequence is
// flattened into steps; each step hands its pieces straight to the next one
// through a PieceSink, so no list of pieces is ever built and a piece's text
// lives only as long as the call that produced it.
//
// tokenizer.json, "pre_tokenizer": null or one of
//   {"type": "Sequence", "pretokenizers": [...]}
//   {"type": "Split", "pattern": {"String"|"Regex": ...}, "behavior": "Isolated", "invert": false}
//   {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
//       use_regex: split with GPT-2's pattern first; add_prefix_space: a space
//       before every piece that lacks one; then bytes become byte-level characters.
//   {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"|"first"|"never", "split": true}
//       spaces become the replacement, which is prepended (for "first": only to the
//       piece that starts the input); split cuts before each replacement.
//       The older form with "add_prefix_space" is read as HF reads it.
//   {"type": "Digits", "individual_digits": true}   (digits are Unicode \p{N})
// Others (Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation,
// UnicodeScripts, CharDelimiterSplit, ...) are refused. trim_offsets only
// concerns offsets, which ft does not produce.
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ft/text/tokenizer/byte_level.hpp"
#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/regex.hpp"
#include "ft/text/tokenizer/split.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

// A non-owning reference to whatever receives pieces: (text, at_origin), where
// at_origin says that the piece begins where the input began.
class PieceSink {
public:
  template <class F>
  PieceSink(F& f) : object_(&f), call_([](void* o, std::string_view t, bool a) { (*static_cast<F*>(o))(t, a); }) {}
  void operator()(std::string_view text, bool at_origin) const { call_(object_, text, at_origin); }

private:
  void* object_;
  void (*call_)(void*, std::string_view, bool);
};

enum class PrependScheme { always, first, never };

inline PrependScheme parse_prepend_scheme(const JsonNode& node) {
  const std::string s = node.string();
  if (s == "always") return PrependScheme::always;
  if (s == "first") return PrependScheme::first;
  if (s == "never") return PrependScheme::never;
  node.fail("unknown prepend_scheme " + quote(s) + " (expected always, first or never)");
}

// Metaspace's replacement character and prepend scheme, shared by the decoder.
struct MetaspaceConfig {
  std::string replacement;  // one character, UTF-8
  PrependScheme scheme = PrependScheme::always;
  bool split = true;

  static MetaspaceConfig from_json(const JsonNode& node) {
    MetaspaceConfig c;
    const JsonNode rep = node.at("replacement");
    c.replacement = rep.string();
    std::size_t i = 0;
    if (c.replacement.empty() || (utf8_next(c.replacement, i), i != c.replacement.size()))
      rep.fail("expected exactly one character, got " + quote(c.replacement));
    if (auto s = node.find("prepend_scheme")) c.scheme = parse_prepend_scheme(*s);
    if (auto a = node.find("add_prefix_space"); a && !a->boolean() && c.scheme != PrependScheme::never)
      a->fail("add_prefix_space false contradicts prepend_scheme (HF refuses this too)");
    c.split = node.boolean_or("split", true);
    return c;
  }
};

class PreTokenizer {
public:
  PreTokenizer() = default;
  // `node` is the "pre_tokenizer" member; null means none.
  static PreTokenizer from_json(const JsonNode& node) {
    PreTokenizer p;
    if (!node.is_null()) p.add(node);
    return p;
  }

  // Hands every non-empty word of `text` to `sink`.
  void pre_tokenize(std::string_view text, bool at_origin, PieceSink sink) const { run(0, text, at_origin, sink); }

private:
  struct SplitStep {
    Regex pattern;
    SplitBehavior behavior;
    bool invert;
    void apply(std::string_view text, bool at_origin, PieceSink next) const {
      split_on(pattern, text, behavior, invert,
               [&](std::size_t s, std::size_t e) { next(text.substr(s, e - s), at_origin && s == 0); });
    }
  };
  struct ByteLevel {
    bool add_prefix_space;
    bool use_regex;
    void apply(std::string_view text, bool at_origin, PieceSink next) const {
      std::string prefixed;
      if (add_prefix_space && text.front() != ' ') {
        prefixed.reserve(text.size() + 1);
        prefixed += ' ';
        prefixed += text;
        text = prefixed;
      }
      std::string mapped;
      auto emit = [&](std::size_t s, std::size_t e) {
        mapped.clear();
        byte_level::append_bytes_as_chars(mapped, text.substr(s, e - s));
        next(mapped, at_origin && s == 0);
      };
      if (use_regex) split_on(gpt2_pattern(), text, SplitBehavior::isolated, false, emit);
      else emit(0, text.size());
    }
    static const Regex& gpt2_pattern() {
      static const Regex re = Regex::onig(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "ByteLevel pre-tokenizer");
      return re;
    }
  };
  struct Metaspace {
    MetaspaceConfig config;
    Regex replacement;  // config.replacement as a literal pattern
    void apply(std::string_view text, bool at_origin, PieceSink next) const {
      std::string s;
      s.reserve(text.size() + config.replacement.size());
      const bool prepend =
          config.scheme == PrependScheme::always || (config.scheme == PrependScheme::first && at_origin);
      for (char c : text) {
        if (c == ' ') s += config.replacement;
        else s += c;
      }
      if (prepend && !std::string_view(s).starts_with(config.replacement)) s.insert(0, config.replacement);
      if (!config.split) return next(s, at_origin);
      split_on(replacement, s, SplitBehavior::merged_with_next, false,
               [&](std::size_t b, std::size_t e) { next(std::string_view(s).substr(b, e - b), at_origin && b == 0); });
    }
  };
  struct Digits {
    SplitBehavior behavior;  // isolated: each digit alone; contiguous: runs of digits
    void apply(std::string_view text, bool at_origin, PieceSink next) const {
      static const Regex digit = Regex::onig(R"(\p{N})", "Digits pre-tokenizer");
      split_on(digit, text, behavior, false,
               [&](std::size_t s, std::size_t e) { next(text.substr(s, e - s), at_origin && s == 0); });
    }
  };
  using Step = std::variant<SplitStep, ByteLevel, Metaspace, Digits>;

  void run(std::size_t index, std::string_view text, bool at_origin, PieceSink sink) const {
    if (text.empty()) return;
    if (index == steps_.size()) return sink(text, at_origin);
    auto next = [&](std::string_view t, bool a) { run(index + 1, t, a, sink); };
    std::visit([&](const auto& step) { step.apply(text, at_origin, PieceSink(next)); }, steps_[index]);
  }

  void add(const JsonNode& node) {
    const std::string type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("pretokenizers");
      for (std::size_t i = 0, n = list.array_size(); i < n; ++i) add(list[i]);
    } else if (type == "Split") {
      Regex pattern = pattern_from_json(node.at("pattern"));
      const SplitBehavior behavior = parse_split_behavior(node.at("behavior"));
      const bool invert = node.at("invert").boolean();
      steps_.emplace_back(SplitStep{std::move(pattern), behavior, invert});
    } else if (type == "ByteLevel") {
      const bool add_prefix_space = node.at("add_prefix_space").boolean();
      node.at("trim_offsets").boolean();  // required by HF; it only moves offsets
      steps_.emplace_back(ByteLevel{add_prefix_space, node.boolean_or("use_regex", true)});
    } else if (type == "Metaspace") {
      MetaspaceConfig config = MetaspaceConfig::from_json(node);
      Regex replacement = Regex::literal(config.replacement, node.origin() + ": " + node.path());
      steps_.emplace_back(Metaspace{std::move(config), std::move(replacement)});
    } else if (type == "Digits") {
      const bool individual = node.at("individual_digits").boolean();
      steps_.emplace_back(Digits{individual ? SplitBehavior::isolated : SplitBehavior::contiguous});
    } else {
      node.unsupported("pre_tokenizer type " + quote(type));
    }
  }

  std::vector<Step> steps_;
};

}  // namespace ft::text::tokenization
