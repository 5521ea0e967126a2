#pragma once
// Python's view of text, for a template engine that must agree with Python's
// str byte for byte. Templates index, slice, measure, strip, split and case-map
// strings in code points and with Python's notion of whitespace, while ft keeps
// every string as UTF-8 bytes. These helpers bridge the two:
//  - decoding is lossless: a byte that is not part of valid UTF-8 becomes the
//    code point U+DC80+byte (Python's "surrogateescape") and encodes back to
//    the same byte, so arbitrary input survives any slice or round trip;
//  - whitespace is str.isspace(), the set `\s`, str.strip() and str.split()
//    use in Python (ASCII controls 0x09-0x0D and 0x1C-0x1F, space, U+0085,
//    U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000);
//  - case mapping covers Latin (ASCII, Latin-1, Latin Extended-A, the
//    digraphs and ligatures), Greek, Cyrillic, Armenian and fullwidth Latin,
//    with Python's special cases (ß→SS, ﬁ→FI, title case dž→Dž, final sigma); letters of other scripts are left as they are (a
//    documented difference from Python, which uses the whole Unicode table);
//  - "printable" (for repr) excludes controls, separators other than the
//    space, the common format characters, surrogates and private use.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/utf8.hpp"

namespace ft::text::jinja::unicode {

inline constexpr char32_t kEscapedByteBase = 0xDC80;

// Decodes the code point starting at `pos` and advances `pos` past it.
inline char32_t decode(std::string_view s, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  const auto escaped = [&] {
    ++pos;
    return char32_t(0xDC00 + b0);  // b0 >= 0x80: U+DC80..U+DCFF
  };
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  std::size_t length = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return escaped();
  }
  if (pos + length > s.size()) return escaped();
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return escaped();
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return escaped();
  pos += length;
  return cp;
}

inline void append(std::string& out, char32_t cp) {
  if (cp >= kEscapedByteBase && cp < kEscapedByteBase + 0x80)
    out += static_cast<char>(cp - kEscapedByteBase + 0x80);  // a raw byte carried through
  else
    utf8_append(out, cp);
}

inline std::u32string decode_all(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) out += decode(s, pos);
  return out;
}

inline std::string encode_all(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

// Byte offset of every code point, plus s.size() at the end: offsets[i] is
// where code point i starts, so a code-point slice [a, b) is bytes
// [offsets[a], offsets[b]).
inline std::vector<std::size_t> offsets(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for (std::size_t pos = 0; pos < s.size();) {
    out.push_back(pos);
    decode(s, pos);
  }
  out.push_back(s.size());
  return out;
}

inline std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t pos = 0; pos < s.size(); ++n) decode(s, pos);
  return n;
}

inline bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Line boundaries of str.splitlines().
inline bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

// One simple (one-to-one) case mapping; `to_upper` is false for lower-casing.
inline char32_t map_case(char32_t c, bool to_upper) {
  struct Range {
    char32_t upper_first, upper_last, lower_first;
  };
  // Blocks where upper and lower case letters are two parallel runs.
  static constexpr Range parallel[] = {
      {0x41, 0x5A, 0x61},     {0xC0, 0xD6, 0xE0},     {0xD8, 0xDE, 0xF8},     {0x391, 0x3A1, 0x3B1},
      {0x3A3, 0x3AB, 0x3C3},  {0x388, 0x38A, 0x3AD},  {0x38E, 0x38F, 0x3CD},  {0x410, 0x42F, 0x430},
      {0x400, 0x40F, 0x450},  {0x531, 0x556, 0x561},  {0xFF21, 0xFF3A, 0xFF41},
  };
  // Blocks where letters alternate upper, lower; `odd_upper` says which comes first.
  struct Alternating {
    char32_t first, last;
    bool odd_upper;
  };
  static constexpr Alternating alternating[] = {
      {0x100, 0x12F, false}, {0x132, 0x137, false}, {0x139, 0x148, true},  {0x14A, 0x177, false},
      {0x179, 0x17E, true},  {0x460, 0x481, false}, {0x48A, 0x4BF, false}, {0x4C1, 0x4CE, true},
      {0x4D0, 0x52F, false},
  };
  struct Pair {
    char32_t upper, lower;
  };
  static constexpr Pair pairs[] = {{0x178, 0xFF}, {0x386, 0x3AC}, {0x38C, 0x3CC}, {0x4C0, 0x4CF}};
  for (const auto& r : parallel) {
    const char32_t lower_last = r.lower_first + (r.upper_last - r.upper_first);
    if (to_upper && c >= r.lower_first && c <= lower_last) return c - r.lower_first + r.upper_first;
    if (!to_upper && c >= r.upper_first && c <= r.upper_last) return c - r.upper_first + r.lower_first;
  }
  for (const auto& r : alternating) {
    if (c < r.first || c > r.last) continue;
    const bool is_upper = ((c & 1) != 0) == r.odd_upper;
    if (to_upper && !is_upper) return c - 1;
    if (!to_upper && is_upper) return c + 1;
    return c;
  }
  // The digraphs DŽ Dž dž, LJ Lj lj, NJ Nj nj, DZ Dz dz: upper, title, lower.
  for (char32_t first : {char32_t(0x1C4), char32_t(0x1C7), char32_t(0x1CA), char32_t(0x1F1)})
    if (c >= first && c < first + 3) return to_upper ? first : first + 2;
  for (const auto& p : pairs) {
    if (to_upper && c == p.lower) return p.upper;
    if (!to_upper && c == p.upper) return p.lower;
  }
  if (to_upper) {
    if (c == 0xB5) return 0x39C;   // micro sign
    if (c == 0x131) return 'I';    // dotless i
    if (c == 0x17F) return 'S';    // long s
    if (c == 0x3C2) return 0x3A3;  // final sigma
  }
  return c;
}

inline bool is_upper_letter(char32_t c) { return map_case(c, false) != c; }
inline bool is_lower_letter(char32_t c) {
  return map_case(c, true) != c || c == 0xDF || c == 0x149 || (c >= 0xFB00 && c <= 0xFB06);
}
inline bool is_cased(char32_t c) { return is_upper_letter(c) || is_lower_letter(c); }

enum class Case { lower, upper, title };

// Appends the lower, upper or title case of `c`, with the one-to-many
// mappings Python applies (ß→SS, ŉ→ʼN, İ→i̇, the ﬀ..ﬆ ligatures) and the
// title case of the digraphs (dž→Dž).
inline void append_case(std::u32string& out, char32_t c, Case mode) {
  static constexpr std::u32string_view ligatures_upper[] = {U"FF", U"FI", U"FL", U"FFI", U"FFL", U"ST", U"ST"};
  static constexpr std::u32string_view ligatures_title[] = {U"Ff", U"Fi", U"Fl", U"Ffi", U"Ffl", U"St", U"St"};
  if (mode != Case::lower && c >= 0xFB00 && c <= 0xFB06) {
    out += (mode == Case::upper ? ligatures_upper : ligatures_title)[c - 0xFB00];
  } else if (mode != Case::lower && c == 0xDF) {
    out += mode == Case::upper ? U"SS" : U"Ss";
  } else if (mode != Case::lower && c == 0x149) {
    out += U"\u02BCN";
  } else if (mode == Case::lower && c == 0x130) {
    out += U"i\u0307";
  } else if (mode == Case::title && ((c >= 0x1C4 && c <= 0x1CC) || (c >= 0x1F1 && c <= 0x1F3))) {
    out += map_case(c, true) + 1;
  } else {
    out += map_case(c, mode != Case::lower);
  }
}

// Lower-cases capital sigma as Python does: final form (ς) at the end of a
// word, i.e. after a cased letter and not before one.
inline char32_t lower_sigma(const std::u32string& s, std::size_t i) {
  const bool after_cased = i > 0 && is_cased(s[i - 1]);
  const bool before_cased = i + 1 < s.size() && is_cased(s[i + 1]);
  return after_cased && !before_cased ? char32_t(0x3C2) : char32_t(0x3C3);
}

inline std::string change_case(std::string_view s, bool to_upper) {
  const std::u32string in = decode_all(s);
  std::u32string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!to_upper && in[i] == 0x3A3) {
      out += lower_sigma(in, i);
    } else {
      append_case(out, in[i], to_upper ? Case::upper : Case::lower);
    }
  }
  return encode_all(out);
}

inline std::string upper(std::string_view s) { return change_case(s, true); }
inline std::string lower(std::string_view s) { return change_case(s, false); }

// str.isprintable(), for repr: what Python would show as an escape instead.
inline bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;  // C1 controls, no-break space, soft hyphen
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;  // separators and format characters
  if ((c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000) return false;  // surrogates, private use
  return (c & 0xFFFE) != 0xFFFE;                                    // noncharacters
}

}  // namespace ft::text::jinja::unicode
