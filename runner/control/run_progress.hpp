#pragma once
// Where a training run is, read from its metrics.jsonl: what `ftrun control
// status` answers for a train job. A run resumed into the same output_dir
// appends to the file, so only the records after the first `setups_before`
// setup records are this process's.
#include <cstddef>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace ftrun::control {

// The number of setup records in the run's metrics.jsonl (0 when there is none).
std::size_t setup_records(const std::filesystem::path& output_dir);

// {"state": "starting" | "training", "step", "total_steps", "loss",
// "learning_rate", "tokens_per_second", "seconds_per_step", "last_save"}:
// the fields known so far.
nlohmann::ordered_json run_progress(const std::filesystem::path& output_dir, std::size_t setups_before);

}  // namespace ftrun::control
