#pragma once
// A command run as its own process, as a benchmark point must be: its
// output to files, a time limit after which its whole process group (an
// mpirun and its ranks) is ended, and no orphan left behind when the parent
// is killed.
#include <filesystem>
#include <string>
#include <vector>

namespace ftrun {

struct ChildResult {
  int exit_code = -1;  // -1 when it did not exit by itself
  int signal = 0;      // the signal that ended it, if one did
  bool timed_out = false;
  double seconds = 0;
};

// `timeout_seconds` <= 0: no limit.
ChildResult run_child(const std::vector<std::string>& argv, const std::filesystem::path& stdout_file,
                      const std::filesystem::path& stderr_file, double timeout_seconds);

// The last non-empty line of a file: a failed run's one-line error.
std::string last_line(const std::filesystem::path& file);

}  // namespace ftrun
