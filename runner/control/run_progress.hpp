#pragma once
// Where a training run is, read from its metrics.jsonl: what `ftrun control
// status` answers for a train job. A run resumed into the same output_dir
// appends to the file, so only what this process appends counts: the
// reading starts at the file's end when the job registers, and each status
// reads only what was appended since the last.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "control/appended_lines.hpp"

namespace ftrun::control {

class RunProgress {
public:
  explicit RunProgress(const std::filesystem::path& output_dir);

  // {"state": "starting" | "training", "step", "total_steps", "loss",
  // "learning_rate", "tokens_per_second", "seconds_per_step", "last_save"}:
  // the fields known so far.
  const nlohmann::ordered_json& read();

private:
  AppendedLines lines_;
  nlohmann::ordered_json progress_{{"state", "starting"}};
};

}  // namespace ftrun::control
