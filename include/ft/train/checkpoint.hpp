#pragma once
// Checkpoints in a run's output directory:
//
//   checkpoint-<step>/         one complete checkpoint, written as
//                              checkpoint-<step>.tmp-<pid> and renamed when whole
//     config.json, model*.safetensors, tokenizer files   full fine-tunes (HF layout)
//     adapter_config.json, adapter_model.safetensors      LoRA (PEFT layout)
//     optimizer.safetensors    optimizer state and master weights, by name
//     trainer_state.json       step, loss scale, data position, what the run was
//   latest -> checkpoint-<step>  a symbolic link, replaced atomically (rename)
//
// Only the newest save_total_limit checkpoints are kept. Because every random
// draw is a function of (seed, counter) and the data order of (seed, epoch),
// the step number restores the RNG and the data position; nothing else needs
// to be saved for a resumed run to continue bit for bit.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/safetensors.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/train/optimizer_state.hpp"

namespace ft::train {

inline std::string checkpoint_name(std::int64_t step) { return "checkpoint-" + std::to_string(step); }

// Step of a complete checkpoint directory name, or -1.
inline std::int64_t checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "checkpoint-";
  if (!name.starts_with(prefix) || name.size() == prefix.size()) return -1;
  const std::string digits = name.substr(prefix.size());
  if (!std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 15) return -1;
  return std::stoll(digits);
}

// Complete checkpoints, oldest first.
inline std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output_dir) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  if (std::filesystem::is_directory(output_dir))
    for (const auto& entry : std::filesystem::directory_iterator(output_dir))
      if (entry.is_directory())
        if (std::int64_t s = checkpoint_step(entry.path().filename().string()); s >= 0) found.emplace_back(s, entry.path());
  std::ranges::sort(found);
  std::vector<std::filesystem::path> out;
  for (auto& [s, p] : found) out.push_back(p);
  return out;
}

// Leftovers of a writer that was killed: temporaries never renamed.
inline void remove_stale_staging(const std::filesystem::path& output_dir) {
  if (!std::filesystem::is_directory(output_dir)) return;
  for (const auto& entry : std::filesystem::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos)
      std::filesystem::remove_all(entry.path());
  }
}

// Points output_dir/latest at `name` (a sibling directory), atomically.
inline void update_latest(const std::filesystem::path& output_dir, const std::string& name) {
  const auto link = output_dir / "latest", temporary = io::staging_path(link);
  std::filesystem::remove(temporary);
  std::filesystem::create_directory_symlink(name, temporary);
  std::filesystem::rename(temporary, link);
}

// Deletes the oldest checkpoints beyond `keep`; never the one `latest` names.
inline void prune_checkpoints(const std::filesystem::path& output_dir, std::int64_t keep) {
  auto all = list_checkpoints(output_dir);
  std::filesystem::path latest;
  if (std::filesystem::is_symlink(output_dir / "latest")) latest = std::filesystem::read_symlink(output_dir / "latest");
  for (std::size_t i = 0; i + std::size_t(keep) < all.size(); ++i)
    if (all[i].filename() != latest.filename()) std::filesystem::remove_all(all[i]);
}

// The checkpoint directory `resume` names ("none", "latest" or a path); empty for none.
inline std::filesystem::path resolve_resume(const std::filesystem::path& output_dir, const std::string& resume) {
  if (resume == "none") return {};
  if (resume == "latest") {
    const auto link = output_dir / "latest";
    if (!std::filesystem::exists(link))
      throw Error("checkpoint.resume = \"latest\", but " + link.string() +
                  " does not exist (no complete checkpoint was saved in this output_dir yet)");
    return std::filesystem::canonical(link);
  }
  if (!std::filesystem::exists(std::filesystem::path(resume) / "trainer_state.json"))
    throw Error("checkpoint.resume: " + resume + " is not a checkpoint directory (no trainer_state.json)");
  return resume;
}

// Named arrays into one safetensors file, and back. Restoring requires the
// same names, dtypes and sizes: a checkpoint of another run is refused.
inline void write_state(const std::filesystem::path& file, const std::vector<StateArray>& arrays) {
  std::vector<io::TensorToWrite> tensors;
  for (const StateArray& a : arrays) {
    const std::size_t width = io::detail::dtype_size(a.dtype);
    tensors.push_back({a.name, a.dtype, {std::int64_t(a.bytes / width)},
                       std::span<const std::byte>(static_cast<const std::byte*>(a.data), a.bytes)});
  }
  io::write_safetensors(file, tensors, {{"format", "ft"}});
}

inline void read_state(const std::filesystem::path& file, const std::vector<StateArray>& arrays) {
  const io::SafetensorsFile state = io::SafetensorsFile::open(file);
  if (state.tensors().size() != arrays.size())
    throw Error(file.string() + ": holds " + std::to_string(state.tensors().size()) + " state arrays, this run has " +
                std::to_string(arrays.size()) + " (was it written by a run with another optimizer or adapter?)");
  for (const StateArray& a : arrays) {
    const io::TensorView* t = state.find(a.name);
    if (!t) throw Error(file.string() + ": has no state \"" + a.name + "\"");
    if (t->dtype != a.dtype || t->bytes.size() != a.bytes)
      throw Error(file.string() + ": state \"" + a.name + "\" has another dtype or size than this run's");
    std::memcpy(a.data, t->bytes.data(), a.bytes);
  }
}

inline void write_json(const std::filesystem::path& file, const nlohmann::ordered_json& json) {
  std::ofstream out(file);
  out << json.dump(2) << "\n";
  if (!out) throw Error(file.string() + ": cannot be written");
}

}  // namespace ft::train
