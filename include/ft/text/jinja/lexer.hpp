#pragma once
// Splitting a chat template into text and tag tokens, with the whitespace
// rules of the environment transformers compiles chat templates in
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)), as
// jinja2's lexer applies them:
//  - all line breaks (\r\n, \r, \n) become \n, and one trailing \n of the
//    whole source is dropped (keep_trailing_newline=False);
//  - trim_blocks: a single \n right after `%}` or `#}` is removed;
//  - lstrip_blocks: spaces and tabs (any whitespace but \n) between the start
//    of a line and a `{%` or `{#` are removed; not before `{{`;
//  - `{%-`, `{{-`, `{#-` remove all whitespace before the tag, `-%}`, `-}}`,
//    `-#}` all whitespace after it; `{%+` keeps the indentation lstrip_blocks
//    would remove and `+%}` the newline trim_blocks would;
//  - `{% raw %}...{% endraw %}` is text;
//  - inside a tag, `}}` or `%}` ends it only outside brackets, so
//    `{{ {'a': {'b': 1}} }}` is one expression.
// Literals follow jinja2 too: integers with `_` separators and 0b/0o/0x
// prefixes, floats with exponents, strings with Python's escapes. Names are
// ASCII identifiers (jinja2 also accepts other Unicode letters; ft does not).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/jinja/failure.hpp"
#include "ft/text/jinja/unicode.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

enum class TokenType { data, variable_begin, variable_end, block_begin, block_end, name, string, integer, number, op, eof };

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string, or operator symbol
  std::int64_t integer = 0;
  double number = 0;
  Location where;
};

class Lexer {
public:
  Lexer(std::string_view source, std::string_view origin) : origin_(origin) {
    source_.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        source_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        source_ += source[i];
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < source_.size(); ++i)
      if (source_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> tokenize() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < source_.size()) {
      const std::size_t open = find_opener(pos);
      if (open == std::string_view::npos) {
        emit_data(pos, source_.substr(pos));
        break;
      }
      const char kind = source_[open + 1];
      const std::size_t raw_end = kind == '%' ? match_raw_begin(open) : 0;
      const std::size_t sign_at = open + 2;
      const char sign = sign_at < source_.size() && (source_[sign_at] == '-' || source_[sign_at] == '+')
                            ? source_[sign_at]
                            : '\0';
      emit_data(pos, strip_before(pos, open, sign, kind != '{', line_starting));
      const std::size_t after = sign ? sign_at + 1 : sign_at;
      if (raw_end) {
        line_starting = source_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, line_starting);
        line_starting = source_[pos - 1] == '\n';
      } else if (kind == '#') {
        pos = skip_comment(open, after);
        line_starting = source_[pos - 1] == '\n';
      } else {
        pos = lex_tag(open, after, kind == '%');
        line_starting = source_[pos - 1] == '\n';
      }
    }
    tokens_.push_back(Token{TokenType::eof, {}, 0, 0, location(source_.size())});
    return std::move(tokens_);
  }

  Location location(std::size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t line = std::size_t(it - line_starts_.begin());
    return Location{line, offset - line_starts_[line - 1] + 1};
  }

private:
  [[noreturn]] void syntax_error(std::size_t offset, std::string_view message) const {
    throw located_error(origin_, location(offset), message);
  }

  bool starts_with(std::size_t pos, std::string_view s) const { return source_.compare(pos, s.size(), s) == 0; }
  bool is_digit(std::size_t pos) const { return pos < source_.size() && source_[pos] >= '0' && source_[pos] <= '9'; }

  // Python's `\s*` from pos.
  std::size_t skip_space(std::size_t pos) const {
    while (pos < source_.size()) {
      std::size_t next = pos;
      if (!unicode::is_space(unicode::decode(source_, next))) break;
      pos = next;
    }
    return pos;
  }

  std::size_t find_opener(std::size_t pos) const {
    for (std::size_t i = source_.find('{', pos); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // The text [pos, tag) with the whitespace the tag's sign (or lstrip_blocks)
  // removes before it.
  std::string_view strip_before(std::size_t pos, std::size_t tag, char sign, bool lstrip, bool line_starting) const {
    std::string_view text(source_.data() + pos, tag - pos);
    if (sign == '-') {
      std::size_t end = 0;
      for (std::size_t p = 0; p < text.size();)
        if (!unicode::is_space(unicode::decode(text, p))) end = p;
      return text.substr(0, end);
    }
    if (sign == '+' || !lstrip) return text;
    const std::size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
    if (line_start == 0 && !line_starting) return text;
    if (line_start == text.size()) return text;
    for (std::size_t p = line_start; p < text.size();)
      if (!unicode::is_space(unicode::decode(text, p))) return text;
    return text.substr(0, line_start);
  }

  void emit_data(std::size_t pos, std::string_view text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::data, std::string(text), 0, 0, location(pos)});
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at open: the offset after it, or 0.
  std::size_t match_raw_begin(std::size_t open) const {
    std::size_t p = open + 2;
    if (p < source_.size() && (source_[p] == '-' || source_[p] == '+')) ++p;
    p = skip_space(p);
    if (!starts_with(p, "raw")) return 0;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) return skip_space(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return 0;
  }

  std::size_t lex_raw(std::size_t pos, bool line_starting) {
    for (std::size_t open = source_.find("{%", pos); open != std::string::npos; open = source_.find("{%", open + 1)) {
      std::size_t p = open + 2;
      const char sign = p < source_.size() && (source_[p] == '-' || source_[p] == '+') ? source_[p] : '\0';
      if (sign) ++p;
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      std::size_t end = 0;
      if (starts_with(p, "+%}")) {
        end = p + 3;
      } else if (starts_with(p, "-%}")) {
        end = skip_space(p + 3);
      } else if (starts_with(p, "%}")) {
        end = p + 2;
        if (end < source_.size() && source_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_data(pos, strip_before(pos, open, sign, true, line_starting));
      return end;
    }
    syntax_error(pos, "Missing end of raw directive");
  }

  std::size_t skip_comment(std::size_t open, std::size_t body) const {
    const std::size_t close = source_.find("#}", body);
    if (close == std::string::npos) syntax_error(open, "Missing end of comment tag");
    const char sign = close > body ? source_[close - 1] : '\0';
    if (sign == '-') return skip_space(close + 2);
    if (sign != '+' && close + 2 < source_.size() && source_[close + 2] == '\n') return close + 3;
    return close + 2;
  }

  // Lexes the tokens of a `{{ }}` or `{% %}` tag opened at `open`; returns
  // the offset after its end (and the whitespace the end removes).
  std::size_t lex_tag(std::size_t open, std::size_t pos, bool block) {
    tokens_.push_back(Token{block ? TokenType::block_begin : TokenType::variable_begin, {}, 0, 0, location(open)});
    std::vector<char> brackets;
    while (pos < source_.size()) {
      if (brackets.empty()) {
        if (const std::size_t end = match_tag_end(pos, block)) {
          tokens_.push_back(Token{block ? TokenType::block_end : TokenType::variable_end, {}, 0, 0, location(pos)});
          return end;
        }
      }
      const std::size_t next = skip_space(pos);
      if (next != pos) {
        pos = next;
        continue;
      }
      pos = lex_token(pos, brackets);
    }
    return pos;  // the parser reports the missing end
  }

  std::size_t match_tag_end(std::size_t pos, bool block) const {
    if (block) {
      if (starts_with(pos, "+%}")) return pos + 3;
      if (starts_with(pos, "-%}")) return skip_space(pos + 3);
      if (starts_with(pos, "%}")) return pos + (pos + 2 < source_.size() && source_[pos + 2] == '\n' ? 3 : 2);
      return 0;
    }
    if (starts_with(pos, "-}}")) return skip_space(pos + 3);
    if (starts_with(pos, "}}")) return pos + 2;
    return 0;
  }

  // `(\d+_)*\d+` from pos: the end of the digits, or pos.
  std::size_t digits_end(std::size_t pos) const {
    if (!is_digit(pos)) return pos;
    while (is_digit(pos)) ++pos;
    while (pos + 1 < source_.size() && source_[pos] == '_' && is_digit(pos + 1)) {
      ++pos;
      while (is_digit(pos)) ++pos;
    }
    return pos;
  }

  // jinja2's float_re at pos: the end of the float, or 0.
  std::size_t match_float(std::size_t pos) const {
    if (pos > 0 && source_[pos - 1] == '.') return 0;
    const std::size_t whole = digits_end(pos);
    if (whole == pos) return 0;
    std::size_t p = whole;
    bool fraction = false;
    if (p < source_.size() && source_[p] == '.' && is_digit(p + 1)) {
      p = digits_end(p + 1);
      fraction = true;
    }
    if (p < source_.size() && (source_[p] == 'e' || source_[p] == 'E')) {
      std::size_t q = p + 1;
      if (q < source_.size() && (source_[q] == '+' || source_[q] == '-')) ++q;
      const std::size_t exp_end = digits_end(q);
      if (exp_end != q) return exp_end;
    }
    return fraction ? p : 0;
  }

  static int digit_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 99;
  }

  // jinja2's integer_re at pos; fills `value`; the end, or pos.
  std::size_t match_integer(std::size_t pos, std::int64_t& value) const {
    int base = 10;
    std::size_t p = pos;
    if (source_[pos] == '0' && pos + 1 < source_.size()) {
      const char prefix = char(source_[pos + 1] | 0x20);
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : prefix == 'x' ? 16 : 10;
    }
    std::size_t end = pos;
    if (base != 10) {
      p = pos + 2;
      while (true) {
        std::size_t q = p < source_.size() && source_[p] == '_' ? p + 1 : p;
        if (q >= source_.size() || digit_value(source_[q]) >= base) break;
        p = q + 1;
      }
      if (p == pos + 2) base = 10;  // "0b" with no digits: the integer is the "0"
      else end = p;
    }
    if (base == 10) {
      const bool zero = source_[pos] == '0';
      p = pos + 1;
      while (true) {
        std::size_t q = p < source_.size() && source_[p] == '_' ? p + 1 : p;
        if (!is_digit(q) || (zero && source_[q] != '0')) break;
        p = q + 1;
      }
      end = p;
    }
    value = 0;
    const std::size_t digits_start = base == 10 ? pos : pos + 2;
    for (std::size_t i = digits_start; i < end; ++i) {
      if (source_[i] == '_') continue;
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit_value(source_[i]), &value))
        syntax_error(pos, "integer literal does not fit in 64 bits");
    }
    return end;
  }

  std::size_t lex_token(std::size_t pos, std::vector<char>& brackets) {
    const char c = source_[pos];
    const Location where = location(pos);
    if (is_digit(pos)) {
      if (const std::size_t end = match_float(pos)) {
        std::string text;
        for (std::size_t i = pos; i < end; ++i)
          if (source_[i] != '_') text += source_[i];
        tokens_.push_back(Token{TokenType::number, text, 0, parse_decimal(text), where});
        return end;
      }
      std::int64_t value = 0;
      const std::size_t end = match_integer(pos, value);
      tokens_.push_back(Token{TokenType::integer, source_.substr(pos, end - pos), value, 0, where});
      return end;
    }
    if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      std::size_t end = pos + 1;
      while (end < source_.size() && (source_[end] == '_' || std::isalnum(static_cast<unsigned char>(source_[end]))))
        ++end;
      tokens_.push_back(Token{TokenType::name, source_.substr(pos, end - pos), 0, 0, where});
      return end;
    }
    if (c == '\'' || c == '"') return lex_string(pos);
    static constexpr std::string_view two[] = {"**", "//", "==", "!=", ">=", "<="};
    for (std::string_view op : two) {
      if (starts_with(pos, op)) {
        tokens_.push_back(Token{TokenType::op, std::string(op), 0, 0, where});
        return pos + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::size_t next = pos;
      unicode::decode(source_, next);
      syntax_error(pos, "unexpected char '" + source_.substr(pos, next - pos) + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) syntax_error(pos, std::string("unexpected '") + c + "'");
      if (brackets.back() != c)
        syntax_error(pos, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      brackets.pop_back();
    }
    tokens_.push_back(Token{TokenType::op, std::string(1, c), 0, 0, where});
    return pos + 1;
  }

  // A quoted string with Python's escapes, as jinja2 decodes it (through
  // "unicode-escape": an unknown escape such as \q stays as written).
  std::size_t lex_string(std::size_t pos) {
    const char quote = source_[pos];
    std::size_t p = pos + 1;
    std::u32string value;
    while (true) {
      if (p >= source_.size()) syntax_error(pos, "unterminated string literal");
      const char32_t c = unicode::decode(source_, p);
      if (c == char32_t(quote)) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (p >= source_.size()) syntax_error(pos, "unterminated string literal");
      p = unescape(pos, p, value);
    }
    tokens_.push_back(Token{TokenType::string, unicode::encode_all(value), 0, 0, location(pos)});
    return p;
  }

  // Decodes the escape whose backslash ends at p; returns the offset after it.
  std::size_t unescape(std::size_t literal, std::size_t p, std::u32string& value) const {
    const auto read_hex = [&](std::size_t count, const char* what) {
      char32_t v = 0;
      for (std::size_t i = 0; i < count; ++i, ++p) {
        if (p >= source_.size() || digit_value(source_[p]) > 15) syntax_error(literal, std::string("truncated ") + what + " escape");
        v = v * 16 + char32_t(digit_value(source_[p]));
      }
      return v;
    };
    const char32_t e = unicode::decode(source_, p);
    switch (e) {
      case '\n': return p;  // line continuation
      case '\\': value += '\\'; return p;
      case '\'': value += '\''; return p;
      case '"': value += '"'; return p;
      case 'a': value += 0x07; return p;
      case 'b': value += 0x08; return p;
      case 'f': value += 0x0C; return p;
      case 'n': value += '\n'; return p;
      case 'r': value += '\r'; return p;
      case 't': value += '\t'; return p;
      case 'v': value += 0x0B; return p;
      case 'x': value += read_hex(2, "\\xXX"); return p;
      case 'u': value += read_hex(4, "\\uXXXX"); return p;
      case 'U': {
        const char32_t v = read_hex(8, "\\UXXXXXXXX");
        if (v > 0x10FFFF) syntax_error(literal, "illegal Unicode character");
        value += v;
        return p;
      }
      case 'N': syntax_error(literal, "\\N{...} escapes are not supported");
      default: break;
    }
    if (e >= '0' && e <= '7') {
      char32_t v = e - '0';
      for (int i = 0; i < 2 && p < source_.size() && source_[p] >= '0' && source_[p] <= '7'; ++i, ++p)
        v = v * 8 + char32_t(source_[p] - '0');
      value += v;
      return p;
    }
    value += '\\';
    if (e < 0x80) {
      value += e;
    } else {
      // jinja2 first rewrites non-ASCII as \xXX, \uXXXX or \UXXXXXXXX, so a
      // backslash before one leaves that text behind.
      char buf[16];
      std::snprintf(buf, sizeof buf, e <= 0xFF ? "x%02x" : e <= 0xFFFF ? "u%04x" : "U%08x", unsigned(e));
      for (const char* q = buf; *q; ++q) value += char32_t(*q);
    }
    return p;
  }

  std::string origin_;
  std::string source_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

inline std::vector<Token> tokenize(std::string_view source, std::string_view origin) {
  return Lexer(source, origin).tokenize();
}

}  // namespace ft::text::jinja
