#pragma once
// UTF-8 for the tokenizer: text is validated once when it enters `encode`, so
// every later stage may decode without checks. Decoding produces bytes that
// need not be UTF-8 (byte-level tokens); those are made text the way Rust's
// `String::from_utf8_lossy` does it, one U+FFFD per maximal invalid prefix,
// because that is what HF's decoders return.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ft/core/utf8.hpp"

namespace ft::text::tokenization {

// Length of the sequence a lead byte starts; 0 for a continuation or invalid byte.
constexpr std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// Length of the longest prefix of `s` (1 to 4 bytes) that is, or could begin, a
// well-formed sequence; `complete` tells which. Follows the Unicode table of
// well-formed byte sequences, so overlong forms and surrogates are refused.
constexpr std::size_t utf8_valid_prefix(std::string_view s, bool& complete) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  const std::size_t need = utf8_sequence_length(b0);
  complete = need == 1;
  if (need <= 1) return 1;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 == 0xE0) lo = 0xA0;
  else if (b0 == 0xED) hi = 0x9F;
  else if (b0 == 0xF0) lo = 0x90;
  else if (b0 == 0xF4) hi = 0x8F;
  std::size_t n = 1;
  for (; n < need && n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[n]);
    if (b < lo || b > hi) return n;
    lo = 0x80, hi = 0xBF;
  }
  complete = n == need;
  return n;
}

// Byte offset of the first ill-formed sequence, or npos when `s` is UTF-8.
constexpr std::size_t utf8_invalid_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete = false;
    const std::size_t n = utf8_valid_prefix(s.substr(i), complete);
    if (!complete) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Decodes the character at s[i] of valid UTF-8 and advances i past it.
constexpr char32_t utf8_next(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const std::size_t n = utf8_sequence_length(b0);
  if (n <= 1) {
    ++i;
    return b0;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// Start of the character that ends just before s[i] in valid UTF-8.
constexpr std::size_t utf8_previous(std::string_view s, std::size_t i) {
  do --i;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

using ft::utf8_append;

inline std::string utf8_encode(char32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

inline constexpr std::string_view replacement_character = "\xEF\xBF\xBD";

// Appends `bytes` as text, each maximal ill-formed prefix becoming one U+FFFD.
inline void utf8_append_lossy(std::string& out, std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const std::size_t n = utf8_valid_prefix(bytes.substr(i), complete);
    if (complete) out.append(bytes.substr(i, n));
    else out.append(replacement_character);
    i += n;
  }
}

// Unicode's White_Space property: Rust's char::is_whitespace and regex `\s`.
constexpr bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace ft::text::tokenization
