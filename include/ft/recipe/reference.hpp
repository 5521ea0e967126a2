#pragma once
// The recipe reference: every key a recipe struct declares, as Markdown
// tables, one per section, with its default, what it allows and what it does.
// It is one more visitor of the same `fields` lists the reader and the
// writer walk (binding.hpp), so it cannot miss a key the reader accepts;
// `ftrun recipe --reference` prints it and docs/recipe-reference.md is its
// output, checked by a test.
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ft/recipe/binding.hpp"

namespace ft::recipe {

class ReferenceWriter {
public:
  explicit ReferenceWriter(std::string prefix = "") : prefix_(std::move(prefix)) {}

  template <class T>
  void field(std::string_view key, const T& value, const std::type_identity_t<Check<T>>& check = {},
             std::string_view doc = {}, Required required = Required::no) {
    const std::string shown = required == Required::yes ? "required" : "`" + Writer::format(value) + "`";
    rows_ += "| `" + detail::join_key(prefix_, key) + "` | " + cell(shown) + " | " +
             cell(check.allowed.empty() ? any_of_type<T>() : check.allowed) + " | " + cell(std::string(doc)) + " |\n";
  }

  template <class Section>
  void section(std::string_view key, Section& s) {
    ReferenceWriter sub(detail::join_key(prefix_, key));
    s.fields(sub);
    sections_ += "\n## [" + sub.prefix_ + "]\n\n" + sub.table() + sub.sections_;
  }

  // The top level's keys first, then each section in declaration order.
  std::string str() const { return (rows_.empty() ? "" : "\n## Top level\n\n" + table()) + sections_; }

private:
  std::string table() const { return "| key | default | allowed | what it does |\n| --- | --- | --- | --- |\n" + rows_; }

  // What a key whose Check names no limit accepts: any value of its type.
  template <class T>
  static std::string any_of_type() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    else if constexpr (std::is_same_v<T, std::string>) return "a string";
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings (or one string)";
    else if constexpr (is_named_values<T>::value) return "a table of names to values";
    else if constexpr (std::is_integral_v<T>) return "an integer";
    else return "a number";
  }

  // A table cell: '|' would end it, so it is escaped.
  static std::string cell(const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c == '\n' ? ' ' : c;
    }
    return out;
  }

  std::string prefix_;
  std::string rows_;
  std::string sections_;
};

// The reference of a recipe type R, its default values as the defaults.
template <class R>
std::string reference(R recipe) {
  ReferenceWriter writer;
  recipe.fields(writer);
  return writer.str();
}

}  // namespace ft::recipe
