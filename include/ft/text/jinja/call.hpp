#pragma once
// Calling things from a template: the evaluated arguments of a call, the
// part of the rendering a builtin may use (its Runtime), the interface of
// everything callable (macros, global functions, bound methods),
// and the binding of arguments to Python-style parameter lists, with the
// errors Python gives for too many, unknown, repeated or missing arguments.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ft/text/jinja/budget.hpp"
#include "ft/text/jinja/value.hpp"

namespace ft::text::jinja {

// What a builtin may use of the rendering in progress.
struct Runtime {
  Arena& arena;
  Budget& budget;
};

struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

class Callable : public Object {
public:
  virtual Value call(Arguments args) = 0;
};

// Binds `args` to parameters `names`, the first `required` of which must be
// given. Returns one entry per parameter, nullopt where an optional one was
// not passed.
inline std::vector<std::optional<Value>> bind(std::string_view function, const Arguments& args,
                                              std::initializer_list<std::string_view> names,
                                              std::size_t required = 0) {
  std::vector<std::optional<Value>> bound(names.size());
  const std::vector<std::string_view> params(names);
  if (args.positional.size() > params.size())
    fail(std::string(function) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
         std::to_string(args.positional.size()) + " given)");
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keywords) {
    std::size_t i = 0;
    while (i < params.size() && params[i] != key) ++i;
    if (i == params.size()) fail(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    if (bound[i]) fail(std::string(function) + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
  }
  for (std::size_t i = 0; i < required; ++i)
    if (!bound[i]) fail(std::string(function) + "() missing required argument '" + std::string(params[i]) + "'");
  return bound;
}

inline void require_no_arguments(std::string_view function, const Arguments& args) {
  bind(function, args, {});
}

// An argument that must be an int (Python's bool counts as one).
inline std::int64_t int_argument(std::string_view function, const Value& v) {
  if (!v.is_integral())
    fail(std::string(function) + "(): '" + type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

inline const std::string& string_argument(std::string_view function, const Value& v) {
  require_defined(v);
  if (!v.is_string()) fail(std::string(function) + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

}  // namespace ft::text::jinja
