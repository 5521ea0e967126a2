#pragma once
// A benchmark grid (`ftrun bench GRID.toml`): a base recipe, the keys that
// vary over the grid's points and those fixed for every point.
//
//   recipe = "../recipes/ft_tiny_llama/full.toml"   # relative to this file
//   output = "results/tiny"                         # relative to this file; --output overrides
//   experiment = "measure"       # or "stability": repeats counted as f_gpu_oom, f_other_error, f_no_error
//   repeats = 1                  # runs of every point
//   retries = 1                  # a failed run (not an invalid one) is run again this many times
//   point_timeout_seconds = 1800 # a run past it is ended and counts as failed
//
//   [fixed]                      # recipe keys set for every point
//   "train.max_steps" = 5
//
//   [space]                      # every combination of these values is a point
//   batch_size = [1, 2]
//   number_gpus = [1, 2]
//   "strategy.precision" = ["fp32", "bf16-mixed"]
//
//   [models]                     # the model names of ado's SFTTrainer actuator, as paths (relative to this file)
//   "smollm2-135m" = "models/SmolLM2-135M"
//
// A key is a recipe key ("section.key") or one of ado's entity names
// (ado_entities.hpp), in [space] or [fixed]. A point that breaks one of
// ado's validity rules, or that ft cannot run, is invalid and never runs.
// Every value is checked against the base recipe when the grid is read, so a
// typo is an error naming the grid's file, line and key before anything runs.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ftrun {

struct GridPoint {
  std::size_t index = 0;
  // The space's keys and this point's values, as the grid writes them.
  std::vector<std::pair<std::string, std::string>> entity;
  std::vector<std::string> sets;  // the recipe assignments that make this point
  std::string invalid;            // why the point cannot run; empty when it can

  // "batch_size=2 number_gpus=1": what names the point in results.
  std::string id() const;
  const std::string* value(const std::string& key) const;
};

struct Grid {
  std::filesystem::path file, recipe, output;
  std::string experiment = "measure";
  std::int64_t repeats = 1, retries = 1;
  double point_timeout_seconds = 1800;
  std::vector<std::string> keys;  // the space's keys, in the file's order
  std::vector<GridPoint> points;

  bool stability() const { return experiment == "stability"; }
};

// Reads and checks a grid; `output`, when not empty, replaces the grid's.
Grid load_grid(const std::filesystem::path& file, const std::filesystem::path& output = {});

}  // namespace ftrun
