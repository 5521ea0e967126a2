#pragma once
// jinja2's tests, the `x is name(args)` of templates, with their Python
// definitions: `number` is numbers.Number (so true for booleans), `sequence`
// means "has len() and []" (so true for strings, dicts and even Undefined),
// `iterable` means iter() works, `callable` is Python's callable() (true for
// Undefined too), `sameas` is identity (the None/True/False singletons and
// small cached ints; strings by content). `escaped` is always false: ft does
// not model markupsafe's Markup strings.
#include <algorithm>
#include <string>
#include <string_view>

#include "ft/text/jinja/builtin_names.hpp"
#include "ft/text/jinja/call.hpp"
#include "ft/text/jinja/operators.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

inline bool is_callable(const Value& v) {
  return v.is_undefined() || (v.is_object() && dynamic_cast<const Callable*>(v.as_object()) != nullptr);
}

inline bool same_as(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::none: return true;
    case Value::Kind::boolean: return a.as_bool() == b.as_bool();
    case Value::Kind::integer: return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;
    case Value::Kind::string: return a.as_string() == b.as_string();
    case Value::Kind::object: return a.as_object() == b.as_object();
    case Value::Kind::sequence: return &a.as_sequence() == &b.as_sequence();
    case Value::Kind::dict: return &a.as_dict() == &b.as_dict();
    default: return false;
  }
}

// Python's `value % divisor == 0` (or `== 1` for odd) for the parity tests.
inline bool remainder_is(const Value& value, const Value& divisor, std::int64_t expected, Budget& budget) {
  if (value.is_string()) fail("not all arguments converted during string formatting");
  return equals(modulo(value, divisor, budget), Value::integer(expected));
}

inline bool apply_test(std::string_view name, const Value& value, const Arguments& args, Runtime& rt) {
  const std::string fn = "test '" + std::string(name) + "'";
  const auto no_args = [&] { require_no_arguments(fn, args); };
  const auto one_arg = [&] { return *bind(fn, args, {"other"}, 1)[0]; };
  if (name == "defined" || name == "undefined") {
    no_args();
    return value.is_undefined() == (name == "undefined");
  }
  if (name == "none") return no_args(), value.is_none();
  if (name == "boolean") return no_args(), value.is_bool();
  if (name == "true" || name == "false") return no_args(), value.is_bool() && value.as_bool() == (name == "true");
  if (name == "integer") return no_args(), value.is_int();
  if (name == "float") return no_args(), value.is_float();
  if (name == "number") return no_args(), value.is_number();
  if (name == "string") return no_args(), value.is_string();
  if (name == "mapping") return no_args(), value.is_dict();
  if (name == "iterable") return no_args(), is_iterable(value);
  if (name == "callable") return no_args(), is_callable(value);
  if (name == "escaped") return no_args(), false;
  if (name == "sequence") {
    no_args();
    if (value.is_undefined() || value.is_string() || value.is_dict()) return true;
    return value.is_sequence() && (value.as_sequence().kind == SequenceKind::list ||
                                   value.as_sequence().kind == SequenceKind::tuple);
  }
  if (name == "lower" || name == "upper") {
    no_args();
    const std::u32string cps = unicode::decode_all(to_str(value));
    const bool any_cased = std::any_of(cps.begin(), cps.end(), unicode::is_cased);
    return any_cased && std::none_of(cps.begin(), cps.end(),
                                     name == "lower" ? unicode::is_upper_letter : unicode::is_lower_letter);
  }
  if (name == "odd" || name == "even") {
    no_args();
    return remainder_is(value, Value::integer(2), name == "odd" ? 1 : 0, rt.budget);
  }
  if (name == "divisibleby") return remainder_is(value, one_arg(), 0, rt.budget);
  if (name == "sameas") return same_as(value, one_arg());
  if (name == "in") return contains(one_arg(), value);
  if (name == "filter" || name == "test") {
    no_args();
    if (!value.is_string()) return false;
    return name == "filter" ? filter_exists(value.as_string()) : test_exists(value.as_string());
  }
  if (name == "==" || name == "eq" || name == "equalto") return equals(value, one_arg());
  if (name == "!=" || name == "ne") return !equals(value, one_arg());
  if (name == ">" || name == "gt" || name == "greaterthan") return compare(">", value, one_arg());
  if (name == ">=" || name == "ge") return compare(">=", value, one_arg());
  if (name == "<" || name == "lt" || name == "lessthan") return compare("<", value, one_arg());
  if (name == "<=" || name == "le") return compare("<=", value, one_arg());
  fail("No test named '" + std::string(name) + "'.");
}

}  // namespace ft::text::jinja
