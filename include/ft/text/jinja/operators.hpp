#pragma once
// The operators of template expressions, with Python's semantics since that
// is what jinja2 evaluates them with: `+` adds numbers and concatenates
// strings, lists and tuples (and nothing else: 'a' + 1 is an error, not
// "a1"); `~` concatenates anything as text; `/` always gives a float, `//`
// and `%` floor toward negative infinity; `*` repeats sequences; `in` looks
// for substrings, members or dict keys. Integers are 64-bit: where Python
// would grow a big integer, ft reports the overflow. Every result that could
// be large goes through the Budget, so `'x' * 10**9` is refused, not built.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

[[noreturn]] inline void integer_overflow() {
  fail("integer overflow (chat templates in ft compute with 64-bit integers)");
}

[[noreturn]] inline void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

inline bool is_list_like(const Value& v, SequenceKind kind) {
  return v.is_sequence() && v.as_sequence().kind == kind;
}

// size * n, saturating, for a size check before building.
inline std::size_t repeated_size(std::size_t size, std::size_t n) {
  std::size_t total = 0;
  return __builtin_mul_overflow(size, n, &total) ? ~std::size_t(0) : total;
}

inline Value repeat(const Value& seq, std::int64_t times, Budget& budget) {
  const std::size_t n = times > 0 ? std::size_t(times) : 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    budget.check_size(repeated_size(s.size(), n));
    std::string out;
    out.reserve(s.size() * n);
    for (std::size_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_sequence().items;
  budget.check_size(repeated_size(items.size(), n));
  std::vector<Value> out;
  for (std::size_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_sequence().kind);
}

inline Value add(const Value& a, const Value& b, Budget& budget) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value::number(a.as_double() + b.as_double());
    std::int64_t r = 0;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) integer_overflow();
    return Value::integer(r);
  }
  if (a.is_string()) {
    if (!b.is_string()) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
    budget.check_size(a.as_string().size() + b.as_string().size());
    return Value::string(a.as_string() + b.as_string());
  }
  for (SequenceKind kind : {SequenceKind::list, SequenceKind::tuple}) {
    if (!is_list_like(a, kind)) continue;
    if (!is_list_like(b, kind))
      fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    std::vector<Value> items = a.as_sequence().items;
    const auto& more = b.as_sequence().items;
    budget.check_size(items.size() + more.size());
    items.insert(items.end(), more.begin(), more.end());
    return Value::list(std::move(items), kind);
  }
  unsupported_operands("+", a, b);
}

inline Value subtract(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (!a.is_number() || !b.is_number()) unsupported_operands("-", a, b);
  if (a.is_float() || b.is_float()) return Value::number(a.as_double() - b.as_double());
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) integer_overflow();
  return Value::integer(r);
}

inline Value multiply(const Value& a, const Value& b, Budget& budget) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value::number(a.as_double() * b.as_double());
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) integer_overflow();
    return Value::integer(r);
  }
  const auto repeatable = [](const Value& v) {
    return v.is_string() || is_list_like(v, SequenceKind::list) || is_list_like(v, SequenceKind::tuple);
  };
  if (repeatable(a) || repeatable(b)) {
    const Value& seq = repeatable(a) ? a : b;
    const Value& times = repeatable(a) ? b : a;
    if (!times.is_integral()) fail("can't multiply sequence by non-int of type '" + type_name(times) + "'");
    return repeat(seq, times.as_int(), budget);
  }
  unsupported_operands("*", a, b);
}

inline Value true_divide(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (!a.is_number() || !b.is_number()) unsupported_operands("/", a, b);
  if (b.as_double() == 0.0) fail(a.is_float() || b.is_float() ? "float division by zero" : "division by zero");
  return Value::number(a.as_double() / b.as_double());
}

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (a == INT64_MIN && b == -1) integer_overflow();
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

inline double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python's float.__floordiv__: the quotient of divmod, rounded as Python does.
inline double float_floor_div(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1.0;
  return floored;
}

inline Value floor_divide(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (!a.is_number() || !b.is_number()) unsupported_operands("//", a, b);
  if (a.is_float() || b.is_float()) {
    if (b.as_double() == 0.0) fail("float floor division by zero");
    return Value::number(float_floor_div(a.as_double(), b.as_double()));
  }
  if (b.as_int() == 0) fail("integer division or modulo by zero");
  return Value::integer(floor_div(a.as_int(), b.as_int()));
}

// Python's printf-style `format % args` for the conversions templates use:
// %s, %r, %d, %i and %%, with a tuple of arguments or a single one.
inline Value printf_format(const std::string& format, const Value& args, Budget& budget) {
  std::vector<Value> values;
  if (is_list_like(args, SequenceKind::tuple)) {
    values = args.as_sequence().items;
  } else {
    values.push_back(args);
  }
  std::string out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail("incomplete format");
    const char conversion = format[i];
    if (conversion == '%') {
      out += '%';
      continue;
    }
    if (conversion != 's' && conversion != 'r' && conversion != 'd' && conversion != 'i')
      fail(std::string("format conversion '%") + conversion + "' is not supported in chat templates");
    if (next >= values.size()) fail("not enough arguments for format string");
    const Value& v = values[next++];
    if (conversion == 's') {
      out += to_str(v);
    } else if (conversion == 'r') {
      out += repr(v);
    } else {
      if (!v.is_number()) fail("%" + std::string(1, conversion) + " format: a real number is required, not " + type_name(v));
      if (v.is_float() && !std::isfinite(v.as_double())) fail("cannot convert float infinity or NaN to integer");
      out += v.is_float() ? std::to_string(std::int64_t(std::trunc(v.as_double()))) : std::to_string(v.as_int());
    }
    budget.check_size(out.size());
  }
  if (next < values.size()) fail("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

inline Value modulo(const Value& a, const Value& b, Budget& budget) {
  require_defined(a);
  require_defined(b);
  if (a.is_string()) return printf_format(a.as_string(), b, budget);
  if (!a.is_number() || !b.is_number()) unsupported_operands("%", a, b);
  if (a.is_float() || b.is_float()) {
    if (b.as_double() == 0.0) fail("float modulo");
    return Value::number(float_mod(a.as_double(), b.as_double()));
  }
  if (b.as_int() == 0) fail("integer modulo by zero");
  if (b.as_int() == -1) return Value::integer(0);
  const std::int64_t x = a.as_int(), y = b.as_int();
  std::int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::integer(m);
}

inline Value power(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (!a.is_number() || !b.is_number()) unsupported_operands("** or pow()", a, b);
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    std::int64_t base = a.as_int(), exp = b.as_int(), r = 1;
    while (exp > 0) {
      if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) integer_overflow();
      exp >>= 1;
      if (exp > 0 && __builtin_mul_overflow(base, base, &base)) integer_overflow();
    }
    return Value::integer(r);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) fail("a negative number to a fractional power is complex, which ft does not model");
  return Value::number(std::pow(x, y));
}

inline Value negate(const Value& v) {
  require_defined(v);
  if (v.is_float()) return Value::number(-v.as_double());
  if (!v.is_integral()) fail("bad operand type for unary -: '" + type_name(v) + "'");
  if (v.as_int() == INT64_MIN) integer_overflow();
  return Value::integer(-v.as_int());
}

inline Value positive(const Value& v) {
  require_defined(v);
  if (v.is_float()) return v;
  if (!v.is_integral()) fail("bad operand type for unary +: '" + type_name(v) + "'");
  return Value::integer(v.as_int());
}

inline Value arithmetic(std::string_view op, const Value& a, const Value& b, Budget& budget) {
  if (op == "+") return add(a, b, budget);
  if (op == "-") return subtract(a, b);
  if (op == "*") return multiply(a, b, budget);
  if (op == "/") return true_divide(a, b);
  if (op == "//") return floor_divide(a, b);
  if (op == "%") return modulo(a, b, budget);
  return power(a, b);
}

// Python's `needle in haystack`.
inline bool contains(const Value& haystack, const Value& needle) {
  charge_work(haystack);
  switch (haystack.kind()) {
    case Value::Kind::undefined: return false;
    case Value::Kind::string:
      if (!needle.is_string())
        fail("'in <string>' requires string as left operand, not " + type_name(needle));
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::dict:
      require_hashable(needle);
      return haystack.as_dict().find(needle) != nullptr;
    case Value::Kind::sequence: {
      const Sequence& s = haystack.as_sequence();
      for (std::size_t i = s.consumed; i < s.items.size(); ++i) {
        if (equals(s.items[i], needle)) {
          if (is_one_shot(haystack)) s.consumed = i + 1;
          return true;
        }
      }
      if (is_one_shot(haystack)) {
        s.consumed = s.items.size();
        if (!s.deferred_error.empty()) fail(s.deferred_error);
      }
      return false;
    }
    default: fail("argument of type '" + type_name(haystack) + "' is not iterable");
  }
}

}  // namespace ft::text::jinja
