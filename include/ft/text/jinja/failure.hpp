#pragma once
// How the template engine reports problems. Deep inside an operation (a
// filter, a comparison, an undefined value being added) the code knows what
// went wrong but not where in the template it happened, so it throws a
// `Failure` that carries only the message. The renderer catches it at the
// innermost expression or statement being evaluated and turns it into the
// ft::Error the user sees: "<origin>:<line>:<col>: <message>", one line (any
// line break or control character in a message, e.g. one a template passed to
// raise_exception, is written as an escape). Syntax errors take the same shape
// straight from the lexer and parser. Columns count bytes from 1.
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "ft/core/error.hpp"

namespace ft::text::jinja {

struct Location {
  std::size_t line = 1;
  std::size_t column = 1;
};

struct Failure {
  std::string message;
};

[[noreturn]] inline void fail(std::string message) { throw Failure{std::move(message)}; }

// Escapes what would break the message over several lines.
inline std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

inline Error located_error(std::string_view origin, Location where, std::string_view message) {
  return Error(one_line(origin) + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) + ": " +
               one_line(message));
}

}  // namespace ft::text::jinja
