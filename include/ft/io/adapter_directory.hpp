#pragma once
// Where a PEFT adapter is, from what a user names: the adapter's own
// directory (adapter_config.json beside its weights), a checkpoint of a
// training run (which holds one), or a finished run's output_dir (its final
// adapter in adapter/). What [lora] and [prompt_tuning] init_from accept.
#include <filesystem>
#include <string>

#include "ft/core/error.hpp"

namespace ft::io {

inline std::filesystem::path adapter_directory(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) throw Error(path.string() + ": no such directory");
  if (!fs::is_directory(path)) throw Error(path.string() + ": not a directory (a PEFT adapter is a directory)");
  if (fs::exists(path / "adapter_config.json")) return path;
  if (fs::exists(path / "adapter" / "adapter_config.json")) return path / "adapter";
  if (fs::exists(path / "latest"))
    throw Error(path.string() + ": this run has not finished (no adapter/); start from one of its checkpoints: " +
                (path / "latest").string() + " or " + (path / "checkpoint-N").string());
  throw Error(path.string() + ": neither a PEFT adapter (no adapter_config.json) nor a finished run's output_dir "
                              "(no adapter/adapter_config.json)");
}

}  // namespace ft::io
