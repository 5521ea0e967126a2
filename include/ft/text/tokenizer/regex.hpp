#pragma once
// Regular expressions of tokenizer.json (Split patterns, Replace patterns, the
// GPT-2 split) run on PCRE2 with its JIT, in UTF mode with Unicode classes.
//
// The patterns are written for Oniguruma, which HF tokenizers runs them on, and
// a few escapes mean something else there: `\s` is exactly White_Space (PCRE2
// adds U+180E), `\w` is Alphabetic, marks, decimal digits and connectors (PCRE2:
// letters, numbers, underscore), `\h` is a hexadecimal digit (PCRE2: horizontal
// space), `\uHHHH` is a code point, and `^`/`$` always anchor at lines. These
// are rewritten before compiling, so that a split gives HF's pieces. The few
// rewrites that cannot be expressed (`\W`, `\H` inside a character class) and
// nested classes are refused by name.
//
// Matches are iterated the way HF's iterator does it: from the end of the
// previous match, and an empty match right where the previous one ended is
// skipped by moving one character on.
#include <cstddef>
#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "ft/core/error.hpp"
#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

namespace detail {

inline bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Rewrites an Oniguruma pattern into PCRE2 syntax; on failure returns false with `why`.
inline bool onig_to_pcre2(std::string_view p, std::string& out, std::string& why) {
  constexpr std::string_view word = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
  bool in_class = false;
  out.clear();
  for (std::size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      i += 2;
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'w': out += in_class ? std::string(word) : "[" + std::string(word) + "]"; break;
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'W':
        case 'H':
          if (in_class) {
            why = std::string("\\") + e + " inside a character class has no PCRE2 equivalent";
            return false;
          }
          out += e == 'W' ? "[^" + std::string(word) + "]" : "[^0-9a-fA-F]";
          break;
        case 'u':
          if (i + 4 <= p.size() && is_hex(p[i]) && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3])) {
            out += "\\x{" + std::string(p.substr(i, 4)) + "}";
            i += 4;
          } else {
            out += "\\u";
          }
          break;
        default: out += c; out += e;
      }
      continue;
    }
    if (c == '[') {
      if (in_class) {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class such as [:alpha:]
          const auto close = p.find(":]", i + 2);
          if (close != std::string_view::npos) {
            out.append(p.substr(i, close + 2 - i));
            i = close + 2;
            continue;
          }
        }
        why = "nested character classes are not supported";
        return false;
      }
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ] is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
    ++i;
  }
  return true;
}

inline std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

// One match-data block per thread: a compiled pattern is shared by all threads.
inline pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  if (!holder.data) throw std::bad_alloc();
  return holder.data;
}

}  // namespace detail

class Regex {
public:
  // `pattern` in Oniguruma syntax; `where` ("tokenizer.json: pre_tokenizer.pattern")
  // prefixes every error, at compile time and when a match fails.
  static Regex onig(std::string_view pattern, const std::string& where) {
    std::string translated, why;
    if (!detail::onig_to_pcre2(pattern, translated, why)) throw Error(where + ": regex " + quote(pattern) + ": " + why);
    return Regex(translated, where, pattern);
  }
  // Matches `text` literally.
  static Regex literal(std::string_view text, const std::string& where) {
    std::string escaped;
    for (char c : text) {
      const auto u = static_cast<unsigned char>(c);
      const bool alnum = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z');
      if (u < 0x80 && !alnum) {
        if (u < 0x20 || u == 0x7F) {
          static constexpr char hex[] = "0123456789abcdef";
          escaped += "\\x{";
          escaped += hex[u >> 4];
          escaped += hex[u & 15];
          escaped += '}';
          continue;
        }
        escaped += '\\';
      }
      escaped += c;
    }
    return Regex(escaped, where, text);
  }

  // Calls on_match(start, end) for each match in `text`, which must be UTF-8.
  template <class F> void for_each_match(std::string_view text, F&& on_match) const {
    pcre2_match_data* data = detail::thread_match_data();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t from = 0;
    std::size_t last_match_end = std::string_view::npos;
    while (from <= text.size()) {
      const int rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) throw Error(where_ + ": regex " + quote(source_) + " failed: " + detail::pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      const std::size_t start = ov[0], end = ov[1];
      if (start == end && end == last_match_end) {
        if (from >= text.size()) return;
        from += std::max<std::size_t>(1, utf8_sequence_length(static_cast<unsigned char>(text[from])));
        continue;
      }
      from = last_match_end = end;
      on_match(start, end);
    }
  }

private:
  struct Code {
    pcre2_code* code = nullptr;
    Code() = default;
    Code(const Code&) = delete;
    Code& operator=(const Code&) = delete;
    ~Code() { pcre2_code_free(code); }
  };

  Regex(const std::string& pcre2_pattern, const std::string& where, std::string_view source)
      : where_(where), source_(source) {
    auto compiled = std::make_shared<Code>();
    std::unique_ptr<pcre2_compile_context, void (*)(pcre2_compile_context*)> context(
        pcre2_compile_context_create(nullptr), pcre2_compile_context_free);
    if (!context) throw std::bad_alloc();
    pcre2_set_newline(context.get(), PCRE2_NEWLINE_LF);
    int error = 0;
    PCRE2_SIZE offset = 0;
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C, &error, &offset,
                                   context.get());
    if (!compiled->code)
      throw Error(where + ": regex " + quote(source) + " does not compile: " + detail::pcre2_message(error));
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);  // without a JIT, pcre2_match interprets
    code_ = std::move(compiled);
  }

  std::shared_ptr<const Code> code_;
  std::string where_;
  std::string source_;
};

// The {"String": "..."} or {"Regex": "..."} patterns of Split and Replace.
inline Regex pattern_from_json(const JsonNode& node) {
  node.expect_object();
  const std::string where = node.origin() + ": " + node.path();
  if (node.value().size() == 1) {
    if (auto s = node.find("String")) return Regex::literal(s->string(), where);
    if (auto r = node.find("Regex")) return Regex::onig(r->string(), where);
  }
  node.fail("expected {\"String\": ...} or {\"Regex\": ...}, got " + dump(node.value()));
}

}  // namespace ft::text::tokenization
