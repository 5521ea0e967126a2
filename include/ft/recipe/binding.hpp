#pragma once
// Binding between TOML recipes and typed structs.
//
// A recipe section is a plain struct that lists its keys once, in a member
// template `fields(V& v)`:
//
//     struct LoraSection {
//       std::int64_t r = 8;
//       template <class V> void fields(V& v) {
//         v.field("r", r, at_least<std::int64_t>(1), "rank of the low-rank update");
//       }
//     };
//
// and the same list serves every visitor: Reader (reader.hpp) fills the
// struct from a TOML table (refusing unknown keys, wrong types and values the
// Check refuses, with file, line and column), Writer prints it back as
// documented TOML (what `--dry-run` shows and what plugins receive). This
// header does not include the TOML parser, so code that only holds or prints
// a recipe (the engine, CUDA sources, which nvcc cannot compile with
// toml++) does not pull it in. Sections nest with
// `v.section("name", member)`. Supported value types: bool, integers, floating
// point, std::string, std::vector<std::string> (a bare string is a list of one),
// NamedValues of integers or numbers (a table, written inline).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/recipe/check.hpp"

namespace ft::recipe {

template <class T>
struct is_named_values : std::false_type {};
template <class V>
struct is_named_values<NamedValues<V>> : std::true_type {};

// A recipe key that is required has no usable default.
enum class Required : bool { no = false, yes = true };

// Keys set on the command line (`--set a.b=v`) have no place in a file; this
// remembers, per dotted key, the assignment that set it and its raw text.
struct Overrides {
  std::map<std::string, std::string, std::less<>> assignment;  // "train.max_steps" -> "train.max_steps=10"
  std::map<std::string, std::string, std::less<>> raw_value;   // "train.max_steps" -> "10"
};

namespace detail {

inline std::string join_key(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : std::string(prefix) + "." + std::string(key);
}

}  // namespace detail

// Prints a struct as TOML, every key with its value and a comment saying what
// it is and what it allows. Reading the output back gives the same struct.
class Writer {
public:
  explicit Writer(std::string prefix = "") : prefix_(std::move(prefix)) {}

  template <class T>
  void field(std::string_view key, const T& value, const std::type_identity_t<Check<T>>& check = {},
             std::string_view doc = {}, Required = Required::no) {
    std::ostringstream line;
    line << key << " = " << format(value);
    std::string comment(doc);
    if (!check.allowed.empty()) comment += (comment.empty() ? "" : "; ") + check.allowed;
    if (!comment.empty()) line << "  # " << comment;
    keys_ += line.str() + "\n";
  }

  template <class Section>
  void section(std::string_view key, Section& s) {
    Writer sub(detail::join_key(prefix_, key));
    s.fields(sub);
    sections_ += "\n[" + sub.prefix_ + "]\n" + sub.keys_ + sub.sections_;
  }

  std::string str() const { return keys_ + sections_; }

  // A value as TOML writes it (the recipe reference shows defaults this way).
  template <class T>
  static std::string format(const T& value) {
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      std::string out = "[";
      for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + quote(value[i]);
      return out + "]";
    } else if constexpr (is_named_values<T>::value) {
      std::string out = "{";
      for (std::size_t i = 0; i < value.size(); ++i)
        out += (i ? ", " : " ") + quote(value[i].first) + " = " + format(value[i].second);
      return out + (value.empty() ? "}" : " }");
    } else if constexpr (std::is_same_v<T, std::string>) {
      return quote(value);
    } else if constexpr (std::is_same_v<T, bool>) {
      return value ? "true" : "false";
    } else if constexpr (std::is_integral_v<T>) {
      return std::to_string(value);
    } else {
      // Shortest text that reads back as the same double, always with a '.' or
      // an exponent so that TOML reads it as a float.
      char buf[64];
      auto end = std::to_chars(buf, buf + sizeof buf, static_cast<double>(value)).ptr;
      std::string out(buf, end);
      if (out.find_first_of(".eni") == std::string::npos) out += ".0";
      return out;
    }
  }

  // A TOML basic string.
  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out + "\"";
  }

private:
  std::string prefix_;
  std::string keys_;
  std::string sections_;
};

// The recipe as documented TOML; from_table<R>(parse_toml(emit(r))) gives r back.
template <class R>
std::string emit(R recipe) {
  Writer writer;
  recipe.fields(writer);
  return writer.str();
}

}  // namespace ft::recipe
