#include "control/run_progress.hpp"

#include <limits>


namespace ftrun::control {

RunProgress::RunProgress(const std::filesystem::path& output_dir)
    : lines_(AppendedLines::at_end(output_dir / "metrics.jsonl")) {}

const nlohmann::ordered_json& RunProgress::read() {
  lines_.read([this](std::string_view line) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("split")) return;  // a line torn by a kill
    const std::string split = j["split"];
    nlohmann::ordered_json& out = progress_;
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
  }, {}, std::numeric_limits<std::uintmax_t>::max());  // all of it: a status is of now
  return progress_;
}

}  // namespace ftrun::control
