#pragma once
// JSON in and out of template values. In: a conversation, tool schemas and
// extra variables arrive as nlohmann JSON (ordered_json keeps the keys in the
// order they were written, which is the order Python dicts have and the order
// `tojson` and `items()` show; plain nlohmann::json sorts them). Out: the
// `tojson` filter, which transformers replaces with Python's json.dumps
// (ensure_ascii=False, indent=None, separators=None, sort_keys=False), so it
// follows json.dumps exactly: ", " and ": " separators without indent, ","
// and ": " with one, floats as Python's repr, NaN/Infinity, tuples as arrays,
// non-string keys converted as Python converts them, and "Object of type X is
// not JSON serializable" for anything else (an Undefined, a namespace, ...).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

template <class BasicJson>
Value from_json(const BasicJson& j, std::size_t depth = 0) {
  if (depth > kMaxNesting) fail("JSON nested deeper than " + std::to_string(kMaxNesting) + " levels");
  switch (j.type()) {
    case BasicJson::value_t::null:
    case BasicJson::value_t::discarded: return Value::none();
    case BasicJson::value_t::boolean: return Value::boolean(j.template get<bool>());
    case BasicJson::value_t::number_integer: return Value::integer(j.template get<std::int64_t>());
    case BasicJson::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        fail("integer " + std::to_string(u) + " does not fit in 64 bits");
      return Value::integer(std::int64_t(u));
    }
    case BasicJson::value_t::number_float: return Value::number(j.template get<double>());
    case BasicJson::value_t::string: return Value::string(j.template get<std::string>());
    case BasicJson::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case BasicJson::value_t::object: {
      std::vector<std::pair<Value, Value>> entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) entries.emplace_back(Value::string(it.key()), from_json(*it, depth + 1));
      return Value::dict(std::move(entries));
    }
    case BasicJson::value_t::binary: break;
  }
  fail("binary JSON values cannot be template values");
}

struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: everything on one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  std::size_t limit = max_value_size();  // the most text the dump may produce
};

inline void dump_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t start = pos;
    const char32_t c = unicode::decode(s, pos);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c > 0xFFFF) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)), unsigned(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

inline std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

inline void dump_json(std::string& out, const Value& v, const JsonStyle& style, std::size_t level);

inline void check_json_size(const std::string& out, const JsonStyle& style) {
  if (out.size() > style.limit)
    fail("rendering would build a value of more than " + std::to_string(style.limit) + " bytes");
}

inline void json_newline(std::string& out, const JsonStyle& style, std::size_t level) {
  out += '\n';
  for (std::size_t i = 0; i < level; ++i) {
    out += *style.indent;
    check_json_size(out, style);
  }
}

template <class Items, class Emit>
void dump_json_container(std::string& out, const JsonStyle& style, std::size_t level, char open, char close,
                         const Items& items, Emit emit) {
  if (items.empty()) {
    out += open;
    out += close;
    return;
  }
  out += open;
  if (style.indent) json_newline(out, style, level + 1);
  bool first = true;
  for (const auto& item : items) {
    if (!first) {
      out += style.item_separator;
      if (style.indent) json_newline(out, style, level + 1);
    }
    first = false;
    emit(item);
    check_json_size(out, style);
  }
  if (style.indent) json_newline(out, style, level);
  out += close;
}

// json.dumps turns non-string keys into strings; other keys are an error.
inline std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::string: return k.as_string();
    case Value::Kind::none: return "null";
    case Value::Kind::boolean: return k.as_bool() ? "true" : "false";
    case Value::Kind::integer: return std::to_string(k.as_int());
    case Value::Kind::floating: return json_float(k.as_double());
    default: fail("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

inline void dump_json(std::string& out, const Value& v, const JsonStyle& style, std::size_t level) {
  switch (v.kind()) {
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.as_int()); return;
    case Value::Kind::floating: out += json_float(v.as_double()); return;
    case Value::Kind::string: dump_json_string(out, v.as_string(), style.ensure_ascii); return;
    case Value::Kind::sequence: {
      const Sequence& s = v.as_sequence();
      if (s.kind != SequenceKind::list && s.kind != SequenceKind::tuple) break;
      dump_json_container(out, style, level, '[', ']', s.items,
                          [&](const Value& item) { dump_json(out, item, style, level + 1); });
      return;
    }
    case Value::Kind::dict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.as_dict().entries) entries.push_back(&e);
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
      dump_json_container(out, style, level, '{', '}', entries, [&](const std::pair<Value, Value>* e) {
        dump_json_string(out, json_key(e->first), style.ensure_ascii);
        out += style.key_separator;
        dump_json(out, e->second, style, level + 1);
      });
      return;
    }
    default: break;
  }
  fail("Object of type " + type_name(v) + " is not JSON serializable");
}

inline std::string dump_json(const Value& v, const JsonStyle& style) {
  std::string out;
  dump_json(out, v, style, 0);
  check_json_size(out, style);
  charge_bytes(out.size());
  return out;
}

}  // namespace ft::text::jinja
