#pragma once
// Reading a recipe struct from a parsed TOML table (binding.hpp says how a
// struct lists its keys), and applying `--set` assignments to the table.
#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "ft/core/error.hpp"
#include "ft/recipe/binding.hpp"

namespace ft::recipe {

namespace detail {

inline std::string type_word(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date or time";
  }
}

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace detail

// "file:line:column: key: " or "command line (--set key=value): key: ", the
// start of every recipe error.
inline std::string located(const toml::source_region& where, const std::string& file,
                           const Overrides& overrides, const std::string& dotted) {
  std::ostringstream os;
  auto set = overrides.assignment.find(dotted);
  if (set != overrides.assignment.end())
    os << "command line (--set " << set->second << ")";
  else if (where.begin.line > 0)
    os << file << ':' << where.begin.line << ':' << where.begin.column;
  else
    os << file;
  os << ": " << dotted << ": ";
  return os.str();
}

// Fills a struct from one TOML table; see the file comment.
class Reader {
public:
  Reader(const toml::table& table, std::string file, const Overrides& overrides,
         std::string prefix = "")
      : table_(table), file_(std::move(file)), overrides_(overrides), prefix_(std::move(prefix)) {}

  template <class T>
  void field(std::string_view key, T& value, const std::type_identity_t<Check<T>>& check = {},
             std::string_view /*doc*/ = {}, Required required = Required::no) {
    known_.emplace(key);
    const toml::node* node = table_.get(key);
    std::string dotted = detail::join_key(prefix_, key);
    if (!node) {
      if (required == Required::yes)
        fail(table_.source(), dotted,
             "missing required key" + (check.allowed.empty() ? "" : "; set it to " + check.allowed));
      return;
    }
    read(*node, dotted, value);
    if (auto why = check.refuse(value))
      fail(node->source(), dotted,
           *why + (check.allowed.empty() ? "" : "; allowed: " + check.allowed));
  }

  template <class Section>
  void section(std::string_view key, Section& s) {
    known_.emplace(key);
    std::string dotted = detail::join_key(prefix_, key);
    static const toml::table empty;
    const toml::table* sub = &empty;
    if (const toml::node* node = table_.get(key)) {
      sub = node->as_table();
      if (!sub)
        fail(node->source(), dotted, "expected a table [" + dotted + "], got " + detail::type_word(*node));
    }
    Reader reader(*sub, file_, overrides_, dotted);
    s.fields(reader);
    reader.refuse_unknown_keys();
  }

  // Every key of the table that no field or section claimed is an error that
  // lists what the table allows, nearest spelling first.
  void refuse_unknown_keys() const {
    for (auto&& [key, node] : table_) {
      if (known_.count(key.str())) continue;
      std::string dotted = detail::join_key(prefix_, key.str());
      std::vector<std::string> allowed(known_.begin(), known_.end());
      std::stable_sort(allowed.begin(), allowed.end(), [&](const std::string& a, const std::string& b) {
        return detail::edit_distance(a, key.str()) < detail::edit_distance(b, key.str());
      });
      std::string msg = "unknown key";
      if (!allowed.empty() && detail::edit_distance(allowed.front(), key.str()) <= 3)
        msg += " (did you mean " + detail::join_key(prefix_, allowed.front()) + "?)";
      msg += "; allowed in " + (prefix_.empty() ? std::string("the top level") : "[" + prefix_ + "]") + ":";
      std::sort(allowed.begin(), allowed.end());
      for (std::size_t i = 0; i < allowed.size(); ++i) msg += (i ? ", " : " ") + allowed[i];
      fail(key.source(), dotted, msg);
    }
  }

private:
  template <class T>
  void read(const toml::node& node, const std::string& dotted, T& out) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node.as_boolean()) return void(out = v->get());
      wrong_type(node, dotted, "true or false");
    } else if constexpr (std::is_integral_v<T>) {
      if (auto v = node.as_integer()) {
        std::int64_t x = v->get();
        if (x < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
            (x > 0 && static_cast<std::uint64_t>(x) > std::numeric_limits<T>::max()))
          fail(node.source(), dotted, std::to_string(x) + " does not fit the key's integer type");
        return void(out = static_cast<T>(x));
      }
      wrong_type(node, dotted, "an integer");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (auto v = node.as_floating_point()) return void(out = static_cast<T>(v->get()));
      if (auto v = node.as_integer()) return void(out = static_cast<T>(v->get()));
      wrong_type(node, dotted, "a number");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (auto v = node.as_string()) return void(out = v->get());
      // A value typed on the command line is taken as text when text is wanted.
      if (auto raw = overrides_.raw_value.find(dotted); raw != overrides_.raw_value.end())
        return void(out = raw->second);
      wrong_type(node, dotted, "a string");
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (auto v = node.as_string()) return void(out = {v->get()});
      if (auto arr = node.as_array()) {
        std::vector<std::string> items;
        for (const toml::node& item : *arr) {
          auto s = item.as_string();
          if (!s) wrong_type(item, dotted, "a list of strings");
          items.push_back(s->get());
        }
        return void(out = std::move(items));
      }
      wrong_type(node, dotted, "a string or a list of strings");
    } else if constexpr (is_named_values<T>::value) {
      const toml::table* table = node.as_table();
      if (!table) wrong_type(node, dotted, "a table of names to values, e.g. { \"q_proj\" = 16 }");
      T items;
      for (auto&& [name, value] : *table) {
        if (value.is_table())
          fail(value.source(), dotted + "." + std::string(name.str()),
               "is a table; a name with dots is one key only when quoted, e.g. { \"self_attn.q_proj\" = 16 }");
        typename T::value_type::second_type v{};
        read(value, dotted + "." + std::string(name.str()), v);
        items.emplace_back(std::string(name.str()), v);
      }
      return void(out = std::move(items));
    } else {
      static_assert(sizeof(T) == 0, "ft::recipe::Reader: no binding for this field type");
    }
  }

  [[noreturn]] void wrong_type(const toml::node& node, const std::string& dotted,
                               const std::string& expected) const {
    fail(node.source(), dotted, "expected " + expected + ", got " + detail::type_word(node));
  }

  [[noreturn]] void fail(const toml::source_region& where, const std::string& dotted,
                         const std::string& what) const {
    throw Error(located(where, file_, overrides_, dotted) + what);
  }

  const toml::table& table_;
  std::string file_;
  const Overrides& overrides_;
  std::string prefix_;
  std::set<std::string, std::less<>> known_;
};

// Applies one `--set section.key=value` assignment to a parsed recipe. The
// value is read as a TOML value when it parses as one (10, 2e-4, true,
// ["q_proj","v_proj"]) and as a plain string otherwise.
inline void apply_override(toml::table& root, std::string_view assignment, Overrides& overrides) {
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw Error("command line (--set " + std::string(assignment) +
                "): expected section.key=value, for example --set train.max_steps=10");
  std::string dotted(assignment.substr(0, eq));
  std::string raw(assignment.substr(eq + 1));

  toml::table parsed;
  bool is_toml_value = false;
  try {
    parsed = toml::parse("v = " + raw);
    is_toml_value = parsed.contains("v");
  } catch (const toml::parse_error&) {
  }

  toml::table* table = &root;
  std::string_view rest = dotted;
  for (auto dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
    std::string part(rest.substr(0, dot));
    rest.remove_prefix(dot + 1);
    toml::node* next = table->get(part);
    if (!next) next = &table->insert_or_assign(part, toml::table{}).first->second;
    table = next->as_table();
    if (!table)
      throw Error("command line (--set " + std::string(assignment) + "): " + part +
                  " is a value, not a section");
  }
  if (rest.empty())
    throw Error("command line (--set " + std::string(assignment) + "): the key is empty");
  if (is_toml_value)
    table->insert_or_assign(std::string(rest), *parsed.get("v"));
  else
    table->insert_or_assign(std::string(rest), raw);
  overrides.assignment[dotted] = std::string(assignment);
  overrides.raw_value[dotted] = raw;
}

}  // namespace ft::recipe
