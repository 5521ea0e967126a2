#pragma once
// jinja2's built-in filters, `value | name(args)`, as jinja2 defines them,
// plus transformers' `tojson` (Python's json.dumps with ensure_ascii=False;
// see json.hpp). Filters that return generators in jinja2 (map, select,
// reject, selectattr, rejectattr, unique, items, batch, slice) return a
// one-shot generator here too, so `{{ x|map('upper') }}` has no length and
// is always true until passed through `list`, as in transformers.
//
// Not supported (they fail when run, naming themselves): groupby, pprint,
// random (nondeterministic), striptags, urlencode, urlize, wordwrap, xmlattr,
// filesizeformat. `safe` and `escape` return plain strings: ft does not model
// markupsafe's Markup, which only matters with autoescaping, and
// transformers renders without it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/jinja/access.hpp"
#include "ft/text/jinja/builtin_names.hpp"
#include "ft/text/jinja/call.hpp"
#include "ft/text/jinja/json.hpp"
#include "ft/text/jinja/methods.hpp"
#include "ft/text/jinja/operators.hpp"
#include "ft/text/jinja/tests.hpp"

namespace ft::text::jinja {

inline Value apply_filter(std::string_view name, const Value& value, const Arguments& args, Runtime& rt);

// jinja2's generator filters run lazily: what fails inside one fails only
// when its result is iterated. `body` fills the items; a failure is kept for
// then. `label` is the generator function's name, which printing shows.
template <class Body>
Value lazily(const char* label, Body body) {
  std::vector<Value> items;
  try {
    body(items);
  } catch (const Failure& f) {
    return Value::generator(std::move(items), label, f.message);
  }
  return Value::generator(std::move(items), label);
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
inline Value get_path(Value item, const std::optional<Value>& attribute, Runtime& rt,
                      const std::optional<Value>& fallback = std::nullopt) {
  if (!attribute || attribute->is_none()) return item;
  if (!attribute->is_string()) return get_item(item, *attribute, rt);
  std::string_view path = attribute->as_string();
  while (true) {
    const std::size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    std::int64_t index = 0;
    // An index too large for 64 bits is out of range, as it is in Python.
    if (digits && std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc())
      index = INT64_MAX;
    item = get_item(item, digits ? Value::integer(index) : Value::string(std::string(part)), rt);
    if (fallback && item.is_undefined()) item = *fallback;
    if (dot == std::string_view::npos) return item;
    path = path.substr(dot + 1);
  }
}

// jinja2's ignore_case: strings compare lower-cased when sorting or grouping.
inline Value sort_key(Value v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(unicode::lower(v.as_string()));
  return v;
}

inline std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's float(str): surrounding whitespace, a sign, digits with single
// underscores between them, an exponent, or inf/infinity/nan.
inline std::optional<double> parse_python_float(std::string_view text) {
  const std::string trimmed = py_strip(text, nullptr, true, true);
  std::string_view s = trimmed;
  std::string clean;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool between = i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) &&
                           std::isdigit((unsigned char)s[i + 1]);
      if (!between) return std::nullopt;
      continue;
    }
    clean += s[i];
  }
  std::string_view body = clean;
  const bool negative = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.remove_prefix(1);
  const std::string lower = unicode::lower(body);
  if (lower == "inf" || lower == "infinity") return negative ? -INFINITY : INFINITY;
  if (lower == "nan") return NAN;
  if (body.empty() || !(std::isdigit((unsigned char)body[0]) || body[0] == '.')) return std::nullopt;
  // What from_chars accepts beyond Python's syntax (hex floats, "inf" after
  // the checks above) cannot reach here: only digits, '.', and an exponent.
  if (body.find_first_not_of("0123456789.eE+-") != std::string_view::npos) return std::nullopt;
  double d = 0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), d);
  if (r.ptr != body.data() + body.size() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
    return std::nullopt;
  d = parse_decimal(body);
  return negative ? -d : d;
}

// Python's int(str, base) for base 10 or 0 (prefixes 0b/0o/0x) and 2..36.
inline std::optional<std::int64_t> parse_python_int(std::string_view text, std::int64_t base) {
  const std::string trimmed = py_strip(text, nullptr, true, true);
  std::string_view s = trimmed;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  const auto prefix_base = [&](std::string_view p) -> std::int64_t {
    if (p.size() < 2 || p[0] != '0') return 0;
    const char c = char(p[1] | 0x20);
    return c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
  };
  if (base == 0) {
    base = prefix_base(s);
    if (base) {
      s.remove_prefix(2);
    } else {
      base = 10;
      if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos) return std::nullopt;
    }
    if (!s.empty() && s[0] == '_') s.remove_prefix(1);
  } else if (base == 16 || base == 8 || base == 2) {
    if (prefix_base(s) == base) {
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  } else if (base < 2 || base > 36) {
    fail("int() base must be >= 2 and <= 36, or 0");
  }
  if (s.empty()) return std::nullopt;
  std::int64_t value = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || s[i + 1] == '_') return std::nullopt;
      continue;
    }
    const char c = char(s[i] | 0x20);
    const std::int64_t digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (digit >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit, &value))
      integer_overflow();
  }
  return negative ? -value : value;
}

// Python's round(x, ndigits): round half to even on the exact binary value,
// which is what printf's %.*f does.
inline double python_round(double x, std::int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits < 0) {
    const double p = std::pow(10.0, double(-ndigits));
    return std::nearbyint(x / p) * p;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", int(ndigits), x);
  return std::strtod(buf, nullptr);
}

inline Value filter_round(const Value& value, const Arguments& args) {
  const auto a = bind("round", args, {"precision", "method"});
  const std::int64_t precision = a[0] ? int_argument("round", *a[0]) : 0;
  const std::string method = a[1] ? string_argument("round", *a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  require_defined(value);
  if (!value.is_number()) fail("type " + type_name(value) + " doesn't define __round__ method");
  if (method == "common") {
    if (value.is_integral() && precision >= 0) return Value::integer(value.as_int());
    return Value::number(python_round(value.as_double(), precision));
  }
  const double scale = std::pow(10.0, double(precision));
  const double scaled = value.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

inline Value filter_int(const Value& value, const Arguments& args) {
  const auto a = bind("int", args, {"default", "base"});
  const Value fallback = a[0] ? *a[0] : Value::integer(0);
  require_defined(value);
  if (value.is_string()) {
    if (auto i = parse_python_int(value.as_string(), a[1] ? int_argument("int", *a[1]) : 10)) return Value::integer(*i);
    if (auto d = parse_python_float(value.as_string())) {
      if (!std::isfinite(*d)) return fallback;
      if (std::fabs(*d) >= 9.2e18) integer_overflow();
      return Value::integer(std::int64_t(std::trunc(*d)));
    }
    return fallback;
  }
  if (value.is_integral()) return Value::integer(value.as_int());
  if (value.is_float()) {
    const double d = value.as_double();
    if (std::isnan(d)) return fallback;
    if (std::isinf(d)) fail("cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2e18) integer_overflow();
    return Value::integer(std::int64_t(std::trunc(d)));
  }
  return fallback;
}

inline Value filter_float(const Value& value, const Arguments& args) {
  const auto a = bind("float", args, {"default"});
  const Value fallback = a[0] ? *a[0] : Value::number(0.0);
  require_defined(value);
  if (value.is_number()) return Value::number(value.as_double());
  if (value.is_string())
    if (auto d = parse_python_float(value.as_string())) return Value::number(*d);
  return fallback;
}

inline Value filter_tojson(const Value& value, const Arguments& args) {
  const auto a = bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = a[0] && truthy(*a[0]);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      style.indent = a[1]->as_string();
    } else if (a[1]->is_integral()) {
      style.indent = std::string(std::size_t(std::clamp<std::int64_t>(a[1]->as_int(), 0, 1 << 20)), ' ');
    } else {
      fail("tojson: indent must be an int or a str, not " + type_name(*a[1]));
    }
    style.item_separator = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    const std::vector<Value> parts = iterate(*a[2]);
    if (parts.size() != 2) fail("tojson: separators must be a pair (item_separator, key_separator)");
    style.item_separator = string_argument("tojson", parts[0]);
    style.key_separator = string_argument("tojson", parts[1]);
  }
  style.sort_keys = a[3] && truthy(*a[3]);
  return Value::string(dump_json(value, style));
}

inline Value filter_indent(const Value& value, const Arguments& args, Budget& budget) {
  const auto a = bind("indent", args, {"width", "first", "blank"});
  std::string indention = "    ";
  if (a[0]) {
    indention = a[0]->is_string() ? a[0]->as_string()
                                  : std::string(std::size_t(std::clamp<std::int64_t>(int_argument("indent", *a[0]), 0, 1 << 20)), ' ');
  }
  const bool first = a[1] && truthy(*a[1]);
  const bool blank = a[2] && truthy(*a[2]);
  const std::vector<std::string> lines = py_splitlines(to_str(value) + "\n", false);
  std::string out = lines.empty() ? std::string() : lines[0];
  for (std::size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (blank || !lines[i].empty()) out += indention;
    out += lines[i];
    budget.check_size(out.size());
  }
  return Value::string(first ? indention + out : out);
}

inline Value filter_truncate(const Value& value, const Arguments& args) {
  const auto a = bind("truncate", args, {"length", "killwords", "end", "leeway"});
  const std::int64_t length = a[0] ? int_argument("truncate", *a[0]) : 255;
  const bool killwords = a[1] && truthy(*a[1]);
  const std::string end = a[2] ? string_argument("truncate", *a[2]) : "...";
  const std::int64_t leeway = a[3] && !a[3]->is_none() ? int_argument("truncate", *a[3]) : 5;
  const std::int64_t end_length = std::int64_t(unicode::length(end));
  if (length < end_length) fail("expected length >= " + std::to_string(end_length) + ", got " + std::to_string(length));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  const std::string s = to_str(value);
  const std::vector<std::size_t> at = unicode::offsets(s);
  const std::int64_t n = std::int64_t(at.size()) - 1;
  if (n <= length + leeway) return Value::string(s);
  std::string head = s.substr(0, at[std::size_t(length - end_length)]);
  if (!killwords) {
    const std::size_t space = head.rfind(' ');
    if (space != std::string::npos) head = head.substr(0, space);
  }
  return Value::string(head + end);
}

// jinja2's `title`: each word, after any of - ( { [ < or whitespace, starts
// upper case and continues lower case.
inline std::string jinja_title(std::string_view s) {
  const std::u32string in = unicode::decode_all(s);
  std::u32string out;
  const auto separator = [](char32_t c) {
    return unicode::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  for (std::size_t i = 0; i < in.size(); ++i) {
    const bool starts = i == 0 || separator(in[i - 1]) != separator(in[i]);
    if (!starts && in[i] == 0x3A3) {
      out += unicode::lower_sigma(in, i);
    } else {
      unicode::append_case(out, in[i], starts ? unicode::Case::upper : unicode::Case::lower);
    }
  }
  return unicode::encode_all(out);
}

inline Value filter_sort(const Value& value, const Arguments& args, Runtime& rt) {
  const auto a = bind("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a[0] && truthy(*a[0]);
  const bool case_sensitive = a[1] && truthy(*a[1]);
  std::vector<std::optional<Value>> attributes;
  if (a[2] && a[2]->is_string()) {
    const std::string comma = ",";
    for (const auto& part : py_split(a[2]->as_string(), &comma, -1, false)) attributes.emplace_back(Value::string(part));
  } else {
    attributes.push_back(a[2]);
  }
  struct Keyed {
    std::vector<Value> key;
    Value item;
  };
  std::vector<Keyed> keyed;
  for (Value& item : iterate(value)) {
    Keyed k{{}, item};
    for (const auto& attribute : attributes) k.key.push_back(sort_key(get_path(item, attribute, rt), case_sensitive));
    keyed.push_back(std::move(k));
  }
  const auto key_less = [](const std::vector<Value>& x, const std::vector<Value>& y) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    return false;
  };
  // Python's sorted(reverse=True) keeps equal items in their original order.
  std::stable_sort(keyed.begin(), keyed.end(),
                   [&](const Keyed& x, const Keyed& y) { return reverse ? key_less(y.key, x.key) : key_less(x.key, y.key); });
  std::vector<Value> out;
  for (auto& k : keyed) out.push_back(std::move(k.item));
  return Value::list(std::move(out));
}

inline Value filter_dictsort(const Value& value, const Arguments& args) {
  const auto a = bind("dictsort", args, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = a[0] && truthy(*a[0]);
  const std::string by = a[1] ? to_str(*a[1]) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const bool reverse = a[2] && truthy(*a[2]);
  require_defined(value);
  if (!value.is_dict()) fail("'" + type_name(value) + "' object has no attribute 'items'");
  std::vector<std::pair<Value, Value>> entries = value.as_dict().entries;
  const auto key = [&](const std::pair<Value, Value>& e) { return sort_key(by == "key" ? e.first : e.second, case_sensitive); };
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  std::vector<Value> out;
  for (auto& [k, v] : entries) out.push_back(Value::list({k, v}, SequenceKind::tuple));
  return Value::list(std::move(out));
}

inline Value filter_min_max(const Value& value, const Arguments& args, Runtime& rt, bool max) {
  const auto a = bind(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a[0] && truthy(*a[0]);
  const std::vector<Value> items = iterate(value);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  Value best_key = sort_key(get_path(items[0], a[1], rt), case_sensitive);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(get_path(items[i], a[1], rt), case_sensitive);
    if (max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

inline Value filter_unique(const Value& value, const Arguments& args, Runtime& rt) {
  return lazily("sync_do_unique", [&](std::vector<Value>& out) {
    const auto a = bind("unique", args, {"case_sensitive", "attribute"});
    const bool case_sensitive = a[0] && truthy(*a[0]);
    std::vector<Value> seen;
    for (const Value& item : iterate(value)) {
      Value key = sort_key(get_path(item, a[1], rt), case_sensitive);
      require_hashable(key);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
        seen.push_back(std::move(key));
        out.push_back(item);
      }
    }
  });
}

// map, select, reject, selectattr, rejectattr.
inline Value filter_map(const Value& value, const Arguments& args, Runtime& rt) {
  return lazily("sync_do_map", [&](std::vector<Value>& out) {
    if (!truthy(value)) return;
    if (args.positional.empty()) {
      std::optional<Value> attribute, fallback;
      for (const auto& [k, v] : args.keywords) {
        if (k == "attribute") {
          attribute = v;
        } else if (k == "default") {
          fallback = v;
        } else {
          fail("Unexpected keyword argument '" + k + "'");
        }
      }
      if (!attribute) fail("map requires a filter argument");
      for (const Value& item : iterate(value)) out.push_back(get_path(item, attribute, rt, fallback));
      return;
    }
    const std::string& filter = string_argument("map", args.positional[0]);
    const Arguments rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keywords};
    for (const Value& item : iterate(value)) out.push_back(apply_filter(filter, item, rest, rt));
  });
}

inline Value filter_select(const Value& value, const Arguments& args, Runtime& rt, bool with_attribute, bool keep) {
  return lazily("select_or_reject", [&](std::vector<Value>& out) {
    if (!truthy(value)) return;
    std::size_t next = 0;
    std::optional<Value> attribute;
    if (with_attribute) {
      if (args.positional.empty()) fail("Missing parameter for attribute name");
      attribute = args.positional[next++];
    }
    std::optional<std::string> test;
    if (next < args.positional.size()) test = string_argument("select", args.positional[next++]);
    const Arguments rest{std::vector<Value>(args.positional.begin() + std::ptrdiff_t(next), args.positional.end()),
                         args.keywords};
    for (const Value& item : iterate(value)) {
      const Value subject = get_path(item, attribute, rt);
      const bool passed = test ? apply_test(*test, subject, rest, rt) : truthy(subject);
      if (passed == keep) out.push_back(item);
    }
  });
}

inline Value filter_reverse(const Value& value) {
  if (value.is_string()) {
    std::u32string cps = unicode::decode_all(value.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(unicode::encode_all(cps));
  }
  // Python's reversed() where the value supports it (naming the iterator as
  // Python does), else a reversed list.
  const char* label = nullptr;
  if (value.is_dict()) label = "dict_reversekeyiterator";
  if (value.is_undefined()) label = "reversed";
  if (value.is_sequence()) {
    switch (value.as_sequence().kind) {
      case SequenceKind::list: label = "list_reverseiterator"; break;
      case SequenceKind::tuple: label = "reversed"; break;
      case SequenceKind::dict_keys: label = "dict_reversekeyiterator"; break;
      case SequenceKind::dict_values: label = "dict_reversevalueiterator"; break;
      case SequenceKind::dict_items: label = "dict_reverseitemiterator"; break;
      default: break;
    }
  }
  std::vector<Value> items;
  try {
    items = iterate(value);
  } catch (const Failure&) {
    fail("argument must be iterable");
  }
  std::reverse(items.begin(), items.end());
  if (!label) return Value::list(std::move(items));
  return Value::generator(std::move(items), label, {}, SequenceKind::reverse_iterator);
}

inline Value filter_last(const Value& value) {
  const bool reversible = value.is_undefined() || value.is_string() || value.is_dict() ||
                          (value.is_sequence() && !is_one_shot(value));
  if (!reversible) fail("'" + type_name(value) + "' object is not reversible");
  const std::vector<Value> items = iterate(value);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

inline Value filter_batch_or_slice(const Value& value, const Arguments& args, Budget& budget, bool batch) {
  return lazily(batch ? "do_batch" : "sync_do_slice", [&](std::vector<Value>& out) {
    const char* fn = batch ? "batch" : "slice";
    const auto a = bind(fn, args, {batch ? "linecount" : "slices", "fill_with"}, 1);
    const std::int64_t count = int_argument(fn, *a[0]);
    const bool fill = a[1] && !a[1]->is_none();
    const std::vector<Value> items = iterate(value);
    if (batch) {
      std::vector<Value> group;
      for (const Value& item : items) {
        if (std::int64_t(group.size()) == count) out.push_back(Value::list(std::exchange(group, {})));
        group.push_back(item);
      }
      if (!group.empty()) {
        if (fill && std::int64_t(group.size()) < count) {
          budget.allocate(std::size_t(count));
          group.resize(std::size_t(count), *a[1]);
        }
        out.push_back(Value::list(std::move(group)));
      }
      return;
    }
    if (count == 0) fail("integer division or modulo by zero");
    if (count < 0) return;
    budget.allocate(std::size_t(count));
    const std::int64_t length = std::int64_t(items.size());
    const std::int64_t per_slice = length / count, with_extra = length % count;
    std::int64_t offset = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t start = offset + i * per_slice;
      if (i < with_extra) ++offset;
      const std::int64_t end = offset + (i + 1) * per_slice;
      std::vector<Value> part(items.begin() + start, items.begin() + end);
      if (fill && i >= with_extra) part.push_back(*a[1]);
      out.push_back(Value::list(std::move(part)));
    }
  });
}

inline Value filter_sum(const Value& value, const Arguments& args, Runtime& rt) {
  const auto a = bind("sum", args, {"attribute", "start"});
  Value total = a[1] ? *a[1] : Value::integer(0);
  for (const Value& item : iterate(value)) total = add(total, get_path(item, a[0], rt), rt.budget);
  return total;
}

inline Value filter_join(const Value& value, const Arguments& args, Runtime& rt) {
  const auto a = bind("join", args, {"d", "attribute"});
  const std::string separator = a[0] ? to_str(*a[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(value)) {
    if (!first) out += separator;
    first = false;
    out += to_str(get_path(item, a[1], rt));
    rt.budget.check_size(out.size());
  }
  return Value::string(std::move(out));
}

inline Value filter_items(const Value& value) {
  return lazily("do_items", [&](std::vector<Value>& out) {
    if (value.is_undefined()) return;
    if (!value.is_dict()) fail("Can only get item pairs from a mapping.");
    for (const auto& [k, v] : value.as_dict().entries) out.push_back(Value::list({k, v}, SequenceKind::tuple));
  });
}

inline Value filter_format(const Value& value, const Arguments& args, Budget& budget) {
  if (!args.positional.empty() && !args.keywords.empty())
    fail("can't handle positional and keyword arguments at the same time");
  if (!args.keywords.empty()) fail("format with keyword arguments (%(name)s) is not supported in chat templates");
  return printf_format(to_str(value), Value::list(args.positional, SequenceKind::tuple), budget);
}

inline Value filter_abs(const Value& value) {
  require_defined(value);
  if (value.is_float()) return Value::number(std::fabs(value.as_double()));
  if (!value.is_integral()) fail("bad operand type for abs(): '" + type_name(value) + "'");
  if (value.as_int() == INT64_MIN) integer_overflow();
  return Value::integer(value.as_int() < 0 ? -value.as_int() : value.as_int());
}

inline Value apply_filter(std::string_view name, const Value& value, const Arguments& args, Runtime& rt) {
  const std::string fn(name);
  const auto no_args = [&] { require_no_arguments(fn, args); };
  const auto text = [](std::string s) { return Value::string(std::move(s)); };
  if (name == "tojson") return filter_tojson(value, args);
  if (name == "trim") {
    const auto a = bind(fn, args, {"chars"});
    const std::string* chars = a[0] && !a[0]->is_none() ? &string_argument(fn, *a[0]) : nullptr;
    return text(py_strip(to_str(value), chars, true, true));
  }
  if (name == "length" || name == "count") return no_args(), Value::integer(std::int64_t(length(value)));
  if (name == "upper") return no_args(), text(unicode::upper(to_str(value)));
  if (name == "lower") return no_args(), text(unicode::lower(to_str(value)));
  if (name == "capitalize") return no_args(), text(py_capitalize(to_str(value)));
  if (name == "title") return no_args(), text(jinja_title(to_str(value)));
  if (name == "string" || name == "safe") return no_args(), text(to_str(value));
  if (name == "e" || name == "escape" || name == "forceescape") return no_args(), text(html_escape(to_str(value)));
  if (name == "replace") {
    const auto a = bind(fn, args, {"old", "new", "count"}, 2);
    const std::int64_t count = a[2] && !a[2]->is_none() ? int_argument(fn, *a[2]) : -1;
    return text(py_replace(to_str(value), to_str(*a[0]), to_str(*a[1]), count, rt.budget));
  }
  if (name == "join") return filter_join(value, args, rt);
  if (name == "d" || name == "default") {
    const auto a = bind(fn, args, {"default_value", "boolean"});
    const bool use_default = value.is_undefined() || (a[1] && truthy(*a[1]) && !truthy(value));
    return use_default ? (a[0] ? *a[0] : text("")) : value;
  }
  if (name == "first") {
    no_args();
    if (is_one_shot(value)) {
      const Sequence& s = value.as_sequence();
      if (s.consumed < s.items.size()) return s.items[s.consumed++];
      if (!s.deferred_error.empty()) fail(s.deferred_error);
      return Value::undefined("No first item, sequence was empty.");
    }
    const std::vector<Value> items = iterate(value);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") return no_args(), filter_last(value);
  if (name == "list") {
    no_args();
    return Value::list(iterate(value));
  }
  if (name == "items") return no_args(), filter_items(value);
  if (name == "int") return filter_int(value, args);
  if (name == "float") return filter_float(value, args);
  if (name == "abs") return no_args(), filter_abs(value);
  if (name == "round") return filter_round(value, args);
  if (name == "map") return filter_map(value, args, rt);
  if (name == "select" || name == "reject") return filter_select(value, args, rt, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return filter_select(value, args, rt, true, name == "selectattr");
  if (name == "dictsort") return filter_dictsort(value, args);
  if (name == "sort") return filter_sort(value, args, rt);
  if (name == "unique") return filter_unique(value, args, rt);
  if (name == "min" || name == "max") return filter_min_max(value, args, rt, name == "max");
  if (name == "sum") return filter_sum(value, args, rt);
  if (name == "reverse") return no_args(), filter_reverse(value);
  if (name == "indent") return filter_indent(value, args, rt.budget);
  if (name == "truncate") return filter_truncate(value, args);
  if (name == "center") {
    const auto a = bind(fn, args, {"width"});
    return text(py_pad(to_str(value), a[0] ? int_argument(fn, *a[0]) : 80, " ", 'c', rt.budget));
  }
  if (name == "wordcount") {
    no_args();
    std::int64_t words = 0;
    bool in_word = false;
    for (char32_t c : unicode::decode_all(to_str(value))) {
      const bool word_char = is_alpha(c) || is_ascii_digit(c) || c == '_';
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::integer(words);
  }
  if (name == "attr") {
    const auto a = bind(fn, args, {"name"}, 1);
    require_defined(value);
    const std::string& attribute = string_argument(fn, *a[0]);
    if (auto v = python_attribute(value, attribute, rt)) return *v;
    return missing_attribute(value, attribute);
  }
  if (name == "format") return filter_format(value, args, rt.budget);
  if (name == "batch" || name == "slice") return filter_batch_or_slice(value, args, rt.budget, name == "batch");
  if (filter_exists(name)) fail("the '" + fn + "' filter is not supported in chat templates by ft");
  fail("No filter named '" + fn + "'.");
}

}  // namespace ft::text::jinja
