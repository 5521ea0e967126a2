#pragma once
// Writing a directory so that a reader sees either the old one or the whole
// new one, never half of it: everything goes into `<dst>.tmp-<pid>` first,
// each file is flushed to disk, and the directory is renamed into place. A
// kill at any moment leaves at most a stale temporary, which the next writer
// removes. Used by checkpoints and by ftrun convert.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "ft/core/error.hpp"

namespace ft::io {

namespace detail {
inline void sync_path(const std::filesystem::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}
}  // namespace detail

// Flushes every file under `dir`, then `dir` itself, to disk.
inline void sync_tree(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) detail::sync_path(entry.path());
  detail::sync_path(dir);
}

inline std::filesystem::path staging_path(const std::filesystem::path& dst) {
  return dst.string() + ".tmp-" + std::to_string(::getpid());
}

// A fresh, empty staging directory for dst.
inline std::filesystem::path stage_directory(const std::filesystem::path& dst) {
  const std::filesystem::path staging = staging_path(dst);
  std::filesystem::remove_all(staging);
  std::filesystem::create_directories(staging);
  return staging;
}

// Flushes a complete staging directory to disk and renames it to dst. With
// replace, an existing dst is swapped out only once the new one is complete.
inline void commit_directory(const std::filesystem::path& staging, const std::filesystem::path& dst, bool replace) {
  namespace fs = std::filesystem;
  sync_tree(staging);
  if (fs::exists(dst)) {
    if (!replace) throw Error(dst.string() + ": already exists");
    const fs::path old = dst.string() + ".old-" + std::to_string(::getpid());
    fs::rename(dst, old);
    fs::rename(staging, dst);
    fs::remove_all(old);
  } else {
    fs::rename(staging, dst);
  }
  detail::sync_path(dst.parent_path().empty() ? fs::path(".") : dst.parent_path());
}

// Calls write(staging) and renames staging to dst. On failure the staging
// directory is removed and the error passes on.
inline void write_directory_atomically(const std::filesystem::path& dst,
                                       const std::function<void(const std::filesystem::path&)>& write,
                                       bool replace = false) {
  const std::filesystem::path staging = stage_directory(dst);
  try {
    write(staging);
    commit_directory(staging, dst, replace);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(staging, ignored);
    throw;
  }
}

}  // namespace ft::io
