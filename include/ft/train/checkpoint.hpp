#pragma once
// Checkpoints in a run's output directory:
//
//   checkpoint-<step>/         one complete checkpoint, written as
//                              checkpoint-<step>.tmp-<pid> and renamed when whole
//     config.json, model*.safetensors, tokenizer files   full fine-tunes (HF layout)
//     adapter_config.json, adapter_model.safetensors      LoRA (PEFT layout)
//     optimizer.safetensors    optimizer state and master weights, by name, or
//     optimizer-<r>-of-<w>.safetensors  rank r's shard of them (ZeRO)
//     trainer_state.json       step, loss scale, data position, what the run was
//   latest -> checkpoint-<step>  a symbolic link, replaced atomically (rename)
//
// Only the newest save_total_limit checkpoints are kept. Because every random
// draw is a function of (seed, counter) and the data order of (seed, epoch),
// the step number restores the RNG and the data position; nothing else needs
// to be saved for a resumed run to continue bit for bit.
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/safetensors.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/optim/runtime.hpp"

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

// The checkpoint directory `resume` names ("none", "latest", "auto" or a path); empty for none.
inline std::filesystem::path resolve_resume(const std::filesystem::path& output_dir, const std::string& resume) {
  if (resume == "none") return {};
  if (resume == "auto") return std::filesystem::exists(output_dir / "latest") ? resolve_resume(output_dir, "latest") : "";
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

// A rank's optimizer state file: whole ("optimizer.safetensors") when every
// rank holds the same state, else one file per rank.
inline std::string state_file_name(int rank, int world) {
  if (world <= 0) return "optimizer.safetensors";
  return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

// Writes `arrays` by name; a range of a longer array is recorded in the
// metadata ("ranges": {name: [begin, total]}), so that any other sharding
// can read it back.
inline void write_state(const std::filesystem::path& file, const std::vector<optim::StateArray>& arrays) {
  std::vector<io::TensorToWrite> tensors;
  nlohmann::json ranges = nlohmann::json::object();
  for (const optim::StateArray& a : arrays) {
    const std::size_t width = io::detail::dtype_size(a.dtype);
    if (a.bytes == 0 || !a.written) continue;  // a rank's empty share of a small buffer, or another's to write
    io::TensorToWrite t{a.name, a.dtype, {std::int64_t(a.bytes / width)}, {}, {}};
    if (a.to_host == &device::Cpu::to_host) {
      t.bytes = std::span<const std::byte>(static_cast<const std::byte*>(a.data), a.bytes);
    } else {
      // In a device's memory: copied to the host when the writer reaches it, a piece at a time.
      t.produce = [a](const io::ByteSink& put) {
        constexpr std::size_t piece = std::size_t(1) << 20;
        std::vector<std::byte> bytes;
        for (std::size_t done = 0; done < a.bytes; done += bytes.size()) {
          bytes.resize(std::min(piece, a.bytes - done));
          a.to_host(bytes.data(), static_cast<const std::byte*>(a.data) + done, bytes.size());
          put(bytes);
        }
      };
    }
    tensors.push_back(std::move(t));
    if (a.begin >= 0) ranges[a.name] = {a.begin, a.total};
  }
  io::write_safetensors(file, tensors, {{"format", "ft"}, {"ranges", ranges.dump()}});
}

// The state files of a checkpoint: optimizer.safetensors, or every rank's shard.
inline std::vector<std::filesystem::path> state_files(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "optimizer.safetensors")) return {dir / "optimizer.safetensors"};
  std::vector<std::filesystem::path> files;
  int world = -1;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    int r = 0, w = 0;
    const std::string name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "optimizer-%d-of-%d.safetensors", &r, &w) == 2) world = w;
  }
  if (world < 1) throw Error(dir.string() + ": has no optimizer.safetensors nor optimizer-<rank>-of-<world>.safetensors");
  for (int r = 0; r < world; ++r) {
    files.push_back(dir / state_file_name(r, world));
    if (!std::filesystem::exists(files.back()))
      throw Error(dir.string() + ": " + files.back().filename().string() + " is missing; the checkpoint is incomplete");
  }
  return files;
}

// Fills `arrays` from a checkpoint's state files, whichever sharding wrote
// them: a whole array is read by name, a range is put together from the
// ranges of the same name that overlap it. `names` are the names of the
// state arrays of the whole run (every rank's); the files must hold exactly
// those.
inline void read_state(const std::filesystem::path& dir, const std::vector<optim::StateArray>& arrays,
                       const std::set<std::string>& names) {
  struct Piece {
    io::TensorView tensor;  // holds its file's mapping
    std::int64_t begin = -1, total = 0;
  };
  std::multimap<std::string, Piece> pieces;
  for (const auto& path : state_files(dir)) {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    const auto& meta = file.metadata();
    const auto it = meta.find("ranges");
    const nlohmann::json ranges = it == meta.end() ? nlohmann::json::object() : nlohmann::json::parse(it->second);
    for (const io::TensorView& t : file.tensors()) {
      Piece p{t, -1, 0};
      if (ranges.contains(t.name)) {
        p.begin = ranges[t.name][0].get<std::int64_t>();
        p.total = ranges[t.name][1].get<std::int64_t>();
      }
      pieces.emplace(t.name, p);
    }
  }
  const std::string where = dir.string() + ": ";
  for (const auto& [name, piece] : pieces)
    if (!names.count(name))
      throw Error(where + "holds the state \"" + name + "\", which this run does not have (was it written by a run "
                  "with another optimizer or adapter?)");
  for (const std::string& name : names)
    if (!pieces.count(name)) throw Error(where + "has no state \"" + name + "\"");

  for (const optim::StateArray& a : arrays) {
    const std::size_t width = io::detail::dtype_size(a.dtype);
    const std::int64_t n = std::int64_t(a.bytes / width);
    std::int64_t covered = 0;
    for (auto [it, end] = pieces.equal_range(a.name); it != end; ++it) {
      const Piece& p = it->second;
      if (p.tensor.dtype != a.dtype)
        throw Error(where + "state \"" + a.name + "\" is " + p.tensor.dtype + ", this run's is " + a.dtype);
      const std::int64_t length = std::int64_t(p.tensor.bytes.size() / width);
      if (a.begin < 0) {  // a whole array
        if (length != n) throw Error(where + "state \"" + a.name + "\" has another size than this run's");
        a.from_host(a.data, p.tensor.bytes.data(), a.bytes);
        covered = n;
        break;
      }
      // A range of this run's array, from ranges of the file's (a file without ranges holds whole arrays).
      const std::int64_t begin = p.begin < 0 ? 0 : p.begin, total = p.begin < 0 ? length : p.total;
      if (total != a.total)
        throw Error(where + "state \"" + a.name + "\" belongs to an array of " + std::to_string(total) +
                    " elements, this run's has " + std::to_string(a.total));
      const std::int64_t from = std::max(a.begin, begin), to = std::min(a.begin + n, begin + length);
      if (from >= to) continue;
      a.from_host(static_cast<std::byte*>(a.data) + (from - a.begin) * std::int64_t(width),
                  p.tensor.bytes.data() + (from - begin) * std::int64_t(width), std::size_t(to - from) * width);
      covered += to - from;
    }
    if (covered != n)
      throw Error(where + "state \"" + a.name + "\" covers " + std::to_string(covered) + " of the " +
                  std::to_string(n) + " elements this rank needs");
  }
}

inline void write_json(const std::filesystem::path& file, const nlohmann::ordered_json& json) {
  std::ofstream out(file);
  out << json.dump(2) << "\n";
  if (!out) throw Error(file.string() + ": cannot be written");
}

}  // namespace ft::train
