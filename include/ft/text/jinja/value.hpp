#pragma once
// The values a chat template computes with, modelled on the Python objects
// jinja2 hands to templates, because a rendering matches transformers' only if
// every operation behaves as it does on those objects: `{{ 1.0 }}` prints
// "1.0", `{{ [1, 'a'] }}` prints "[1, 'a']", `1 == 1.0 == true`, an empty
// list is false, a generator (the result of `selectattr`) is always true and
// has no length, dict keys keep insertion order.
//
// Kinds: Undefined (jinja2's default Undefined: prints as "", is false,
// iterates as empty, fails with its message on anything else), None, bool,
// int (64-bit; Python's big integers are not modelled, overflow is an error),
// float, str (UTF-8 bytes; see unicode.hpp for code-point semantics), a
// sequence (list, tuple, the dict views, a one-shot generator), a dict, and
// an Object (namespace, loop, macro, function): what has identity or state.
//
// Strings, lists and dicts are immutable and shared (the sandbox
// transformers uses forbids mutating them), so copying a value costs nothing
// and they cannot form cycles; their nesting depth is bounded (kMaxNesting)
// so every recursive walk stays shallow. Objects are
// owned by the Arena of one rendering and referenced by plain pointers, so a
// namespace that holds itself is no leak.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/failure.hpp"
#include "ft/text/jinja/unicode.hpp"

namespace ft::text::jinja {

inline constexpr std::size_t kMaxNesting = 200;

class Value;
struct Sequence;
struct Dict;
struct Arguments;

// Python's printing of an object, guarded against objects that contain
// themselves (as Python's repr guards dicts): `active` lists the objects
// being printed, `depth` bounds the recursion.
struct ReprState {
  std::vector<const void*> active;
  std::size_t depth = 0;
  std::size_t limit = max_value_size();  // the most text a repr may produce
};

// A value with identity or state. Owned by an Arena; Values point to it.
class Object {
public:
  virtual ~Object() = default;
  // Python's type name, for messages: "Namespace", "LoopContext", ...
  virtual std::string type_name() const = 0;
  // jinja2's object_type_repr, for "'<this>' has no attribute 'x'".
  virtual std::string description() const { return type_name() + " object"; }
  virtual void repr(std::string& out, ReprState& state) const = 0;
  // `obj.name` for a data attribute (a namespace's, the loop's index...).
  virtual std::optional<Value> attribute(std::string_view name) const;
  // `obj.name(...)` for a method (loop.cycle, ...).
  virtual bool has_method(std::string_view) const { return false; }
  virtual Value call_method(std::string_view name, const Arguments& args);
};

class Arena {
public:
  template <class T, class... Args>
  T* make(Args&&... args) {
    auto owned = std::make_unique<T>(std::forward<Args>(args)...);
    T* raw = owned.get();
    objects_.push_back(std::move(owned));
    return raw;
  }

private:
  std::vector<std::unique_ptr<Object>> objects_;
};

enum class SequenceKind : std::uint8_t { list, tuple, dict_keys, dict_values, dict_items, generator, reverse_iterator };

struct Undefined {
  std::string message;  // what an operation that needs the value reports
};
struct None {};

class Value {
public:
  enum class Kind { undefined, none, boolean, integer, floating, string, sequence, dict, object };

  Value() : storage_(None{}) {}
  static Value undefined(std::string message) { return Value(Storage(Undefined{std::move(message)})); }
  static Value none() { return Value(); }
  static Value boolean(bool b) { return Value(Storage(b)); }
  static Value integer(std::int64_t i) { return Value(Storage(i)); }
  static Value number(double d) { return Value(Storage(d)); }
  static Value string(std::string s) {
    new_string(s.size());
    return Value(Storage(std::make_shared<const std::string>(std::move(s))));
  }
  static Value list(std::vector<Value> items, SequenceKind kind = SequenceKind::list);
  // A one-shot generator (or iterator, for kind reverse_iterator).
  static Value generator(std::vector<Value> items, const char* label, std::string deferred_error = {},
                         SequenceKind kind = SequenceKind::generator);
  // Entries must have distinct keys (DictBuilder makes them so).
  static Value dict(std::vector<std::pair<Value, Value>> entries);
  static Value object(Object* o) { return Value(Storage(o)); }

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  // Python's numbers.Number: bool is an int.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  // An int for indexing and arithmetic: int or bool.
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind() == Kind::string; }
  bool is_sequence() const { return kind() == Kind::sequence; }
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_object() const { return kind() == Kind::object; }

  const std::string& undefined_message() const { return std::get<Undefined>(storage_).message; }
  bool as_bool() const { return std::get<bool>(storage_); }
  std::int64_t as_int() const { return is_bool() ? std::int64_t(as_bool()) : std::get<std::int64_t>(storage_); }
  double as_double() const { return is_float() ? std::get<double>(storage_) : double(as_int()); }
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(storage_); }
  const Sequence& as_sequence() const { return *std::get<std::shared_ptr<const Sequence>>(storage_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(storage_); }
  Object* as_object() const { return std::get<Object*>(storage_); }
  template <class T>
  T* object_as() const {
    return is_object() ? dynamic_cast<T*>(as_object()) : nullptr;
  }
  // Nesting depth of a list or dict (0 for anything else).
  std::size_t depth() const;

private:
  // Strings, like lists and dicts, are immutable and shared: copying a Value
  // never copies its contents.
  using Storage = std::variant<Undefined, None, bool, std::int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<const Sequence>, std::shared_ptr<const Dict>, Object*>;
  explicit Value(Storage s) : storage_(std::move(s)) {}
  Storage storage_;
};

struct Sequence {
  SequenceKind kind = SequenceKind::list;
  std::vector<Value> items;
  std::size_t depth = 1;
  // Generators and iterators are one-shot: items before `consumed` have
  // been taken. `label` is what Python calls them ("select_or_reject",
  // "list_reverseiterator"), and `deferred_error` what iterating them to the
  // end fails with: jinja2's generator filters run lazily, so their errors
  // surface only when the result is used.
  mutable std::size_t consumed = 0;
  const char* label = "";
  std::string deferred_error;
};

struct Dict {
  std::vector<std::pair<Value, Value>> entries;  // insertion order
  std::size_t depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : entries)
      if (k.is_string() && k.as_string() == key) return &v;
    return nullptr;
  }
};

inline std::size_t Value::depth() const {
  if (is_sequence()) return as_sequence().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

inline std::size_t child_depth(std::size_t deepest_child) {
  if (deepest_child + 1 > kMaxNesting)
    fail("values nested deeper than " + std::to_string(kMaxNesting) + " levels");
  return deepest_child + 1;
}

inline Value Value::list(std::vector<Value> items, SequenceKind kind) {
  new_items(items.size());
  std::size_t deepest = 0;
  for (const auto& v : items) deepest = std::max(deepest, v.depth());
  auto seq = std::make_shared<Sequence>();
  seq->kind = kind;
  seq->depth = child_depth(deepest);
  seq->items = std::move(items);
  return Value(Storage(std::shared_ptr<const Sequence>(std::move(seq))));
}

inline Value Value::generator(std::vector<Value> items, const char* label, std::string deferred_error,
                               SequenceKind kind) {
  new_items(items.size());
  std::size_t deepest = 0;
  for (const auto& v : items) deepest = std::max(deepest, v.depth());
  auto seq = std::make_shared<Sequence>();
  seq->kind = kind;
  seq->depth = child_depth(deepest);
  seq->items = std::move(items);
  seq->label = label;
  seq->deferred_error = std::move(deferred_error);
  return Value(Storage(std::shared_ptr<const Sequence>(std::move(seq))));
}

inline Value Value::dict(std::vector<std::pair<Value, Value>> entries) {
  new_items(entries.size());
  std::size_t deepest = 0;
  for (const auto& [k, v] : entries) deepest = std::max({deepest, k.depth(), v.depth()});
  auto d = std::make_shared<Dict>();
  d->depth = child_depth(deepest);
  d->entries = std::move(entries);
  return Value(Storage(std::shared_ptr<const Dict>(std::move(d))));
}

inline std::optional<Value> Object::attribute(std::string_view) const { return std::nullopt; }
inline Value Object::call_method(std::string_view name, const Arguments&) {
  fail("'" + type_name() + "' object has no method '" + std::string(name) + "'");
}

// ---- names and descriptions Python would use -------------------------------

inline std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return "Undefined";
    case Value::Kind::none: return "NoneType";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::floating: return "float";
    case Value::Kind::string: return "str";
    case Value::Kind::dict: return "dict";
    case Value::Kind::object: return v.as_object()->type_name();
    case Value::Kind::sequence: break;
  }
  switch (v.as_sequence().kind) {
    case SequenceKind::list: return "list";
    case SequenceKind::tuple: return "tuple";
    case SequenceKind::dict_keys: return "dict_keys";
    case SequenceKind::dict_values: return "dict_values";
    case SequenceKind::dict_items: return "dict_items";
    case SequenceKind::generator: return "generator";
    case SequenceKind::reverse_iterator: return v.as_sequence().label;
  }
  return "object";
}

// jinja2's object_type_repr: "None", "dict object", ...
inline std::string describe(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object()) return v.as_object()->description();
  return type_name(v) + " object";
}

// ---- printing -----------------------------------------------------------------

// Python's repr(float): the shortest digits that read back to the same double,
// positional between 1e-4 and 1e16, scientific outside.
inline std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, std::size_t(result.ptr - buf));  // "-1.2345e+02"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const std::size_t e = sci.find('e');
  std::string digits(1, sci[0]);
  if (e > 1) digits += sci.substr(2, e - 2);
  int exponent = 0;
  std::string_view exp_text = sci.substr(e + 1);
  const bool negative_exp = exp_text.front() == '-';
  exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  if (negative_exp) exponent = -exponent;
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  } else if (exponent < 0) {
    out += "0." + std::string(std::size_t(-exponent - 1), '0') + digits;
  } else if (digits.size() <= std::size_t(exponent) + 1) {
    out += digits + std::string(std::size_t(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, std::size_t(exponent) + 1) + "." + digits.substr(std::size_t(exponent) + 1);
  }
  return out;
}

// The double nearest to unsigned decimal text such as "1.5e3": infinity or
// zero where the value is out of range, as Python's float() gives.
inline double parse_decimal(std::string_view text) {
  double d = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), d);
  if (r.ec != std::errc::result_out_of_range) return d;
  // Out of range: too large or too small; the decimal exponent says which.
  const std::size_t e = text.find_first_of("eE");
  long exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view exp_text = text.substr(e + 1);
    const bool negative = !exp_text.empty() && exp_text[0] == '-';
    if (!exp_text.empty() && (exp_text[0] == '-' || exp_text[0] == '+')) exp_text.remove_prefix(1);
    std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
    if (negative) exponent = -exponent;
  }
  const std::string_view mantissa = text.substr(0, e);
  const std::size_t first_digit = mantissa.find_first_of("123456789");
  const std::size_t point = std::min(mantissa.find('.'), mantissa.size());
  const long magnitude = exponent + (first_digit < point ? long(point - first_digit) : -long(first_digit - point));
  return magnitude > 0 ? HUGE_VAL : 0.0;
}

// Python's repr(str): single quotes unless the text has a single quote and no
// double quote; escapes for backslash, the quote, controls and unprintables.
inline void repr_string(std::string& out, std::string_view s) {
  const bool use_double = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = use_double ? '"' : '\'';
  out += quote;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t start = pos;
    const char32_t c = unicode::decode(s, pos);
    char buf[16];
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (unicode::is_printable(c)) {
      out.append(s.substr(start, pos - start));
    } else {
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      }
      out += buf;
    }
  }
  out += quote;
}

inline void repr(std::string& out, const Value& v, ReprState& state);

inline void repr_items(std::string& out, const std::vector<Value>& items, ReprState& state) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    repr(out, items[i], state);
  }
}

inline void repr_dict(std::string& out, const Dict& d, ReprState& state) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.entries) {
    if (!first) out += ", ";
    first = false;
    repr(out, k, state);
    out += ": ";
    repr(out, v, state);
  }
  out += '}';
}

inline void repr(std::string& out, const Value& v, ReprState& state) {
  if (++state.depth > kMaxNesting * 2) fail("maximum recursion depth exceeded while getting the repr of an object");
  switch (v.kind()) {
    case Value::Kind::undefined: out += "Undefined"; break;
    case Value::Kind::none: out += "None"; break;
    case Value::Kind::boolean: out += v.as_bool() ? "True" : "False"; break;
    case Value::Kind::integer: out += std::to_string(v.as_int()); break;
    case Value::Kind::floating: out += format_float(v.as_double()); break;
    case Value::Kind::string: repr_string(out, v.as_string()); break;
    case Value::Kind::dict: repr_dict(out, v.as_dict(), state); break;
    case Value::Kind::object: v.as_object()->repr(out, state); break;
    case Value::Kind::sequence: {
      const Sequence& s = v.as_sequence();
      switch (s.kind) {
        case SequenceKind::list:
          out += '[';
          repr_items(out, s.items, state);
          out += ']';
          break;
        case SequenceKind::tuple:
          out += '(';
          repr_items(out, s.items, state);
          out += s.items.size() == 1 ? ",)" : ")";
          break;
        case SequenceKind::dict_items:
        case SequenceKind::dict_keys:
        case SequenceKind::dict_values:
          out += type_name(v) + "([";
          repr_items(out, s.items, state);
          out += "])";
          break;
        case SequenceKind::generator: out += std::string("<generator object ") + s.label + ">"; break;
        case SequenceKind::reverse_iterator: out += "<" + type_name(v) + " object>"; break;
      }
      break;
    }
  }
  if (out.size() > state.limit)
    fail("rendering would build a value of more than " + std::to_string(state.limit) + " bytes");
  --state.depth;
}

inline std::string repr(const Value& v) {
  std::string out;
  ReprState state;
  repr(out, v, state);
  charge_bytes(out.size());
  return out;
}

// Python's str(): what `{{ v }}` prints.
inline std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::string: charge_bytes(v.as_string().size()); return v.as_string();
    default: return repr(v);
  }
}

// ---- truth, equality, order ---------------------------------------------------

inline bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: return false;
    case Value::Kind::boolean: return v.as_bool();
    case Value::Kind::integer: return v.as_int() != 0;
    case Value::Kind::floating: return v.as_double() != 0.0;
    case Value::Kind::string: return !v.as_string().empty();
    case Value::Kind::dict: return !v.as_dict().entries.empty();
    case Value::Kind::object: return true;
    case Value::Kind::sequence: break;
  }
  const Sequence& s = v.as_sequence();
  if (s.kind == SequenceKind::generator || s.kind == SequenceKind::reverse_iterator) return true;
  return !s.items.empty();
}

// Exact comparison of Python numbers (long double holds every int64 exactly).
inline int compare_numbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  const long double x = a.is_float() ? (long double)a.as_double() : (long double)a.as_int();
  const long double y = b.is_float() ? (long double)b.as_double() : (long double)b.as_int();
  if (x < y) return -1;
  if (x > y) return 1;
  return x == y ? 0 : 2;  // 2: unordered (NaN)
}

// Charges for scanning or copying a value: its bytes or its items.
inline void charge_work(const Value& v) {
  if (v.is_string()) charge_bytes(v.as_string().size());
  if (v.is_sequence()) charge_items(v.as_sequence().items.size());
  if (v.is_dict()) charge_items(v.as_dict().entries.size());
}

inline bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  charge_work(a);
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.as_string() == b.as_string();
    case Value::Kind::object: return a.as_object() == b.as_object();
    case Value::Kind::dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::sequence: {
      const Sequence& x = a.as_sequence();
      const Sequence& y = b.as_sequence();
      if (x.kind != y.kind) return false;
      if (x.kind == SequenceKind::generator || x.kind == SequenceKind::reverse_iterator) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    default: return false;  // numbers were handled above
  }
}

inline const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

// An Undefined operand fails with its own message, as jinja2's Undefined does
// on any operation other than printing, testing and iterating.
inline void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined_message());
}

// Python's a < b (and friends, `op` naming which one for the message):
// numbers, strings (UTF-8 byte order is code point order), and lists or tuples
// of the same kind, lexicographically.
inline bool less(const Value& a, const Value& b, std::string_view op = "<") {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == -1;
  charge_work(a);
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_sequence() && b.is_sequence() && a.as_sequence().kind == b.as_sequence().kind &&
      (a.as_sequence().kind == SequenceKind::list || a.as_sequence().kind == SequenceKind::tuple)) {
    const auto& x = a.as_sequence().items;
    const auto& y = b.as_sequence().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return less(x[i], y[i], op);
    return x.size() < y.size();
  }
  fail("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
       "'");
}

// Python's comparison operators by jinja2's token names.
inline bool compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==" || op == "eq") return equals(a, b);
  if (op == "!=" || op == "ne") return !equals(a, b);
  const bool numbers = a.is_number() && b.is_number();
  if (op == "<" || op == "lt") return less(a, b, "<");
  if (op == ">" || op == "gt") return less(b, a, ">");
  // a <= b is not (b < a) for NaN, so numbers are compared directly.
  if (op == "<=" || op == "le") {
    if (numbers) return compare_numbers(a, b) <= 0;
    return less(a, b, "<=") || equals(a, b);
  }
  if (numbers) {
    const int c = compare_numbers(a, b);
    return c == 0 || c == 1;
  }
  return less(b, a, ">=") || equals(a, b);
}

// ---- iteration and size ---------------------------------------------------------

inline std::vector<Value> string_chars(std::string_view s) {
  std::vector<Value> out;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t start = pos;
    unicode::decode(s, pos);
    out.push_back(Value::string(std::string(s.substr(start, pos - start))));
  }
  return out;
}

// Python's iter(): a string yields its characters, a dict its keys, an
// Undefined nothing; a generator gives what is left of it, once.
inline std::vector<Value> iterate(const Value& v) {
  charge_work(v);
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::string: return string_chars(v.as_string());
    case Value::Kind::dict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::sequence: {
      const Sequence& s = v.as_sequence();
      if (s.kind == SequenceKind::generator || s.kind == SequenceKind::reverse_iterator) {
        std::vector<Value> rest(s.items.begin() + std::ptrdiff_t(s.consumed), s.items.end());
        s.consumed = s.items.size();
        if (!s.deferred_error.empty()) fail(s.deferred_error);
        return rest;
      }
      return s.items;
    }
    default: fail("'" + type_name(v) + "' object is not iterable");
  }
}

inline bool is_iterable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::string:
    case Value::Kind::dict:
    case Value::Kind::sequence: return true;
    default: return false;
  }
}

inline bool is_one_shot(const Value& v) {
  return v.is_sequence() && (v.as_sequence().kind == SequenceKind::generator ||
                             v.as_sequence().kind == SequenceKind::reverse_iterator);
}

// Python's len().
inline std::size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: charge_bytes(v.as_string().size()); return unicode::length(v.as_string());
    case Value::Kind::dict: return v.as_dict().entries.size();
    case Value::Kind::sequence:
      if (!is_one_shot(v)) return v.as_sequence().items.size();
      break;
    default: break;
  }
  fail("object of type '" + type_name(v) + "' has no len()");
}

// Python's hash() succeeds: what may be a dict key or a set member.
inline bool is_hashable(const Value& v) {
  if (v.is_dict()) return false;
  if (!v.is_sequence()) return true;
  const Sequence& s = v.as_sequence();
  if (s.kind == SequenceKind::tuple) {
    for (const auto& item : s.items)
      if (!is_hashable(item)) return false;
    return true;
  }
  return is_one_shot(v);
}

inline void require_hashable(const Value& v) {
  if (!is_hashable(v)) fail("unhashable type: '" + type_name(v) + "'");
}

// Builds a dict as Python's dict literal and dict() do: a repeated key keeps
// its first position and takes the last value.
class DictBuilder {
public:
  void set(Value key, Value value) {
    require_hashable(key);
    for (auto& [k, v] : entries_) {
      if (equals(k, key)) {
        v = std::move(value);
        return;
      }
    }
    entries_.emplace_back(std::move(key), std::move(value));
  }
  Value build() { return Value::dict(std::move(entries_)); }

private:
  std::vector<std::pair<Value, Value>> entries_;
};

}  // namespace ft::text::jinja
