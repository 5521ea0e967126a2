#include "control/run_progress.hpp"

#include <fstream>
#include <system_error>

namespace ftrun::control {

RunProgress::RunProgress(const std::filesystem::path& output_dir) : file_(output_dir / "metrics.jsonl") {
  std::error_code ec;
  offset_ = std::filesystem::file_size(file_, ec);
  if (ec) offset_ = 0;  // no file yet: this process writes it from the top
}

const nlohmann::ordered_json& RunProgress::read() {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(file_, ec);
  if (ec || size <= offset_) return progress_;
  std::string chunk(std::size_t(size - offset_), '\0');
  std::ifstream in(file_, std::ios::binary);
  in.seekg(std::streamoff(offset_));
  in.read(chunk.data(), std::streamsize(chunk.size()));
  chunk.resize(std::size_t(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  std::size_t begin = 0;
  for (std::size_t end; (end = partial_.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const nlohmann::json j = nlohmann::json::parse(partial_.begin() + std::ptrdiff_t(begin),
                                                   partial_.begin() + std::ptrdiff_t(end), nullptr, false);
    if (!j.is_object() || !j.contains("split")) continue;  // a line torn by a kill
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
  }
  partial_.erase(0, begin);
  return progress_;
}

}  // namespace ftrun::control
