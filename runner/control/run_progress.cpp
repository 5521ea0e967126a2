#include "control/run_progress.hpp"

#include <fstream>
#include <string>

namespace ftrun::control {

namespace {

// Calls `record` with every record of the file, in order; lines that are not JSON are skipped.
template <class Record>
void each_record(const std::filesystem::path& output_dir, Record&& record) {
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("split")) record(j);
  }
}

}  // namespace

std::size_t setup_records(const std::filesystem::path& output_dir) {
  std::size_t n = 0;
  each_record(output_dir, [&](const nlohmann::json& j) { n += j["split"] == "setup"; });
  return n;
}

nlohmann::ordered_json run_progress(const std::filesystem::path& output_dir, std::size_t setups_before) {
  nlohmann::ordered_json out{{"state", "starting"}};
  std::size_t setups = 0;
  each_record(output_dir, [&](const nlohmann::json& j) {
    const std::string split = j["split"];
    if (split == "setup") ++setups;
    if (setups <= setups_before) return;
    if (split == "setup") {
      out["state"] = "training";
      out["step"] = j.value("step", 0);
      if (j.contains("total_steps")) out["total_steps"] = j["total_steps"];
    } else if (split == "train") {
      out["step"] = j["step"];
      for (const char* key : {"loss", "learning_rate"})
        if (j.contains(key)) out[key] = j[key];
      if (j.contains("train_tokens_per_second")) out["tokens_per_second"] = j["train_tokens_per_second"];
      if (j.contains("seconds_per_step")) out["seconds_per_step"] = j["seconds_per_step"];
    } else if (split == "save") {
      out["last_save"] = j["step"];
    }
  });
  return out;
}

}  // namespace ftrun::control
