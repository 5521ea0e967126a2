#include "bench_grid.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
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

std::optional<std::int64_t> integer(const std::string& text) {
  std::size_t used = 0;
  try {
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Seed 003's entity names that are one recipe key under another name.
const std::map<std::string, std::string, std::less<>> renamed = {
    {"model_name", "model.path"},
    {"model_max_length", "data.max_seq_length"},
    {"gradient_accumulation_steps", "train.gradient_accumulation_steps"},
    {"max_steps", "train.max_steps"},
    {"num_train_epochs", "train.num_train_epochs"},
    {"stop_after_seconds", "train.stop_after_seconds"},
    {"auto_stop_method", "train.auto_stop_method"},
};

// The assignment one entity value stands for. number_gpus and batch_size
// depend on each other and on the recipe, so translate_point handles them.
std::string assignment(const std::string& key, const std::string& value) {
  if (auto it = renamed.find(key); it != renamed.end()) return it->second + "=" + value;
  if (key == "gradient_checkpointing")
    return "train.gradient_checkpointing=" + (value == "true" ? "every_block" : value == "false" ? "none" : value);
  if (key == "dataset_id") return "data.train=artificial:" + value;
  if (key == "fsdp_sharding_strategy") {
    std::string lower = value;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    return "strategy.parallelism=" + lower;
  }
  return key + "=" + value;
}

struct Context {
  fs::path recipe;
  std::vector<std::string> fixed;
  ft::recipe::Recipe base;  // the recipe with the fixed keys
};

ft::recipe::Recipe load_with(const Context& c, const std::vector<std::string>& sets) {
  std::vector<std::string> all = c.fixed;
  all.insert(all.end(), sets.begin(), sets.end());
  return ft::recipe::load<ft::recipe::Recipe>(c.recipe, all).recipe;
}

// A recipe error without its "command line (--set k=v): " prefix: the grid names the place itself.
std::string reason_of(const Error& e) {
  std::string what = e.what();
  if (what.rfind("command line (--set ", 0) == 0)
    if (auto end = what.find("): "); end != std::string::npos) return what.substr(end + 3);
  return what;
}

void translate_point(const Context& c, GridPoint& p) {
  const ft::recipe::Recipe& base = c.base;
  std::int64_t ranks = std::max<std::int64_t>(1, base.launch.nproc);
  bool parallelism_set = false;
  for (const auto& [key, value] : p.entity)
    parallelism_set |= key == "strategy.parallelism" || key == "fsdp_sharding_strategy";
  const std::string* n = p.value("number_gpus");
  if (!n) n = p.value("launch.nproc");
  if (n) {
    ranks = integer(*n).value_or(0);
    if (ranks < 1) {
      p.invalid = "number_gpus must be greater than 0";
      return;
    }
  }
  for (const auto& [key, value] : p.entity) {
    if (key == "number_gpus") {
      p.sets.push_back("launch.nproc=" + value);
      if (ranks > 1 && !parallelism_set && base.strategy.parallelism == "single")
        p.sets.push_back("strategy.parallelism=zero3");
    } else if (key == "batch_size") {
      const std::int64_t batch = integer(value).value_or(0);
      if (batch < 1) {
        p.invalid = "batch_size must be greater than 0";
        return;
      }
      if (batch % ranks != 0) {
        p.invalid = "batch_size " + value + " cannot be divided evenly over " + std::to_string(ranks) + " ranks";
        return;
      }
      p.sets.push_back("train.per_device_train_batch_size=" + std::to_string(batch / ranks));
    } else {
      p.sets.push_back(assignment(key, value));
    }
  }
  try {
    (void)load_with(c, p.sets);  // the keys together: a recipe that refuses the combination
  } catch (const Error& e) {
    p.invalid = reason_of(e);
  }
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
    } else if (k != "fixed" && k != "space") {
      throw fail(node, k, "not a grid key (recipe, output, experiment, repeats, retries, point_timeout_seconds, "
                          "[fixed], [space])");
    }
  }
  if (grid.recipe.empty()) throw Error(file.string() + ": recipe: missing; name the base recipe every point starts from");
  if (!output.empty()) grid.output = output;
  if (grid.output.empty()) grid.output = dir / (file.stem().string() + "-results");
  if (grid.stability() && !table.contains("repeats")) grid.repeats = 5;  // seed 003's stability experiment

  // Benchmark runs write no checkpoints and log every step, unless the grid says otherwise.
  Context c{grid.recipe, {"checkpoint.save_strategy=no", "train.logging_steps=1"}, {}};
  try {
    (void)load_with(c, {});
  } catch (const Error& e) {
    throw Error(where(*table.get("recipe"), file) + ": recipe: " + e.what());
  }

  auto checked = [&](const toml::node& node, const std::string& key, const std::string& value) {
    if (key == "batch_size" || key == "number_gpus") {  // their ranges are validity rules, not errors
      if (!integer(value)) throw fail(node, key, "expected an integer, got " + value);
      return;
    }
    try {
      (void)load_with(c, {assignment(key, value)});
    } catch (const Error& e) {
      throw fail(node, key, reason_of(e));
    }
  };
  if (const toml::table* fixed = table["fixed"].as_table()) {
    for (const auto& [key, node] : *fixed) {
      const std::string k(key.str());
      const auto value = scalar_text(node);
      if (!value) throw fail(node, "fixed." + k, "expected a string, number or boolean");
      if (k == "batch_size" || k == "number_gpus")  // one depends on the other: both are read per point
        throw fail(node, "fixed." + k, "seed 003's " + k + " goes in [space] (a list of one value is fine)");
      checked(node, k, *value);
      c.fixed.push_back(assignment(k, *value));
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
