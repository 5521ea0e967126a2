#include "bench_grid.hpp"

#include "ado_entities.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <toml++/toml.h>

#include <ft/core/error.hpp>
#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

namespace ftrun {
namespace {

namespace fs = std::filesystem;
using ft::Error;

std::string where(const toml::node& node, const fs::path& file) {
  return file.string() + ":" + std::to_string(node.source().begin.line) + ":" +
         std::to_string(node.source().begin.column);
}

// A TOML scalar as a --set value.
std::optional<std::string> scalar_text(const toml::node& node) {
  if (auto s = node.value<std::string>()) return *s;
  if (node.is_boolean()) return *node.value<bool>() ? "true" : "false";
  if (node.is_integer()) return std::to_string(*node.value<std::int64_t>());
  if (node.is_floating_point()) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.15g", *node.value<double>());
    return buffer;
  }
  return std::nullopt;
}

struct Context {
  fs::path recipe;
  std::vector<std::string> fixed;  // recipe assignments every point makes
  Entity fixed_entity;             // names of ado's SFTTrainer actuator in [fixed] that depend on the point's others
  ft::recipe::Recipe base;         // the recipe with the fixed assignments
  EntityContext entities;
};

// A recipe error without its "command line (--set k=v): " prefix: the grid names the place itself.
std::string reason_of(const Error& e) {
  std::string what = e.what();
  if (what.rfind("command line (--set ", 0) == 0)
    if (auto end = what.find("): "); end != std::string::npos) return what.substr(end + 3);
  return what;
}

ft::recipe::Recipe load_with(const Context& c, const std::vector<std::string>& sets) {
  std::vector<std::string> all = c.fixed;
  all.insert(all.end(), sets.begin(), sets.end());
  try {
    return ft::recipe::load<ft::recipe::Recipe>(c.recipe, all).recipe;
  } catch (const Error& e) {
    throw Error(reason_of(e));
  }
}

void translate_point(const Context& c, GridPoint& p) {
  Entity entity = c.fixed_entity;
  entity.insert(entity.end(), p.entity.begin(), p.entity.end());
  Translation t = translate_entity(entity, c.entities);
  p.sets = std::move(t.sets);
  p.invalid = std::move(t.invalid);
}

}  // namespace

std::string GridPoint::id() const {
  std::string out;
  for (const auto& [key, value] : entity) out += (out.empty() ? "" : " ") + key + "=" + value;
  return out;
}

const std::string* GridPoint::value(const std::string& key) const {
  for (const auto& [k, v] : entity)
    if (k == key) return &v;
  return nullptr;
}

Grid load_grid(const fs::path& file, const fs::path& output) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw Error(file.string() + ": no such grid file");
  const toml::table table = ft::recipe::parse_toml_file(file);
  Grid grid;
  grid.file = file;
  const fs::path dir = file.parent_path();
  auto fail = [&](const toml::node& node, const std::string& key, const std::string& what) -> Error {
    return Error(where(node, file) + ": " + key + ": " + what);
  };

  for (const auto& [key, node] : table) {
    const std::string k(key.str());
    if (k == "recipe" || k == "output" || k == "experiment") {
      const auto text = node.value<std::string>();
      if (!text || text->empty()) throw fail(node, k, "expected a non-empty string");
      if (k == "recipe") grid.recipe = (dir / *text).lexically_normal();
      if (k == "output") grid.output = (dir / *text).lexically_normal();
      if (k == "experiment") {
        if (*text != "measure" && *text != "stability")
          throw fail(node, k, "\"" + *text + "\" is not a choice (one of measure, stability)");
        grid.experiment = *text;
      }
    } else if (k == "repeats" || k == "retries") {
      const auto n = node.value<std::int64_t>();
      if (!n || *n < (k == "repeats" ? 1 : 0))
        throw fail(node, k, std::string("expected an integer >= ") + (k == "repeats" ? "1" : "0"));
      (k == "repeats" ? grid.repeats : grid.retries) = *n;
    } else if (k == "point_timeout_seconds") {
      const auto n = node.value<double>();
      if (!n || *n < 0) throw fail(node, k, "expected a number of seconds >= 0 (0: no limit)");
      grid.point_timeout_seconds = *n;
    } else if (k != "fixed" && k != "space" && k != "models") {
      throw fail(node, k, "not a grid key (recipe, output, experiment, repeats, retries, point_timeout_seconds, "
                          "[fixed], [space], [models])");
    }
  }
  if (grid.recipe.empty()) throw Error(file.string() + ": recipe: missing; name the base recipe every point starts from");
  if (!output.empty()) grid.output = output;
  if (grid.output.empty()) grid.output = dir / (file.stem().string() + "-results");
  if (grid.stability() && !table.contains("repeats")) grid.repeats = 5;  // as ado's stability experiment

  // Benchmark runs write no checkpoints and log every step, unless the grid says otherwise.
  Context c{grid.recipe, {"checkpoint.save_strategy=no", "train.logging_steps=1"}, {}, {}, {}};
  try {
    (void)load_with(c, {});
  } catch (const Error& e) {
    throw Error(where(*table.get("recipe"), file) + ": recipe: " + e.what());
  }
  c.entities.base = &c.base;
  c.entities.load = [&c](const std::vector<std::string>& sets) { return load_with(c, sets); };
  if (const toml::table* models = table["models"].as_table()) {
    for (const auto& [name, node] : *models) {
      const auto path = node.value<std::string>();
      if (!path || path->empty()) throw fail(node, "models." + std::string(name.str()), "expected a model's path");
      c.entities.models[std::string(name.str())] = fs::absolute(dir / *path).lexically_normal().string();
    }
  } else if (table.contains("models")) {
    throw fail(*table.get("models"), "models", "expected a table [models] of model_name = \"path\"");
  }

  // A value the recipe or ado's vocabulary refuses is an error naming its place.
  auto checked = [&](const toml::node& node, const std::string& key, const std::string& value) {
    try {
      (void)load_with(c, is_ado_entity(key) ? entity_assignments(key, value, c.entities)
                                             : std::vector<std::string>{key + "=" + value});
    } catch (const Error& e) {
      const bool unmapped = key == "model_name" && !c.entities.models.contains(value);
      throw fail(node, key, e.what() + std::string(unmapped ? " (a grid's [models] maps ado's model names to paths)" : ""));
    }
  };
  if (const toml::table* fixed = table["fixed"].as_table()) {
    for (const auto& [key, node] : *fixed) {
      const std::string k(key.str());
      const auto value = scalar_text(node);
      if (!value) throw fail(node, "fixed." + k, "expected a string, number or boolean");
      checked(node, k, *value);
      if (is_ado_entity(k)) c.fixed_entity.emplace_back(k, *value);
      else c.fixed.push_back(k + "=" + *value);
    }
  } else if (table.contains("fixed")) {
    throw fail(*table.get("fixed"), "fixed", "expected a table [fixed]");
  }

  c.base = load_with(c, {});

  // The space's keys in the order the file writes them (toml++ sorts them).
  std::vector<std::pair<std::string, const toml::node*>> axes;
  if (const toml::table* space = table["space"].as_table()) {
    for (const auto& [key, node] : *space) axes.emplace_back(std::string(key.str()), &node);
    std::sort(axes.begin(), axes.end(), [](const auto& a, const auto& b) {
      const auto &x = a.second->source().begin, &y = b.second->source().begin;
      return std::pair(x.line, x.column) < std::pair(y.line, y.column);
    });
  } else if (table.contains("space")) {
    throw fail(*table.get("space"), "space", "expected a table [space]");
  }
  std::vector<std::vector<std::string>> values;
  for (const auto& [key, node] : axes) {
    std::vector<std::string>& list = values.emplace_back();
    auto add = [&](const toml::node& n) {
      const auto value = scalar_text(n);
      if (!value) throw fail(n, "space." + key, "expected a string, number or boolean, or an array of them");
      checked(n, key, *value);
      list.push_back(*value);
    };
    if (const toml::array* array = node->as_array()) {
      if (array->empty()) throw fail(*node, "space." + key, "an empty list leaves the grid without points");
      for (const toml::node& n : *array) add(n);
    } else {
      add(*node);
    }
    grid.keys.push_back(key);
  }

  // Every combination, the first key changing slowest.
  std::vector<std::size_t> at(values.size(), 0);
  for (std::size_t index = 0;; ++index) {
    GridPoint& p = grid.points.emplace_back();
    p.index = index;
    for (std::size_t k = 0; k < values.size(); ++k) p.entity.emplace_back(grid.keys[k], values[k][at[k]]);
    translate_point(c, p);
    p.sets.insert(p.sets.begin(), c.fixed.begin(), c.fixed.end());
    std::size_t k = values.size();
    while (k > 0 && ++at[k - 1] == values[k - 1].size()) at[--k] = 0;
    if (k == 0) break;
  }
  return grid;
}

}  // namespace ftrun
