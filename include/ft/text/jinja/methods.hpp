#pragma once
// Methods of Python's built-in types as templates call them:
// `message.content.strip()`, `content.split('</think>')[-1]`,
// `tool.items()`, `message.get('tool_calls')`. They follow Python's str,
// dict and list, in code points and with Python's whitespace (unicode.hpp).
// Every method name Python has is known, so `x.zfill is defined` is true as
// in Python; the few ft does not implement (encode, expandtabs, format_map,
// isidentifier, isprintable, maketrans, translate) fail when called. The
// sandbox transformers renders in forbids methods that mutate (list.append,
// dict.update, ...): naming one gives an Undefined that fails with the
// sandbox's message when used.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/call.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

// ---- text helpers shared with the filters -------------------------------------

// Python's str.strip/lstrip/rstrip: `chars` null strips whitespace.
inline std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string set = chars ? unicode::decode_all(*chars) : std::u32string();
  const auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : unicode::is_space(c); };
  const std::vector<std::size_t> at = unicode::offsets(s);
  std::size_t first = 0, last = at.size() - 1;  // code point range [first, last)
  const auto cp = [&](std::size_t i) {
    std::size_t p = at[i];
    return unicode::decode(s, p);
  };
  if (left)
    while (first < last && strippable(cp(first))) ++first;
  if (right)
    while (last > first && strippable(cp(last - 1))) --last;
  return std::string(s.substr(at[first], at[last] - at[first]));
}

// Python's str.split / str.rsplit.
inline std::vector<std::string> py_split(std::string_view s, const std::string* sep, std::int64_t maxsplit,
                                         bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    if (!from_right) {
      std::size_t start = 0;
      while (maxsplit != 0) {
        const std::size_t hit = s.find(*sep, start);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, hit - start));
        start = hit + sep->size();
        --maxsplit;
      }
      parts.emplace_back(s.substr(start));
    } else {
      std::size_t end = s.size();
      while (maxsplit != 0 && end >= sep->size()) {
        const std::size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
        --maxsplit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace: runs of it separate, and none is kept at either end (except
  // after the last allowed split, where the rest is kept as it is).
  const std::u32string cps = unicode::decode_all(s);
  if (!from_right) {
    std::size_t i = 0;
    while (true) {
      while (i < cps.size() && unicode::is_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit == 0) {
        std::size_t end = cps.size();
        parts.push_back(unicode::encode_all(cps.substr(i, end - i)));
        break;
      }
      std::size_t j = i;
      while (j < cps.size() && !unicode::is_space(cps[j])) ++j;
      parts.push_back(unicode::encode_all(cps.substr(i, j - i)));
      i = j;
      --maxsplit;
    }
  } else {
    std::size_t i = cps.size();
    while (true) {
      while (i > 0 && unicode::is_space(cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit == 0) {
        parts.push_back(unicode::encode_all(cps.substr(0, i)));
        break;
      }
      std::size_t j = i;
      while (j > 0 && !unicode::is_space(cps[j - 1])) --j;
      parts.push_back(unicode::encode_all(cps.substr(j, i - j)));
      i = j;
      --maxsplit;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

// Python's str.replace, including the empty `old` that inserts `new` between
// characters.
inline std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                              std::int64_t count, Budget& budget) {
  std::string out;
  const auto grow = [&](std::string_view piece) {
    budget.check_size(out.size() + piece.size());
    out += piece;
  };
  if (old.empty()) {
    std::size_t pos = 0;
    while (pos < s.size()) {
      if (count != 0) {
        grow(replacement);
        --count;
      }
      const std::size_t start = pos;
      unicode::decode(s, pos);
      grow(s.substr(start, pos - start));
    }
    if (count != 0) grow(replacement);
    return out;
  }
  std::size_t start = 0;
  while (count != 0) {
    const std::size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    grow(s.substr(start, hit - start));
    grow(replacement);
    start = hit + old.size();
    --count;
  }
  grow(s.substr(start));
  return out;
}

// Python's str.title: a letter after a cased letter is lowered, any other raised.
inline std::string py_title(std::string_view s) {
  std::u32string out;
  bool previous_cased = false;
  const std::u32string in = unicode::decode_all(s);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char32_t c = in[i];
    if (previous_cased) {
      if (c == 0x3A3) {
        out += unicode::lower_sigma(in, i);
      } else {
        unicode::append_case(out, c, unicode::Case::lower);
      }
    } else {
      unicode::append_case(out, c, unicode::Case::title);
    }
    previous_cased = unicode::is_cased(c);
  }
  return unicode::encode_all(out);
}

// Python's str.capitalize: the first character raised, the rest lowered.
inline std::string py_capitalize(std::string_view s) {
  const std::u32string in = unicode::decode_all(s);
  std::u32string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i > 0 && in[i] == 0x3A3) {
      out += unicode::lower_sigma(in, i);
    } else {
      unicode::append_case(out, in[i], i == 0 ? unicode::Case::title : unicode::Case::lower);
    }
  }
  return unicode::encode_all(out);
}

inline std::string py_swapcase(std::string_view s) {
  std::u32string out;
  for (char32_t c : unicode::decode_all(s))
    unicode::append_case(out, c, unicode::is_lower_letter(c) ? unicode::Case::upper : unicode::Case::lower);
  return unicode::encode_all(out);
}

// Python's str.center/ljust/rjust (`where`: 'c', 'l', 'r').
inline std::string py_pad(std::string_view s, std::int64_t width, std::string_view fill, char where, Budget& budget) {
  const std::int64_t length = std::int64_t(unicode::length(s));
  if (width <= length) return std::string(s);
  budget.check_size(std::size_t(width) * fill.size());
  const std::int64_t margin = width - length;
  std::int64_t left = where == 'l' ? 0 : where == 'r' ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = left; i < margin; ++i) out += fill;
  return out;
}

inline std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t at = pos;
    const char32_t c = unicode::decode(s, pos);
    if (!unicode::is_line_break(c)) continue;
    if (c == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    lines.emplace_back(s.substr(start, (keepends ? pos : at) - start));
    start = pos;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

inline Value string_list(std::vector<std::string> parts, Budget& budget) {
  budget.check_size(parts.size());
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// Python's str.format for the replacement fields templates use: "{}",
// "{0}", "{name}", with an optional !s or !r conversion and no format spec.
inline std::string py_format(std::string_view format, const Arguments& args, Budget& budget) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fail("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = format.find('}', i);
    if (close == std::string_view::npos) fail("Single '{' encountered in format string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const std::size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r'))
        fail("str.format conversions other than !s and !r are not supported in chat templates");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find_first_of(":.[") != std::string_view::npos)
      fail("str.format specs and field lookups are not supported in chat templates");
    const Value* value = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      std::size_t index = auto_index++;
      if (!field.empty()) index = std::size_t(std::stoull(std::string(field.substr(0, 12))));
      if (index >= args.positional.size())
        fail("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      value = &args.positional[index];
    } else {
      for (const auto& [k, v] : args.keywords)
        if (k == field) value = &v;
      if (!value) fail("'" + std::string(field) + "'");
    }
    out += conversion == 'r' ? repr(*value) : to_str(*value);
    budget.check_size(out.size());
  }
  return out;
}

// ---- method tables ------------------------------------------------------------

inline constexpr std::string_view kStringMethods[] = {
    "capitalize", "casefold",   "center",       "count",      "encode",     "endswith",  "expandtabs",
    "find",       "format",     "format_map",   "index",      "isalnum",    "isalpha",   "isascii",
    "isdecimal",  "isdigit",    "isidentifier", "islower",    "isnumeric",  "isprintable", "isspace",
    "istitle",    "isupper",    "join",         "ljust",      "lower",      "lstrip",    "maketrans",
    "partition",  "removeprefix", "removesuffix", "replace",  "rfind",      "rindex",    "rjust",
    "rpartition", "rsplit",     "rstrip",       "split",      "splitlines", "startswith", "strip",
    "swapcase",   "title",      "translate",    "upper",      "zfill"};
inline constexpr std::string_view kDictMethods[] = {"copy", "fromkeys", "get", "items", "keys", "values"};
inline constexpr std::string_view kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};
inline constexpr std::string_view kListMethods[] = {"copy", "count", "index"};
inline constexpr std::string_view kListMutators[] = {"append", "clear", "extend", "insert",
                                                     "pop",    "remove", "reverse", "sort"};
inline constexpr std::string_view kTupleMethods[] = {"count", "index"};
inline constexpr std::string_view kIntMethods[] = {"as_integer_ratio", "bit_count", "bit_length",
                                                   "conjugate",        "from_bytes", "to_bytes"};
inline constexpr std::string_view kFloatMethods[] = {"as_integer_ratio", "conjugate", "fromhex", "hex", "is_integer"};

template <std::size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

enum class MethodKind { none, method, unsafe };

// Whether a value of a built-in type has a method `name`.
inline MethodKind method_kind(const Value& v, std::string_view name) {
  if (v.is_string()) return listed(kStringMethods, name) ? MethodKind::method : MethodKind::none;
  if (v.is_dict()) {
    if (listed(kDictMethods, name)) return MethodKind::method;
    return listed(kDictMutators, name) ? MethodKind::unsafe : MethodKind::none;
  }
  if (v.is_sequence() && v.as_sequence().kind == SequenceKind::list) {
    if (listed(kListMethods, name)) return MethodKind::method;
    return listed(kListMutators, name) ? MethodKind::unsafe : MethodKind::none;
  }
  if (v.is_sequence() && v.as_sequence().kind == SequenceKind::tuple)
    return listed(kTupleMethods, name) ? MethodKind::method : MethodKind::none;
  if (v.is_integral()) return listed(kIntMethods, name) ? MethodKind::method : MethodKind::none;
  if (v.is_float()) return listed(kFloatMethods, name) ? MethodKind::method : MethodKind::none;
  return MethodKind::none;
}

inline std::string unsafe_message(const Value& v, std::string_view name) {
  return "access to attribute '" + std::string(name) + "' of '" + type_name(v) + "' object is unsafe.";
}

// Code-point index of a byte offset.
inline std::int64_t char_index(std::string_view s, std::size_t byte) {
  return std::int64_t(unicode::length(s.substr(0, byte)));
}

// The prefix (or suffix) argument of startswith/endswith: a str or a tuple of them.
inline bool affix_matches(std::string_view s, const Value& affix, bool at_end, std::string_view function) {
  const auto one = [&](const Value& a) {
    const std::string& t = string_argument(function, a);
    if (t.size() > s.size()) return false;
    return at_end ? s.substr(s.size() - t.size()) == t : s.substr(0, t.size()) == t;
  };
  if (affix.is_sequence() && affix.as_sequence().kind == SequenceKind::tuple) {
    for (const auto& a : affix.as_sequence().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

template <class Predicate>
bool all_chars(std::string_view s, Predicate p) {
  const std::u32string cps = unicode::decode_all(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), p);
}

inline bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
// Letters: cased ones, and (approximately) any non-ASCII character outside
// the Latin-1 punctuation, spaces and escaped bytes.
inline bool is_alpha(char32_t c) {
  if (unicode::is_cased(c)) return true;
  const bool escaped_byte = c >= unicode::kEscapedByteBase && c < unicode::kEscapedByteBase + 0x80;
  return c > 0x2FF && !unicode::is_space(c) && !escaped_byte;
}

inline Value call_string_method(const std::string& s, std::string_view name, const Arguments& args, Budget& budget) {
  const std::string fn = "str." + std::string(name);
  budget.step(1 + s.size() / 16);
  const auto text = [](std::string v) { return Value::string(std::move(v)); };
  const auto optional_string = [&](const std::optional<Value>& v) -> const std::string* {
    if (!v || v->is_none()) return nullptr;
    return &string_argument(fn, *v);
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto a = bind(fn, args, {"chars"});
    return text(py_strip(s, optional_string(a[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const auto a = bind(fn, args, {"sep", "maxsplit"});
    return string_list(py_split(s, optional_string(a[0]), a[1] ? int_argument(fn, *a[1]) : -1, name == "rsplit"),
                       budget);
  }
  if (name == "splitlines") {
    const auto a = bind(fn, args, {"keepends"});
    return string_list(py_splitlines(s, a[0] && truthy(*a[0])), budget);
  }
  if (name == "startswith" || name == "endswith") {
    const auto a = bind(fn, args, {"prefix"}, 1);
    return Value::boolean(affix_matches(s, *a[0], name == "endswith", fn));
  }
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" || name == "capitalize" ||
      name == "swapcase") {
    require_no_arguments(fn, args);
    if (name == "upper") return text(unicode::upper(s));
    if (name == "title") return text(py_title(s));
    if (name == "capitalize") return text(py_capitalize(s));
    if (name == "swapcase") return text(py_swapcase(s));
    return text(unicode::lower(s));
  }
  if (name == "replace") {
    const auto a = bind(fn, args, {"old", "new", "count"}, 2);
    return text(py_replace(s, string_argument(fn, *a[0]), string_argument(fn, *a[1]),
                           a[2] ? int_argument(fn, *a[2]) : -1, budget));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const auto a = bind(fn, args, {"sub"}, 1);
    const std::string& sub = string_argument(fn, *a[0]);
    if (name == "count") {
      if (sub.empty()) return Value::integer(std::int64_t(unicode::length(s)) + 1);
      std::int64_t n = 0;
      for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const std::size_t hit = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(char_index(s, hit));
  }
  if (name == "join") {
    const auto a = bind(fn, args, {"iterable"}, 1);
    std::string out;
    std::size_t i = 0;
    for (const Value& item : iterate(*a[0])) {
      if (!item.is_string())
        fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
      if (i++ > 0) out += s;
      out += item.as_string();
      budget.check_size(out.size());
    }
    return text(std::move(out));
  }
  if (name == "format") return text(py_format(s, args, budget));
  if (name == "center" || name == "ljust" || name == "rjust") {
    const auto a = bind(fn, args, {"width", "fillchar"}, 1);
    const std::string fill = a[1] ? string_argument(fn, *a[1]) : " ";
    if (unicode::length(fill) != 1) fail("The fill character must be exactly one character long");
    return text(py_pad(s, int_argument(fn, *a[0]), fill, name[0], budget));
  }
  if (name == "zfill") {
    const auto a = bind(fn, args, {"width"}, 1);
    const std::int64_t width = int_argument(fn, *a[0]);
    const std::int64_t length = std::int64_t(unicode::length(s));
    if (width <= length) return text(s);
    budget.check_size(std::size_t(width));
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    return text((sign ? s.substr(0, 1) : "") + std::string(std::size_t(width - length), '0') + s.substr(sign ? 1 : 0));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const auto a = bind(fn, args, {"affix"}, 1);
    const std::string& affix = string_argument(fn, *a[0]);
    if (name == "removeprefix") return text(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
    const bool ends = s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
    return text(ends ? s.substr(0, s.size() - affix.size()) : s);
  }
  if (name == "partition" || name == "rpartition") {
    const auto a = bind(fn, args, {"sep"}, 1);
    const std::string& sep = string_argument(fn, *a[0]);
    if (sep.empty()) fail("empty separator");
    const std::size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> parts;
    if (hit == std::string::npos) {
      parts = name == "partition" ? std::vector<Value>{text(s), text(""), text("")}
                                  : std::vector<Value>{text(""), text(""), text(s)};
    } else {
      parts = {text(s.substr(0, hit)), text(sep), text(s.substr(hit + sep.size()))};
    }
    return Value::list(std::move(parts), SequenceKind::tuple);
  }
  if (name.substr(0, 2) == "is" && name != "isidentifier" && name != "isprintable") {
    require_no_arguments(fn, args);
    if (name == "isascii") return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
    if (name == "isspace") return Value::boolean(all_chars(s, unicode::is_space));
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_chars(s, is_ascii_digit));
    if (name == "isalpha") return Value::boolean(all_chars(s, is_alpha));
    if (name == "isalnum")
      return Value::boolean(all_chars(s, [](char32_t c) { return is_alpha(c) || is_ascii_digit(c); }));
    const std::u32string cps = unicode::decode_all(s);
    const bool any_cased = std::any_of(cps.begin(), cps.end(), unicode::is_cased);
    if (name == "islower")
      return Value::boolean(any_cased && std::none_of(cps.begin(), cps.end(), unicode::is_upper_letter));
    if (name == "isupper")
      return Value::boolean(any_cased && std::none_of(cps.begin(), cps.end(), unicode::is_lower_letter));
    return Value::boolean(any_cased && py_title(s) == s);  // istitle
  }
  fail(fn + "() is not supported in chat templates");
}

inline Value call_dict_method(const Value& d, std::string_view name, const Arguments& args) {
  const std::string fn = "dict." + std::string(name);
  if (name == "get") {
    const auto a = bind(fn, args, {"key", "default"}, 1);
    require_hashable(*a[0]);
    const Value* found = d.as_dict().find(*a[0]);
    return found ? *found : a[1] ? *a[1] : Value::none();
  }
  if (name == "fromkeys") {
    const auto a = bind(fn, args, {"iterable", "value"}, 1);
    DictBuilder out;
    for (const Value& k : iterate(*a[0])) out.set(k, a[1] ? *a[1] : Value::none());
    return out.build();
  }
  require_no_arguments(fn, args);
  if (name == "copy") return d;
  std::vector<Value> items;
  for (const auto& [k, v] : d.as_dict().entries) {
    if (name == "keys") {
      items.push_back(k);
    } else if (name == "values") {
      items.push_back(v);
    } else {
      items.push_back(Value::list({k, v}, SequenceKind::tuple));
    }
  }
  const SequenceKind kind = name == "keys"     ? SequenceKind::dict_keys
                            : name == "values" ? SequenceKind::dict_values
                                               : SequenceKind::dict_items;
  return Value::list(std::move(items), kind);
}

inline Value call_number_method(const Value& v, std::string_view name, const Arguments& args) {
  const std::string fn = type_name(v) + "." + std::string(name);
  require_no_arguments(fn, args);
  if (name == "conjugate") return v.is_float() ? v : Value::integer(v.as_int());
  if (name == "is_integer") return Value::boolean(std::floor(v.as_double()) == v.as_double());
  if (name == "bit_length") {
    const std::uint64_t magnitude = v.as_int() < 0 ? 0 - std::uint64_t(v.as_int()) : std::uint64_t(v.as_int());
    return Value::integer(magnitude == 0 ? 0 : 64 - __builtin_clzll(magnitude));
  }
  fail(fn + "() is not supported in chat templates");
}

inline Value call_sequence_method(const Value& seq, std::string_view name, const Arguments& args) {
  const std::string fn = type_name(seq) + "." + std::string(name);
  if (name == "copy") {
    require_no_arguments(fn, args);
    return seq;
  }
  const auto a = bind(fn, args, {"value"}, 1);
  const auto& items = seq.as_sequence().items;
  if (name == "count")
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, *a[0]); }));
  for (std::size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], *a[0])) return Value::integer(std::int64_t(i));
  fail(repr(*a[0]) + " is not in " + type_name(seq));
}

// Calls method `name` of a value of a built-in type or of an Object.
inline Value call_method(const Value& receiver, std::string_view name, const Arguments& args, Budget& budget) {
  if (receiver.is_object()) return receiver.as_object()->call_method(name, args);
  switch (method_kind(receiver, name)) {
    case MethodKind::none: fail("'" + type_name(receiver) + "' object has no attribute '" + std::string(name) + "'");
    case MethodKind::unsafe: fail(unsafe_message(receiver, name));
    case MethodKind::method: break;
  }
  if (receiver.is_string()) return call_string_method(receiver.as_string(), name, args, budget);
  if (receiver.is_dict()) return call_dict_method(receiver, name, args);
  if (receiver.is_number()) return call_number_method(receiver, name, args);
  return call_sequence_method(receiver, name, args);
}

// `value.method` taken without calling it, e.g. to pass around or print.
class BoundMethod : public Callable {
public:
  BoundMethod(Value receiver, std::string name, Budget& budget)
      : receiver_(std::move(receiver)), name_(std::move(name)), budget_(budget) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  void repr(std::string& out, ReprState&) const override {
    out += "<built-in method " + name_ + " of " + jinja::type_name(receiver_) + " object>";
  }
  Value call(Arguments args) override { return jinja::call_method(receiver_, name_, args, budget_); }

private:
  Value receiver_;
  std::string name_;
  Budget& budget_;
};

}  // namespace ft::text::jinja
