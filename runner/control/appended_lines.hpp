#pragma once
// The lines a growing file (a run's metrics.jsonl) gains, read on from where
// the last read stopped, so that following a long run never reads its file
// twice. A line the writer has begun but not ended waits for the next read.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace ftrun::control {

class AppendedLines {
public:
  // Reads from `offset`; at_end() starts after the file's last complete line.
  explicit AppendedLines(std::filesystem::path file, std::uintmax_t offset = 0);
  static AppendedLines at_end(std::filesystem::path file);

  // Calls `line` with each complete line appended since the last read, at
  // most `most` bytes of them (the rest on the next read). A file shorter
  // than what was read (written again from the top) is read from its start,
  // and `restarted` is called first.
  void read(const std::function<void(std::string_view)>& line, const std::function<void()>& restarted = {},
            std::uintmax_t most = std::uintmax_t(4) << 20);

private:
  std::filesystem::path file_;
  std::uintmax_t offset_ = 0;
  std::string partial_;
};

}  // namespace ftrun::control
