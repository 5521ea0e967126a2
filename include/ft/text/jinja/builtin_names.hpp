#pragma once
// The names of jinja2's built-in filters and tests. A template may name one
// before ft evaluates it (`x is filter('tojson')`, or a filter inside a
// branch never taken), so the names are known apart from the code that runs
// them. A few filters are known but refused when run (see filters.hpp).
#include <algorithm>
#include <iterator>
#include <string_view>

namespace ft::text::jinja {

inline constexpr std::string_view kFilterNames[] = {
    "abs",       "attr",       "batch",    "capitalize", "center",    "count",    "d",         "default",
    "dictsort",  "e",          "escape",   "filesizeformat", "first", "float",    "forceescape", "format",
    "groupby",   "indent",     "int",      "join",       "last",      "length",   "list",      "lower",
    "items",     "map",        "min",      "max",        "pprint",    "random",   "reject",    "rejectattr",
    "replace",   "reverse",    "round",    "safe",       "select",    "selectattr", "slice",   "sort",
    "string",    "striptags",  "sum",      "title",      "trim",      "truncate", "unique",    "upper",
    "urlencode", "urlize",     "wordcount", "wordwrap",  "xmlattr",   "tojson"};

inline constexpr std::string_view kTestNames[] = {
    "odd",     "even",    "divisibleby", "defined",  "undefined", "filter",   "test",     "none",
    "boolean", "false",   "true",        "integer",  "float",     "lower",    "upper",    "string",
    "mapping", "number",  "sequence",    "iterable", "callable",  "sameas",   "escaped",  "in",
    "==",      "eq",      "equalto",     "!=",       "ne",        ">",        "gt",       "greaterthan",
    "ge",      ">=",      "<",           "lt",       "lessthan",  "<=",       "le"};

inline bool filter_exists(std::string_view name) {
  return std::find(std::begin(kFilterNames), std::end(kFilterNames), name) != std::end(kFilterNames);
}

inline bool test_exists(std::string_view name) {
  return std::find(std::begin(kTestNames), std::end(kTestNames), name) != std::end(kTestNames);
}

}  // namespace ft::text::jinja
