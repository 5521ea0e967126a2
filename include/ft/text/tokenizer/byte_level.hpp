#pragma once
// GPT-2's byte-level alphabet: every byte is shown as one printable character,
// so that a vocabulary of strings can hold any byte sequence. Printable bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 take the
// characters from U+0100 on, in byte order (space is 'Ġ', newline 'Ċ'). Used by
// the ByteLevel pre-tokenizer (bytes to characters) and decoder (and back).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization::byte_level {

constexpr bool is_printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// The character standing for each byte.
inline constexpr std::array<char32_t, 256> byte_to_char = [] {
  std::array<char32_t, 256> t{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) t[b] = is_printable(b) ? b : next++;
  return t;
}();

// The same as UTF-8, for appending without encoding each time.
struct Utf8Char {
  char bytes[2];
  std::uint8_t size;
};
inline constexpr std::array<Utf8Char, 256> byte_to_utf8 = [] {
  std::array<Utf8Char, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char[b];
    if (c < 0x80) t[b] = {{static_cast<char>(c), 0}, 1};
    else t[b] = {{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))}, 2};
  }
  return t;
}();

// The byte a character stands for, or -1. All byte characters are below U+0144.
inline constexpr std::size_t char_table_size = 0x144;
inline constexpr std::array<std::int16_t, char_table_size> char_to_byte = [] {
  std::array<std::int16_t, char_table_size> t{};
  for (auto& v : t) v = -1;
  for (unsigned b = 0; b < 256; ++b) t[byte_to_char[b]] = static_cast<std::int16_t>(b);
  return t;
}();

inline void append_bytes_as_chars(std::string& out, std::string_view bytes) {
  for (char c : bytes) {
    const auto& u = byte_to_utf8[static_cast<unsigned char>(c)];
    out.append(u.bytes, u.size);
  }
}

// Appends the bytes that the characters of `token` stand for; false (and
// nothing appended) when a character is not in the alphabet.
inline bool append_chars_as_bytes(std::string& out, std::string_view token) {
  const std::size_t mark = out.size();
  for (std::size_t i = 0; i < token.size();) {
    const char32_t c = utf8_next(token, i);
    if (c >= char_table_size || char_to_byte[c] < 0) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(char_to_byte[c]);
  }
  return true;
}

}  // namespace ft::text::tokenization::byte_level
