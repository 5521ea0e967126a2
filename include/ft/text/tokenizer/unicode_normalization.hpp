#pragma once
// NFC, the normaliser of GPT-NeoX and Qwen2 tokenizers. The textbook algorithm
// (full canonical decomposition, canonical ordering of marks, canonical
// composition) over tables generated to match HF's normaliser
// (unicode_tables.hpp). Most text is already NFC, so only the stretches around
// characters that could change are rebuilt.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/tokenizer/unicode_tables.hpp"
#include "ft/text/tokenizer/utf8.hpp"

namespace ft::text::tokenization {

namespace hangul {
inline constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
inline constexpr char32_t l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count,
                          s_count = l_count * n_count;
}  // namespace hangul

inline std::uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto& t = unicode_tables::combining_classes;
  auto it = std::upper_bound(std::begin(t), std::end(t), c, [](char32_t v, const auto& r) { return v < r.first; });
  if (it == std::begin(t) || c > std::prev(it)->last) return 0;
  return std::prev(it)->ccc;
}

// Appends the full canonical decomposition of c.
inline void decompose(char32_t c, std::u32string& out) {
  using namespace hangul;
  if (c >= s_base && c < s_base + s_count) {
    const char32_t s = c - s_base;
    out += l_base + s / n_count;
    out += v_base + (s % n_count) / t_count;
    if (s % t_count) out += t_base + s % t_count;
    return;
  }
  const auto& t = unicode_tables::decompositions;
  auto it = std::lower_bound(std::begin(t), std::end(t), c, [](const auto& d, char32_t v) { return d.cp < v; });
  if (it == std::end(t) || it->cp != c) {
    out += c;
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
inline char32_t compose(char32_t a, char32_t b) {
  using namespace hangul;
  if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
    return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
  if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base && b < t_base + t_count)
    return a + (b - t_base);
  const auto& t = unicode_tables::compositions;
  auto it = std::lower_bound(std::begin(t), std::end(t), std::pair{a, b},
                             [](const auto& e, std::pair<char32_t, char32_t> v) {
                               return e.first != v.first ? e.first < v.first : e.second < v.second;
                             });
  return it != std::end(t) && it->first == a && it->second == b ? it->composite : 0;
}

inline bool nfc_may_change(char32_t c) {
  if (c < 0x300) return false;
  const auto& t = unicode_tables::nfc_unstable;
  auto it = std::upper_bound(std::begin(t), std::end(t), c, [](char32_t v, const auto& r) { return v < r.first; });
  return it != std::begin(t) && c <= std::prev(it)->last;
}

// NFC of one stretch of valid UTF-8, appended to `out`.
inline void append_nfc(std::string_view s, std::string& out) {
  std::u32string chars;
  for (std::size_t i = 0; i < s.size();) decompose(utf8_next(s, i), chars);
  // Canonical ordering: a stable sort of each run of marks by class.
  std::vector<std::uint8_t> classes(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) classes[i] = combining_class(chars[i]);
  for (std::size_t i = 1; i < chars.size(); ++i) {
    for (std::size_t j = i; j > 0 && classes[j] != 0 && classes[j - 1] > classes[j]; --j) {
      std::swap(chars[j], chars[j - 1]);
      std::swap(classes[j], classes[j - 1]);
    }
  }
  // Canonical composition: a character joins the last starter unless blocked.
  std::u32string composed;
  std::size_t starter = std::u32string::npos;
  std::uint8_t last_class = 0;
  for (std::size_t i = 0; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const std::uint8_t cc = classes[i];
    if (starter != std::u32string::npos) {
      const bool adjacent = composed.size() == starter + 1;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (const char32_t p = compose(composed[starter], c)) {
          composed[starter] = p;
          continue;
        }
      }
    }
    if (cc == 0) starter = composed.size();
    last_class = cc;
    composed += c;
  }
  for (char32_t c : composed) utf8_append(out, c);
}

// NFC of valid UTF-8 `s`, in place. A character outside nfc_unstable is a
// starter that nothing before it can join, so text is cut before each such
// character, and only the stretches that contain an unstable character (from
// the stable starter before it to the next stable character) are rebuilt.
inline void to_nfc(std::string& s) {
  std::string out;
  std::size_t emitted = 0;                        // s[0, emitted) is in `out` already
  std::size_t last_stable = std::string::npos;  // start of the last stable character seen
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t here = i;
    if (!nfc_may_change(utf8_next(s, i))) {
      last_stable = here;
      continue;
    }
    const std::size_t begin = last_stable != std::string::npos && last_stable >= emitted ? last_stable : emitted;
    std::size_t end = i;
    for (std::size_t j = end; j < s.size() && nfc_may_change(utf8_next(s, j));) end = j;
    out.append(s, emitted, begin - emitted);
    append_nfc(std::string_view(s).substr(begin, end - begin), out);
    emitted = i = end;
    last_stable = std::string::npos;
  }
  if (emitted == 0) return;  // nothing was unstable
  out.append(s, emitted);
  s = std::move(out);
}

}  // namespace ft::text::tokenization
