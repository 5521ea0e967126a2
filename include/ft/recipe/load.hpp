#pragma once
// Loading a recipe: parse the TOML file, apply `--set` overrides, bind it to
// the typed struct. Every failure is an ft::Error whose one line names the
// file (or the command-line assignment), the line and column, and the key.
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>

#include <toml++/toml.h>

#include "ft/core/error.hpp"
#include "ft/recipe/reader.hpp"

namespace ft::recipe {

inline std::string where(const toml::source_region& r, const std::string& file) {
  return file + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// Parses TOML text; `file` names it in errors.
inline toml::table parse_toml(std::string_view text, const std::string& file) {
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw Error(where(e.source(), file) + ": TOML syntax error: " + std::string(e.description()));
  }
}

inline toml::table parse_toml_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw Error(file.string() + ": no such recipe file");
  try {
    return toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw Error(where(e.source(), file.string()) + ": TOML syntax error: " +
                std::string(e.description()));
  }
}

// Binds a parsed table to a recipe struct R (anything with `fields(V&)`).
template <class R>
R from_table(const toml::table& table, const std::string& file, const Overrides& overrides = {}) {
  R recipe{};
  Reader reader(table, file, overrides);
  recipe.fields(reader);
  reader.refuse_unknown_keys();
  return recipe;
}

// A recipe bound to its struct, with what is needed to point at any of its
// keys in a later error.
template <class R>
struct Loaded {
  R recipe;
  toml::table table;
  Overrides overrides;
  std::string file;

  // An error about a key found valid on its own but refused later (say, a
  // policy name no plugin offers), located like every other recipe error.
  Error error(const std::string& dotted, const std::string& what) const {
    const toml::node* node = table.at_path(dotted).node();
    toml::source_region where = node ? node->source() : toml::source_region{};
    return Error(located(where, file, overrides, dotted) + what);
  }
};

struct Recipe;
// [lora] and [prompt_tuning] init_from: the adapter's directory in place of
// the path given, its settings for the keys the recipe leaves unset, and a
// refusal at the key the recipe sets otherwise (src/recipe/adapter_start.cpp).
void take_adapter_start(Loaded<Recipe>& loaded);

template <class R>
Loaded<R> load(const std::filesystem::path& file, std::span<const std::string> assignments = {}) {
  // Filled member by member: an aggregate initialiser that throws part-way is
  // miscompiled by GCC 12 (it destroys members it never built).
  Loaded<R> out;
  out.file = file.string();
  out.table = parse_toml_file(file);
  for (const std::string& a : assignments) apply_override(out.table, a, out.overrides);
  out.recipe = from_table<R>(out.table, out.file, out.overrides);
  if constexpr (std::is_same_v<R, Recipe>) take_adapter_start(out);
  return out;
}

}  // namespace ft::recipe
